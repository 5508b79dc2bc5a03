// Mixed precision as the frameworks run it (Megatron-LM's --bf16, DeepSpeed's "bf16", FSDP's
// MixedPrecision): which numeric format each tensor is stored in and each message travels in,
// derived from the lowered Program, and the rounding that puts a value into a format. The CPU
// executor computes in fp32 and rounds at every point where a GPU kernel stores a 16-bit value, so
// a bf16 CPU run is the oracle of a bf16 GPU run:
//
//   working parameters   the storage dtype (bf16): rounded from the fp32 master copy after every
//                        optimizer step (Megatron's _copy_main_params_to_model_params, DeepSpeed's
//                        bf16 partition copy); ZeRO-3 gathers these 16-bit values
//   master parameters,   fp32 (ZeRO's K = 12 bytes per parameter: master 4, Adam m 4, v 4)
//   Adam m and v
//   activations and      the storage dtype: every kernel output a GPU writes to memory — GEMM
//   their gradients      outputs (cuBLASLt, fp32 accumulate, one rounding of the result, bias and
//                        β = 1 accumulation included), norm outputs, activation functions, RoPE,
//                        the attention output and d(q|k|v), the residual sum, the embedding's
//                        lookup, the classifier's d(logits)
//   kept in fp32         what fused kernels hold in registers or save in fp32: the attention
//                        probabilities (a fused attention recomputes them in fp32 from the 16-bit
//                        q and k), the softmax of the classifier and the loss, a norm's mean and
//                        rstd (and x̂, which a GPU kernel recomputes from the stored x and those)
//   weight gradients     accumulated in fp32 straight from the GEMM (Megatron's
//                        gradient_accumulation_fusion into main_grad, β = 1; the norms' and the
//                        embedding's the same), over every micro-batch of the step
//   data-parallel        the Program's reduce dtype (reduce_bytes: the framework's, e.g. DeepSpeed's
//   reductions           communication_data_type = the model dtype, Megatron's fp32 main grads): a
//                        16-bit reduction sends each rank's fp32 sum rounded and rounds every
//                        partial sum, as NCCL's bf16 kernels do; the result lands in fp32
//   pipeline messages,   the storage dtype (they are 16-bit activations already); the vocabulary-
//   tp collectives       parallel loss's statistics (max, sum of exp) stay fp32 (Megatron upcasts
//                        the logits), as do the gradient norm's partial sums (double)
//
// fp16 is the same with 16-bit values of 5 exponent and 10 mantissa bits (a value past 65504 becomes
// inf) and dynamic loss scaling (LossScaler, below). Rounding is IEEE round-to-nearest-even with NaN
// kept (Eigen::bfloat16, Eigen::half), as __float2bfloat16_rn / __float2half_rn on the device.
#pragma once

#include <cstdint>
#include <span>

#include <Eigen/Core>

#include "core/program/program.hpp"

namespace stagecraft::executor {

// A format values are stored in or travel in. kFp32 is no rounding at all.
enum class Format : uint8_t { kFp32, kBf16, kFp16 };

const char* to_string(Format f);
inline int64_t bytes_of(Format f) { return f == Format::kFp32 ? 4 : 2; }
// The format of a stored element of `dtype` (fp8 training stores bf16; tf32 is stored as fp32).
Format format_of(spec::Dtype dtype);

inline float round_to(Format f, float x) {
  switch (f) {
    case Format::kBf16: return static_cast<float>(Eigen::bfloat16(x));
    case Format::kFp16: return static_cast<float>(Eigen::half(x));
    case Format::kFp32: break;
  }
  return x;
}
inline double round_to(Format f, double x) { return f == Format::kFp32 ? x : round_to(f, static_cast<float>(x)); }
template <typename S>
void round_all(Format f, S* values, int64_t count) {
  if (f == Format::kFp32) return;
  for (int64_t i = 0; i < count; ++i) values[i] = round_to(f, values[i]);
}
template <typename S>
void round_all(Format f, std::span<S> values) {
  round_all(f, values.data(), static_cast<int64_t>(values.size()));
}

// A 16-bit format's bits of a value (rounded), and the value of bits: the wire's encoding.
inline uint16_t pack16(Format f, float x) {
  return f == Format::kFp16 ? Eigen::numext::bit_cast<uint16_t>(Eigen::half(x))
                            : Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(x));
}
inline float unpack16(Format f, uint16_t bits) {
  return f == Format::kFp16 ? static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits))
                            : static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(bits));
}

// Where each kind of tensor is rounded to, for one Program (the table above).
struct Precision {
  Format store = Format::kFp32;    // working parameters, activations, their gradients, kernel outputs
  Format reduce = Format::kFp32;   // data-parallel gradient reductions (the Program's reduce_bytes)
  // Whether fp32 master parameters sit beside 16-bit working ones.
  bool mixed() const { return store != Format::kFp32; }
};
Precision precision_of(const program::Program& prog);

}  // namespace stagecraft::executor

namespace stagecraft::executor {

// Dynamic loss scaling for fp16 training (fp16's 5 exponent bits overflow at 65504 and lose
// gradients below 2^-24): the loss's gradient is multiplied by S before the backward, every
// gradient is S times its value; a step whose gradients hold an inf or NaN (the global gradient
// norm is not finite) is skipped, the optimizer untouched; the others divide the gradients by S
// before clipping and Adam. S moves as Megatron-LM's DynamicGradScaler
// (megatron/core/optimizer/grad_scaler.py, update()):
//   overflow:  growth_tracker = 0; hysteresis_tracker -= 1;
//              if hysteresis_tracker <= 0: S = max(S · backoff, min_scale)
//   else:      growth_tracker += 1; if growth_tracker == growth_interval: growth_tracker = 0,
//              hysteresis_tracker = hysteresis (Megatron restores it here), S = S · growth
// with each framework's defaults:
//   megatron, megatron-2021   --initial-loss-scale 2^32, --min-loss-scale 1, --loss-scale-window
//                             1000, --hysteresis 2 (megatron/training/arguments.py)
//   deepspeed, deepspeed-0.5  fp16.initial_scale_power 16 (2^16), loss_scale_window 1000,
//                             hysteresis 2, min_loss_scale 1 (deepspeed/runtime/constants.py);
//                             DynamicLossScaler (runtime/fp16/loss_scaler.py) never restores the
//                             hysteresis unless consecutive_hysteresis is set (off by default)
//   fsdp, fsdp2               torch.amp.GradScaler: init_scale 2^16, growth_interval 2000,
//                             backoff 0.5, growth 2, no hysteresis (it backs off at every overflow)
struct LossScaling {
  double initial = 65536;
  double min_scale = 1;
  double growth = 2, backoff = 0.5;
  int64_t growth_interval = 1000;
  int hysteresis = 2;
  bool restore_hysteresis = true;  // on growth (Megatron); DeepSpeed's default never restores it
};
LossScaling loss_scaling(spec::Framework framework);

class LossScaler {
 public:
  explicit LossScaler(const LossScaling& cfg) : cfg_(cfg), scale_(cfg.initial), hysteresis_left_(cfg.hysteresis) {}
  double scale() const { return scale_; }
  // After a step: whether its gradients overflowed (it was skipped).
  void update(bool overflow);
  // The scaler's state, for checkpoints: S, the good steps since the last growth or overflow, the
  // overflows the hysteresis still absorbs.
  struct State {
    double scale = 1;
    int64_t good_steps = 0;
    int hysteresis_left = 0;
  };
  State state() const { return {scale_, good_steps_, hysteresis_left_}; }
  void restore(const State& s) {
    scale_ = s.scale;
    good_steps_ = s.good_steps;
    hysteresis_left_ = s.hysteresis_left;
  }

 private:
  LossScaling cfg_;
  double scale_ = 1;
  int64_t good_steps_ = 0;
  int hysteresis_left_ = 0;
};

}  // namespace stagecraft::executor
