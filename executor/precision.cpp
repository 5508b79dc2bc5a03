#include "executor/precision.hpp"

#include <algorithm>

namespace stagecraft::executor {

const char* to_string(Format f) {
  switch (f) {
    case Format::kBf16: return "bf16";
    case Format::kFp16: return "fp16";
    case Format::kFp32: break;
  }
  return "fp32";
}

Format format_of(spec::Dtype dtype) {
  switch (spec::storage_dtype(dtype)) {
    case spec::Dtype::kBf16: return Format::kBf16;
    case spec::Dtype::kFp16: return Format::kFp16;
    default: return Format::kFp32;
  }
}

Precision precision_of(const program::Program& prog) {
  Precision p;
  p.store = format_of(prog.training.dtype);
  // reduce_bytes is the framework's reduce dtype's width: 4 is fp32; 2 the training's reduce_dtype
  // when it names one, else the storage dtype
  if (prog.reduce_bytes == 4) {
    p.reduce = Format::kFp32;
  } else {
    p.reduce = prog.training.reduce_dtype ? format_of(*prog.training.reduce_dtype) : p.store;
  }
  return p;
}

}  // namespace stagecraft::executor

namespace stagecraft::executor {

LossScaling loss_scaling(spec::Framework framework) {
  LossScaling s;
  switch (framework) {
    case spec::Framework::kMegatron:
    case spec::Framework::kMegatron2021:
      s.initial = 4294967296.0;  // 2^32
      break;
    case spec::Framework::kDeepSpeed:
    case spec::Framework::kDeepSpeed05:
      s.restore_hysteresis = false;
      break;
    case spec::Framework::kFsdp:
    case spec::Framework::kFsdp2:
      s.growth_interval = 2000;
      s.hysteresis = 1;
      break;
  }
  return s;
}

void LossScaler::update(bool overflow) {
  if (overflow) {
    good_steps_ = 0;
    hysteresis_left_ -= 1;
    if (hysteresis_left_ <= 0) scale_ = std::max(scale_ * cfg_.backoff, cfg_.min_scale);
    return;
  }
  if (++good_steps_ == cfg_.growth_interval) {
    good_steps_ = 0;
    if (cfg_.restore_hysteresis) hysteresis_left_ = cfg_.hysteresis;
    scale_ *= cfg_.growth;
  }
}

}  // namespace stagecraft::executor
