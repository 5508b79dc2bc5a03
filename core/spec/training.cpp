#include "core/spec/training.hpp"

#include <algorithm>

#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"

namespace stagecraft::spec {

using nlohmann::json;

const char* to_string(Optimizer o) { return o == Optimizer::kAdamW ? "adamw" : "adam"; }

Training training_from_json(const json& j, const std::string& file) {
  ObjectReader r(j, file, "");
  Training t;
  t.file = file;
  t.global_batch = r.integer("global_batch");
  if (t.global_batch < 1 || t.global_batch > limits::kGlobalBatch) {
    r.fail_value("global_batch", "a positive number of sequences, at most " + std::to_string(limits::kGlobalBatch));
  }
  if (r.has("seq_len")) {
    t.seq_len = r.integer("seq_len");
    if (*t.seq_len < 1 || *t.seq_len > limits::kSeqLen) {
      r.fail_value("seq_len", "a positive number of tokens per sequence, at most " + std::to_string(limits::kSeqLen));
    }
  }
  t.dtype = *parse_dtype(r.choice("dtype", {"fp16", "bf16", "fp32", "fp8"}));
  t.optimizer = r.choice_or("optimizer", {"adam", "adamw"}, "adam") == "adamw" ? Optimizer::kAdamW
                                                                            : Optimizer::kAdam;
  if (r.has("framework")) {
    const json& f = r.raw("framework");
    const auto framework = [](ObjectReader& in, std::string_view key) {
      return *parse_framework(in.choice(key, {to_string(Framework::kDeepSpeed), to_string(Framework::kDeepSpeed05),
                                              to_string(Framework::kFsdp), to_string(Framework::kFsdp2),
                                              to_string(Framework::kMegatron),
                                              to_string(Framework::kMegatron2021)}));
    };
    if (f.is_string()) {
      t.framework = framework(r, "framework");
    } else if (f.is_object()) {
      ObjectReader fr = r.object("framework");
      t.framework = framework(fr, "name");
      if (fr.has("reduce_dtype")) t.reduce_dtype = parse_dtype(fr.choice("reduce_dtype", {"fp32", "bf16", "fp16"}));
      if (fr.has("reduce_communicator")) {
        t.shared_reduce_communicator = fr.choice("reduce_communicator", {"shared", "separate"}) == "shared";
      }
      fr.finish();
    } else {
      r.fail("framework", "a framework name (deepspeed, deepspeed-0.5, fsdp, fsdp2, megatron, megatron-2021) or an object "
                          "{\"name\": ..., \"reduce_dtype\": ..., \"reduce_communicator\": ...}");
    }
  }
  t.kernels = r.choice_or("kernels", {"fused", "eager"}, "fused") == "eager" ? Kernels::kEager : Kernels::kFused;
  t.attention = r.string_or("attention", "flash");
  if (t.attention.empty() || t.attention.size() > 64) {
    r.fail_value("attention", "\"flash\", \"unfused\" or the name of a kernel the cluster's GPU lists");
  }
  t.tp_comm_overlap = r.boolean_or("tp_comm_overlap", false);
  t.moe_imbalance = r.number_or("moe_imbalance", 1.0);
  if (!(t.moe_imbalance >= 1.0 && t.moe_imbalance <= 1024.0)) {
    r.fail_value("moe_imbalance", "the busiest expert-parallel rank's tokens over the mean, from 1 to 1024");
  }
  t.moe_imbalance_sigma = r.number_or("moe_imbalance_sigma", 0.0);
  if (!(t.moe_imbalance_sigma >= 0.0 && t.moe_imbalance_sigma <= 1024.0)) {
    r.fail_value("moe_imbalance_sigma", "the stated 1-sigma of moe_imbalance, from 0 (none) to 1024");
  }
  t.moe_capacity_factor = r.number_or("moe_capacity_factor", 0.0);
  if (!(t.moe_capacity_factor == 0.0 || (t.moe_capacity_factor > 0.0 && t.moe_capacity_factor <= 1024.0))) {
    r.fail_value("moe_capacity_factor",
                 "each expert's capacity over its balanced share of the routed tokens, above 0 and at most 1024 "
                 "(absent or 0: dropless)");
  }
  t.moe_pad_to_capacity = r.boolean_or("moe_pad_to_capacity", false);
  if (t.moe_pad_to_capacity && t.moe_capacity_factor == 0.0) {
    r.fail_value("moe_pad_to_capacity", "false without moe_capacity_factor (a dropless expert has no capacity to pad to)");
  }
  t.moe_aux_loss_coeff = r.number_or("moe_aux_loss_coeff", 0.0);
  t.moe_router_bias_update_rate = r.number_or("moe_router_bias_update_rate", kMegatronExpertBiasUpdateRate);
  if (!(t.moe_router_bias_update_rate >= 0.0 && t.moe_router_bias_update_rate <= 1.0)) {
    r.fail_value("moe_router_bias_update_rate",
                 "the expert-bias update rate of bias-based balancing, from 0 to 1 (Megatron-Core: 1e-3 by default)");
  }
  if (!(t.moe_aux_loss_coeff >= 0.0 && t.moe_aux_loss_coeff <= 1.0)) {
    r.fail_value("moe_aux_loss_coeff", "the load-balancing loss's coefficient, from 0 to 1 (Megatron-Core: 0 by default, 1e-2 typical)");
  }
  t.source = r.string_or("source", "");
  r.finish();
  return t;
}

int Training::max_zero_stage() const {
  const int framework = framework_profile().max_zero_stage;
  return dtype == Dtype::kFp8 ? std::min(framework, 2) : framework;
}

std::string Training::zero_stage_reason() const {
  if (framework_profile().max_zero_stage == max_zero_stage()) {
    return framework_profile().max_zero_stage < 3
               ? "under framework \"" + std::string(to_string(framework)) +
                     "\": Megatron-LM's distributed optimizer shards the optimizer state only"
               : "";
  }
  return "with dtype fp8: Transformer Engine keeps each FP8 weight (and its transpose) across micro-batches, "
         "which ZeRO-3's partitioned parameters do not; FP8 with ZeRO-3 is not modelled";
}

FrameworkProfile Training::framework_profile() const {
  FrameworkProfile p = spec::framework_profile(framework, dtype);
  if (reduce_dtype) p.reduce_dtype = reduce_dtype;
  if (shared_reduce_communicator) p.one_dp_communicator = *shared_reduce_communicator;
  return p;
}

FrameworkProfile Training::framework_profile(int64_t tp, int zero_stage) const {
  FrameworkProfile p = framework_profile();
  p.one_dp_communicator = dp_communicator(framework, shared_reduce_communicator, tp, zero_stage).shared;
  return p;
}

int64_t Training::reduce_bytes() const { return bytes_of(reduce_dtype.value_or(storage_dtype(dtype))); }

std::pair<std::string, std::string> Training::origin_of(std::string_view key) const {
  for (const std::string& k : from_command_line) {
    if (k == key) {
      std::string option = "--";
      option += k;
      for (char& c : option) c = c == '_' ? '-' : c;
      return {option, ""};
    }
  }
  std::string pointer = "/";
  pointer += key;
  return {file, pointer};
}

std::string Training::label() const {
  std::string changed;
  for (const std::string& k : from_command_line) {
    const std::string value = k == "seq_len"        ? std::to_string(seq_len.value_or(0))
                              : k == "global_batch" ? std::to_string(global_batch)
                                                    : std::string(to_string(dtype));
    if (!changed.empty()) changed += ' ';
    changed += origin_of(k).first;
    changed += ' ';
    changed += value;
  }
  if (changed.empty()) return file;
  return file.empty() ? changed : file + " with " + changed;
}

Training with_overrides(Training t, const TrainingOverrides& o) {
  if (o.seq_len) {
    t.seq_len = o.seq_len;
    t.from_command_line.push_back("seq_len");
  }
  if (o.global_batch) {
    t.global_batch = *o.global_batch;
    t.from_command_line.push_back("global_batch");
  }
  if (o.dtype) {
    t.dtype = *o.dtype;
    t.from_command_line.push_back("dtype");
  }
  return t;
}

Training load_training(const std::string& path) { return training_from_json(read_json_file(path), path); }

json to_json(const Training& t) {
  json j = {{"global_batch", t.global_batch}, {"dtype", to_string(t.dtype)}, {"optimizer", to_string(t.optimizer)}};
  if (t.seq_len) j["seq_len"] = *t.seq_len;
  if (t.reduce_dtype || t.shared_reduce_communicator) {
    j["framework"] = {{"name", to_string(t.framework)}};
    if (t.reduce_dtype) j["framework"]["reduce_dtype"] = to_string(*t.reduce_dtype);
    if (t.shared_reduce_communicator) j["framework"]["reduce_communicator"] = *t.shared_reduce_communicator ? "shared" : "separate";
  } else {
    j["framework"] = to_string(t.framework);
  }
  if (t.kernels == Kernels::kEager) j["kernels"] = "eager";
  if (t.attention != "flash") j["attention"] = t.attention;
  if (t.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (t.moe_imbalance != 1.0) j["moe_imbalance"] = t.moe_imbalance;
  if (t.moe_imbalance_sigma != 0.0) j["moe_imbalance_sigma"] = t.moe_imbalance_sigma;
  if (t.moe_capacity_factor != 0.0) j["moe_capacity_factor"] = t.moe_capacity_factor;
  if (t.moe_pad_to_capacity) j["moe_pad_to_capacity"] = true;
  if (t.moe_aux_loss_coeff != 0.0) j["moe_aux_loss_coeff"] = t.moe_aux_loss_coeff;
  if (t.moe_router_bias_update_rate != kMegatronExpertBiasUpdateRate) j["moe_router_bias_update_rate"] = t.moe_router_bias_update_rate;
  if (!t.source.empty()) j["source"] = t.source;
  return j;
}

}  // namespace stagecraft::spec
