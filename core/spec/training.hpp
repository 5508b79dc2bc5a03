// Training: what the user fixes (SCHEMAS.md, training.json): the global batch in sequences, the
// compute format and the optimizer. Mixed precision keeps fp32 master weights and Adam moments
// (ZeRO's K = 12 bytes per parameter) whenever dtype is 16-bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/dtype.hpp"
#include "core/spec/framework.hpp"

namespace stagecraft::spec {

enum class Optimizer { kAdam, kAdamW };
// How the model code runs its memory-bound layer work (sim/models/work.hpp has the bytes):
// fused kernels as Megatron-LM writes them (scale-mask-softmax, bias-GeLU, bias-dropout-add), or
// PyTorch eager ops one by one, as minGPT and Hugging Face's BERT/RoBERTa/GPT-2 modules do, and
// uncompiled Llama code (Hugging Face, torchtitan, ibm-fms): its RMSNorm, rotary embedding and K/V
// repeat are then passes of their own.
enum class Kernels { kFused, kEager };

// Megatron-Core's default expert-bias update rate (--moe-router-bias-update-rate).
inline constexpr double kMegatronExpertBiasUpdateRate = 1e-3;

struct Training {
  int64_t global_batch = 0;   // sequences per optimizer step, over all data-parallel ranks
  // Tokens per sequence; unset: the model's seq_len (model.hpp says which). A model's
  // max_positions bounds it (with_training_length in model.hpp).
  std::optional<int64_t> seq_len;
  Dtype dtype = Dtype::kBf16;
  Optimizer optimizer = Optimizer::kAdam;
  // How the framework issues its data-parallel collectives (framework.hpp); "framework" in
  // training.json, a name or {"name": ..., "reduce_dtype": ..., "reduce_communicator": ...}.
  Framework framework = Framework::kDeepSpeed;
  std::optional<Dtype> reduce_dtype;   // the framework's gradient-collective dtype, when set
  // whether gradient reductions share the parameter gathers' communicator (framework.hpp,
  // Communicators), when set: "reduce_communicator": "shared" or "separate"
  std::optional<bool> shared_reduce_communicator;
  Kernels kernels = Kernels::kFused;   // "kernels": "fused" (default) or "eager"
  // How attention runs: "flash" (default: the GPU profile's default fused kernel, FlashAttention-
  // style, no score matrix in memory), a kernel the profile names ("fa2", "cudnn", "fa3"), or
  // "unfused" (QK^T, softmax and softmax.V as separate kernels with the scores in memory, as every
  // run before 2022 and the CPU executor compute it). sim/models/work.hpp has the costs.
  std::string attention = "flash";
  bool flash_attention() const { return attention != "unfused"; }
  // Transformer Engine's tensor-parallel communication overlap ("tp_comm_overlap": true; Megatron-LM
  // --tp-comm-overlap, NeMo's tp_comm_overlap): with sequence parallelism each block linear's
  // all-gather or reduce-scatter runs in chunks beside its GEMM (sim/models/tp_overlap.hpp). No
  // effect without sequence parallelism, which it requires.
  bool tp_comm_overlap = false;
  // Mixture of experts: the tokens the busiest expert-parallel rank computes over the mean
  // ("moe_imbalance", ≥ 1; 1: balanced routing, as Megatron-Core's force-balanced benchmarks run).
  // A rank's load is the sum over its E/ep experts, so with one expert a rank it is the busiest
  // expert's over the mean. The simulator stretches the experts' compute and their all-to-alls by
  // it (sim/models/compute.hpp).
  double moe_imbalance = 1.0;
  // Its stated 1σ ("moe_imbalance_sigma", absolute, 0: none): the error bars simulate the plan again
  // at ρ − σ (at least 1) and ρ + σ (sim/uncertainty.hpp), beside the cluster profile's parameters.
  double moe_imbalance_sigma = 0.0;
  // Mixture of experts: each expert's capacity, as a factor c on its balanced share of the routed
  // copies ("moe_capacity_factor", Megatron-Core's --moe-expert-capacity-factor: capacity =
  // ⌈T·k/E · c⌉; 0, the default: dropless). Copies beyond an expert's capacity are dropped (they skip
  // the expert: the residual and the shared experts carry the token); with "moe_pad_to_capacity"
  // (--moe-pad-expert-input-to-capacity) every expert's input is padded to its capacity, so every
  // expert computes and every all-to-all moves c times the balanced share whatever the routing.
  double moe_capacity_factor = 0.0;
  bool moe_pad_to_capacity = false;
  // The busiest expert-parallel rank's routed copies over the balanced mean, what the simulator
  // stretches the experts' compute and their all-to-alls by (sim/models/compute.hpp): ρ dropless,
  // min(ρ, c) when the capacity drops what exceeds it, c when padded to it.
  double moe_busiest_load() const {
    if (moe_capacity_factor <= 0) return moe_imbalance;
    return moe_pad_to_capacity ? moe_capacity_factor : std::min(moe_imbalance, moe_capacity_factor);
  }
  // Mixture of experts: the load-balancing loss's coefficient α ("moe_aux_loss_coeff", Megatron-Core's
  // --moe-aux-loss-coeff, default 0): the executor adds α · E / (k · T²) · Σ_e P_e · c_e per MoE layer
  // and micro-batch of T tokens (P_e the sum of expert e's score, c_e the tokens whose own top k of
  // the scores hold e; switch_load_balancing_loss_func, docs/program.md) to each micro-batch's
  // objective. The reported loss is the language-model loss alone, as Megatron-LM reports it.
  double moe_aux_loss_coeff = 0.0;
  // DeepSeek-V3's bias-based balancing (model moe.router_bias): after each step every expert's
  // selection bias moves by this rate towards the mean load, b_e += u · sign(mean_c − c_e)
  // ("moe_router_bias_update_rate", Megatron-Core's --moe-router-bias-update-rate, default 1e-3;
  // the report's γ: 0.001 for the first 14.3T tokens).
  double moe_router_bias_update_rate = kMegatronExpertBiasUpdateRate;
  std::string source;
  std::string file;
  // Keys the command line set over the file's ("seq_len", "global_batch", "dtype"), in that order.
  std::vector<std::string> from_command_line;

  // Where a key's value came from, as an error names it: {"--seq-len", ""} when the command line
  // set it, else {file, "/seq_len"}.
  std::pair<std::string, std::string> origin_of(std::string_view key) const;
  // The file, and what the command line changed: "t.json" or "t.json with --global-batch 64".
  std::string label() const;
  // The framework's profile with this file's overrides; gradient collectives' element bytes.
  FrameworkProfile framework_profile() const;
  // The same for a plan of `tp` and `zero_stage`, whose shape can say which code runs the framework
  // (dp_communicator in framework.hpp): what the lowering and the simulator use.
  FrameworkProfile framework_profile(int64_t tp, int zero_stage) const;
  // The highest ZeRO stage this training can run: the framework's (Megatron-LM: 1), and 2 with
  // fp8 (Transformer Engine caches each FP8 weight and its transpose across micro-batches, which
  // ZeRO-3's partitioned parameters do not keep: not modelled).
  int max_zero_stage() const;
  // Why the stage is capped, for messages ("" when it is not).
  std::string zero_stage_reason() const;
  int64_t reduce_bytes() const;
};

// What --seq-len, --global-batch and --dtype set on simulate, search and run.
struct TrainingOverrides {
  std::optional<int64_t> seq_len;
  std::optional<int64_t> global_batch;
  std::optional<Dtype> dtype;
};
// The training with the command line's values in place, each recorded in from_command_line.
Training with_overrides(Training t, const TrainingOverrides& o);

Training load_training(const std::string& path);
Training training_from_json(const nlohmann::json& j, const std::string& file);
nlohmann::json to_json(const Training& t);
const char* to_string(Optimizer o);

}  // namespace stagecraft::spec
