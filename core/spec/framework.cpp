#include "core/spec/framework.hpp"

#include <algorithm>

namespace stagecraft::spec {

const char* to_string(Framework f) {
  switch (f) {
    case Framework::kDeepSpeed: return "deepspeed";
    case Framework::kDeepSpeed05: return "deepspeed-0.5";
    case Framework::kFsdp: return "fsdp";
    case Framework::kFsdp2: return "fsdp2";
    case Framework::kMegatron: return "megatron";
    case Framework::kMegatron2021: return "megatron-2021";
  }
  return "deepspeed";
}

std::optional<Framework> parse_framework(std::string_view s) {
  for (Framework f : kFrameworks) {
    if (s == to_string(f)) return f;
  }
  return std::nullopt;
}

double grad_pass_bytes(Framework f, Dtype dtype, int64_t reduce_bytes, int zero_stage, int64_t dp, int64_t micro_batches) {
  const double g = static_cast<double>(bytes_of(storage_dtype(dtype)));
  const double r = static_cast<double>(reduce_bytes);
  const double m = static_cast<double>(std::max<int64_t>(micro_batches, 1));
  const double a = (m - 1) / m;  // the share of micro-batches that add to an earlier gradient
  const double shards = static_cast<double>(std::max<int64_t>(dp, 1));
  const double autograd = 3 * g * a;
  switch (f) {
    case Framework::kMegatron: return 2.0 * (dtype == Dtype::kFp16 ? 2.0 : 4.0);
    case Framework::kMegatron2021:
      return storage_dtype(dtype) == Dtype::kBf16 ? g + 4 + 4 : autograd;
    case Framework::kDeepSpeed:
    case Framework::kDeepSpeed05:
      return zero_stage >= 2 ? 2 * g + (2 * g + g * a) / shards : autograd;
    case Framework::kFsdp:  // NO_SHARD (below ZeRO-2) keeps the whole gradient
      return 2 * g + (r != g ? g + r : 0.0) + 3 * r * a / (zero_stage >= 2 ? shards : 1.0);
    case Framework::kFsdp2: return g + r + 3 * r * a / (zero_stage >= 2 ? shards : 1.0);
  }
  return autograd;
}

double optimizer_step_bytes(Framework f, Dtype dtype, int zero_stage, int64_t dp) {
  constexpr double kAdam = 4 * 4 + 3 * 4;  // fused Adam: read p, g, m, v in fp32; write p, m, v
  const double w = static_cast<double>(bytes_of(storage_dtype(dtype)));
  const double copy_back = w < 4 ? 4 + w : 0.0;  // fp32 master → the 16-bit parameters
  const double shards = zero_stage >= 1 ? static_cast<double>(std::max<int64_t>(dp, 1)) : 1.0;
  const bool fp16 = storage_dtype(dtype) == Dtype::kFp16;
  switch (f) {
    case Framework::kMegatron:
      // norm + Adam + copy back + the buffer's zero_(); fp16: main_grad.float() and the unscale
      return fp16 ? (2 + 4) + 8 + 4 + kAdam + copy_back + 2 * shards : 4 + kAdam + copy_back + 4 * shards;
    case Framework::kMegatron2021:
      if (fp16) return (2 + 4) + 8 + 4 + kAdam + copy_back;  // set_to_none: nothing cleared
      if (storage_dtype(dtype) == Dtype::kBf16) return 4 + kAdam + copy_back + 4 * shards;
      return 4 + kAdam;
    case Framework::kDeepSpeed:
    case Framework::kDeepSpeed05:
    case Framework::kFsdp:
    case Framework::kFsdp2: return kAdam - 4 + w;
  }
  return kAdam - 4 + w;
}

FrameworkProfile framework_profile(Framework f, Dtype dtype) {
  FrameworkProfile p;
  p.framework = f;
  switch (f) {
    case Framework::kDeepSpeed:
      p.gather = GatherUnit::kModule;
      p.prefetch = Prefetch::kLookAhead;
      p.reduce_copy_passes = 4;  // reduce_scatter_coalesced: torch.cat + div_, each reads and writes S
      p.coalesced_copy_passes = 2;  // AllGatherCoalescedHandle.wait: one copy per parameter (read and write)
      p.source = "DeepSpeed v0.16 (framework.hpp: coordinator l.285/l.380-412/l.132, coalesced_collectives.py)";
      break;
    case Framework::kDeepSpeed05:
      p.gather = GatherUnit::kParameter;
      p.prefetch = Prefetch::kNone;
      p.sync_reduce = true;
      p.gather_copy_passes = 4;  // memset of the full buffer + list unflatten copy (read and write) + the debug norm's read
      p.reduce_copy_passes = 2;  // list flatten copy (read and write)
      p.host_s_per_rank = 1.5e-6 + 5e-6;
      p.host_s_per_gather = 0.8e-3;  // DeepSpeed issue #1174's forward, less what is modelled (framework.hpp)
      p.source = "DeepSpeed v0.3.15 on PyTorch <= 1.8 (framework.hpp: _allgather_param l.741-787, stage3.py l.521-529)";
      break;
    case Framework::kFsdp:
      p.gather = GatherUnit::kBlock;
      p.prefetch = Prefetch::kNextUnit;
      p.reshard_after_use = true;
      p.reduce_copy_passes = 2;  // gradient pre-divide div_
      p.replica_stream = true;   // HYBRID_SHARD's all-reduce on _all_reduce_stream (PR #106080)
      p.source = "PyTorch FSDP FULL_SHARD, transformer-block wrapping (framework.hpp)";
      break;
    case Framework::kFsdp2:
      p.gather = GatherUnit::kBlock;
      p.prefetch = Prefetch::kNextUnit;
      p.reshard_after_use = true;
      p.coalesced_copy_passes = 2;  // foreach_all_gather_copy_out: split_with_sizes_copy of the gathered buffer
      p.replica_stream = true;      // HSDP: foreach_reduce's all-reduce on a stream of its own
      p.source = "PyTorch FSDP2 fully_shard per block (framework.hpp: _fsdp_collectives.py)";
      break;
    case Framework::kMegatron:
    case Framework::kMegatron2021:
      p.gather = GatherUnit::kModule;  // unused: no ZeRO-3
      p.prefetch = Prefetch::kLookAhead;
      p.reduce_copy_passes = 2;  // grad buffer scaled by 1/dp in place
      // 2021 without contiguous buffers (all but bf16): flatten, scale, copy back
      if (f == Framework::kMegatron2021 && storage_dtype(dtype) != Dtype::kBf16) p.reduce_copy_passes = 6;
      p.max_zero_stage = 1;
      p.tp_grad_overlap = f == Framework::kMegatron;  // async all-reduce since 2021-09 (16c90445)
      p.source = f == Framework::kMegatron ? "Megatron-LM distributed optimizer (framework.hpp)"
                                           : "Megatron-LM before 2021-09: synchronous backward TP all-reduce (framework.hpp)";
      break;
  }
  // without a plan: its choice for tp 1 (dp_communicator says why; a plan's shape can change it)
  p.one_dp_communicator = dp_communicator(f, std::nullopt, 1, 3).shared;
  return p;
}

CommunicatorChoice dp_communicator(Framework f, std::optional<bool> set, int64_t tp, int zero_stage) {
  if (set) return {*set, "training.json framework.reduce_communicator"};
  const bool deepspeed = f == Framework::kDeepSpeed || f == Framework::kDeepSpeed05;
  if (deepspeed && tp > 1 && zero_stage == 3) {
    return {true, "DeepSpeed ZeRO-3 with tensor parallelism is Megatron-DeepSpeed's code, which hands one data-parallel "
                  "group to zero.Init and the engine, as DeepSpeed's AutoTP trains with ZeRO 0-2 only"};
  }
  switch (f) {
    case Framework::kDeepSpeed:
    case Framework::kDeepSpeed05:
      return {false, "DeepSpeed's defaults: zero.Init gathers on the world group, the engine reduces on a group of its own"};
    case Framework::kFsdp: return {true, "FSDP's one process group"};
    case Framework::kFsdp2: return {true, "FSDP2's shard group"};
    case Framework::kMegatron:
    case Framework::kMegatron2021: return {true, "Megatron-LM's data-parallel group"};
  }
  return {false, ""};
}

}  // namespace stagecraft::spec
