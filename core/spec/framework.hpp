// Framework profiles: how a training framework issues its data-parallel collectives, which is part
// of the workload as much as the model is (training.json "framework", SCHEMAS.md). The lowering
// reads the fetch granularity, the prefetch rule and the synchronisation; the simulator reads the
// per-collective host work and the extra HBM copies. Each constant below names its source.
//
//   deepspeed      DeepSpeed ZeRO as of v0.16 (microsoft/DeepSpeed 38327e07):
//                  * one all-gather per parameter-owning nn.Module, i.e. per Linear of a block
//                    (partitioned_param_coordinator.py fetch_sub_module l.285, iter_params of the
//                    module's own parameters); tensors under stage3_param_persistence_threshold are
//                    never gathered (zero/config.py l.214); prefetched modules are coalesced into one
//                    all-gather up to stage3_prefetch_bucket_size (partition_parameters.py
//                    all_gather_coalesced l.1200);
//                  * look-ahead: after the current module, prefetch while
//                    numel_prefetching < min(max_live − live, prefetch_bucket), checked before adding
//                    each whole parameter — so at least one module whenever live < max_live
//                    (coordinator l.380–412); at most 2 queued fetch events (l.132), so the host stays
//                    ahead of the GPU and gathers run back to back on their stream;
//                  * a coalesced gather (several parameters in one flat buffer) is copied out
//                    parameter by parameter when the compute waits for it
//                    (AllGatherCoalescedHandle.wait, partition_parameters.py l.676–716): 2·S bytes
//                    on the compute stream, S the coalesced bytes; a lone parameter is gathered in
//                    place (allgather_fn, l.94);
//                  * gradients reduce-scattered every micro-batch (ZeRO-2/3) in communication_data_type,
//                    the model dtype by default (engine.py l.939–950), on a side stream with
//                    overlap_comm; reduce_scatter_coalesced makes an interleaving torch.cat and a
//                    pre-divide div_ over the bucket (runtime/comm/coalesced_collectives.py): 2 passes
//                    that read and write S bytes each, 4·S bytes of HBM traffic per reduce-scatter.
//   deepspeed-0.5  DeepSpeed ZeRO-3 of 2021 (v0.3.13–v0.5.4; v0.3.15 read), on PyTorch ≤ 1.8:
//                  * per-parameter gathers (partition_parameters.py _allgather_param l.741–787):
//                    torch.zeros of the full size (a memset: S bytes written), torch.cuda.synchronize()
//                    (l.763), world_size narrow() calls, list-form all_gather, which ProcessGroupNCCL
//                    (≤ 1.8) flattens and copies back with one copy_ per rank (2·S bytes), then
//                    fetch_sub_module takes each fetched parameter's norm for a debug message its
//                    f-string builds whether or not it prints (print_rank_0(f"... norm {param.norm()}"),
//                    stage3.py l.444 at v0.3.15, through v0.5.10; gone from v0.6.0, PR #1453's
//                    coordinator), reading the S bytes again — 4·S bytes of HBM traffic and O(n) host
//                    launches per collective;
//                  * fetch_sub_module ends in comm_stream.synchronize() and torch.cuda.synchronize()
//                    (stage3.py l.521–529): a gather starts only after all earlier GPU work, and no
//                    prefetch overlaps compute (prefetch only if not in_flight_handles, l.349);
//                  * per-parameter reduce-scatter from a list of n slices, flattened with n copies
//                    (2·S bytes), and reduction_stream.synchronize() before each bucket (l.2161): the
//                    host waits for the previous bucket before it queues more compute.
//                  Confirmed by DeepSpeed commit c0eeb69 (PR #1188, v0.5.5: "the async version is not
//                  async at all, because each all_gather calls torch.cuda.synchronize()").
//   fsdp           PyTorch FSDP FULL_SHARD with transformer-block wrapping (torch/distributed/fsdp):
//                  one FlatParameter per block (one all-gather and one reduce-scatter per block per
//                  pass), forward and backward prefetch of the next unit, limit_all_gathers (≤ 2 in
//                  flight), recompute and backward sharing one gather; reduce_dtype from
//                  MixedPrecision (None = the parameter dtype; torchtitan's default is float32); the
//                  gradient pre-divide div_ over the unsharded gradient (_runtime_utils.py
//                  _reduce_grad → _div_if_needed): 2·S bytes per reduce-scatter.
//   fsdp2          PyTorch FSDP2 (fully_shard, torch ≥ 2.4; torchtitan), torch/distributed/_composable/
//                  fsdp/_fsdp_collectives.py: one all-gather per fully_shard unit (a block) as FSDP1,
//                  but each parameter is a tensor of its own (per-parameter sharding, no
//                  FlatParameter), so the gathered buffer is copied out into the unsharded
//                  parameters on the compute stream before the unit runs (foreach_all_gather_copy_out:
//                  split_with_sizes_copy, 2·S bytes); the shards are copied in (foreach_all_gather,
//                  S/n, not charged); the gradients go straight into the reduce-scatter input in
//                  reduce_dtype (foreach_reduce: torch._chunk_cat, g + r per parameter, the cast
//                  fused) and NCCL averages them (_get_gradient_divide_factors: ReduceOp.AVG for
//                  fp32 and bf16, no divide pass; an fp16 reduction's pre- and post-divide are not
//                  charged); prefetch, resharding and the ≤ 2 in-flight gathers as FSDP1. While a
//                  block is copied out, its gathered buffer and its unsharded parameters are both
//                  resident, one block's 16-bit parameters more for that instant: not counted in
//                  the memory accounting.
//   megatron       Megatron-LM: ZeRO stage 0, or the distributed optimizer (ZeRO-1); the gradient
//                  all-reduce or reduce-scatter of the contiguous grad buffer after the pipeline flush
//                  (or overlapped with overlap_comm), scaled in place by 1/dp first
//                  (param_and_grad_buffer.py: grad_data *= gradient_scaling_factor): 2·S bytes.
//                  ZeRO-2/3 are not Megatron-LM options (validate_plan refuses them). Since
//                  2021-09 (NVIDIA/Megatron-LM 16c90445, mpu/layers.py
//                  ColumnParallelLinearWithAsyncAllreduce; with sequence parallelism its
//                  reduce-scatter, 02bb1f5c 2022-03) a column-parallel linear's backward issues the
//                  input gradient's all-reduce asynchronously and computes its weight gradient beside
//                  it (tp_grad_overlap; sim/models/tp_overlap.hpp).
//   megatron-2021  the same before that change (Narayanan et al. SC'21's runs): the backward TP
//                  all-reduce waits, synchronous, before the weight gradient. Without contiguous
//                  buffers (the default; bf16 forces them) the gradients are flattened into one
//                  buffer, scaled, all-reduced and copied back (model/distributed.py
//                  allreduce_gradients at 50a4b5fa: _flatten_dense_tensors, /=, all_reduce, copy_):
//                  6·S bytes around the all-reduce, 2·S with the buffers.
//
// Communicators. NCCL runs the collectives of one communicator one at a time, in the order they
// were issued, whatever CUDA streams they were issued on ("NCCL collective operations on a given
// communicator are always serialized; NCCL adds CUDA events to enforce that", NVIDIA/nccl issue
// #574), and PyTorch's ProcessGroupNCCL runs a process group's collectives on one internal stream
// per device (pytorch/pytorch issue #65299: FSDP's all-gather and reduce-scatter streams ran as one,
// "one process group [runs a] single NCCL stream only, this is expected"). Where a framework issues
// its parameter gathers and its gradient reductions on one process group they take turns, each
// collective starting only after the one issued before it (`one_dp_communicator`; the lowering
// orders every data-parallel collective of a rank after the previous one, program/emit.cpp):
//   fsdp, fsdp2    one process group for both (FSDP1's process_group; FSDP2's shard group, whose
//                  all-gathers and reduce-scatters "serialize on the wire" — pytorch/pytorch PR
//                  #186335 adds an opt-in group of its own for the reduce-scatters because of it);
//   megatron, megatron-2021   the data-parallel group for both (the distributed optimizer's
//                  reduce-scatter and all-gather, the gradient all-reduce);
//   deepspeed, deepspeed-0.5  two, by default: zero.Init gathers on the world group when given no
//                  data_parallel_group (partition_parameters.py, ds_process_group =
//                  dist.get_world_group(); v0.9.2 l.732), and deepspeed.initialize without a
//                  model-parallel unit reduces on a group of its own (v0.6+: groups._clone_world_group,
//                  a new_group of every rank; v0.5.4: groups.initialize's new_group). Code that hands
//                  one data-parallel group to both shares one — Megatron-DeepSpeed's pretrain_gpt.py:
//                  zero.Init(data_parallel_group=mpu.get_data_parallel_group(), mpu=mpu) and the
//                  engine's mpu.get_data_parallel_group() — which training.json says with
//                  {"name": "deepspeed", "reduce_communicator": "shared"} ("separate" the other way).
//                  Unsaid, a ZeRO-3 plan with tensor parallelism shares one: DeepSpeed's own tensor
//                  parallelism (AutoTP training) runs with ZeRO stages 0-2 only ("ZeRO Optimization:
//                  ... Stage 0, 1, or 2", deepspeed.ai tutorials/autotp-training; "AutoTP+ZeRO-3 not
//                  supported", deepspeedai/DeepSpeedExamples PR #1004), so ZeRO-3 with tp > 1 is
//                  Megatron-DeepSpeed's code, with its one group (dp_communicator below).
//
// The gradient pass: what one backward moves through HBM per parameter of a unit between its
// weight-gradient GEMMs and the gradient the framework reduces (or keeps for the step), beyond the
// GEMM's own output; sim/models/work.hpp charges it to the backward's weight-gradient work.
// g = the gradient's element bytes (the training's storage dtype: 2, fp32 4), r = the reduction's
// (reduce_dtype, else g), a = (m − 1)/m of a step's m micro-batches add to an earlier gradient,
// dp = the data-parallel group a sharded gradient is split over:
//   megatron       2·c: gradient_accumulation_fusion (default since NVIDIA/Megatron-LM 83b1e42f,
//                  2022-02-13; fp16 since 07916bf2, 2022-09-27): the weight-gradient GEMM accumulates
//                  straight into main_grad (fused_weight_gradient_dense wgrad_gemm_accum_fp32/_fp16,
//                  β = 1), its epilogue reading and writing c = 4 bytes (fp32 main gradients: bf16,
//                  fp8 and fp32 training; arguments.py forces them for bf16) or c = 2 (fp16); every
//                  CTA of a wave runs its epilogue at once, so those bytes take HBM time of their own;
//   megatron-2021  bf16: g + 4 + 4 = 10 every micro-batch: contiguous fp32 main_grad buffers, which
//                  bf16 forces (arguments.py l.141–155 at 50a4b5fa), each gradient added by a hook
//                  (model/distributed.py _make_param_hook: param.main_grad.add_(param.grad));
//                  fp16 and fp32: 3·g·a: the default local DDP keeps no buffers
//                  (--use-contiguous-buffers-in-ddp is off), so autograd's AccumulateGrad takes the
//                  first micro-batch's gradient as it is and adds each later one (read both, write);
//   deepspeed, deepspeed-0.5   ZeRO 2-3: 2·g + (2·g + g·a)/dp: each gradient copied into the
//                  reduce bucket's flat buffer as it is produced (contiguous_gradients, on by default:
//                  stage3.py __add_grad_to_ipg_bucket, stage_1_and_2.py
//                  reduce_independent_p_g_buckets_and_remove_grads), reduced every micro-batch, and
//                  the rank's shard copied (first micro-batch: 2·g) or added (later ones: 3·g) into its
//                  partition buffer (partition_grads), kept in gradient_accumulation_dtype — the model
//                  dtype under ZeRO unless data_types.grad_accum_dtype says otherwise (engine.py
//                  get_data_types l.936–951, v0.16.0); ZeRO 0-1: 3·g·a (autograd accumulates
//                  param.grad; the bucketed reduction at the step boundary);
//   fsdp           2·g + (g + r if r ≠ g) + 3·r·a/dp: the unit's flat gradient assembled from its
//                  parameters' views (autograd's split backward: one cat), cast to reduce_dtype when
//                  that differs (_post_backward_hook), reduce-scattered every micro-batch (FULL_SHARD,
//                  no no_sync), the shard added to the saved one from the second micro-batch on
//                  (_accumulate_sharded_grad): FSDP1's FlatParameter path;
//   fsdp2          g + r + 3·r·a/dp: each gradient copied into the reduce-scatter input once in
//                  reduce_dtype (_chunk_cat), the shard added to the saved one from the second
//                  micro-batch on.
// Every copy is charged at the contiguous HBM rate in the weight-gradient pass; DeepSpeed runs its
// bucket copy on the reduction stream, where it takes HBM bandwidth from the backward beside it.
//
// The optimizer step: HBM bytes per parameter the step updates (the rank's shard under ZeRO-1 and
// above), every pass of the step from the reduced gradient to the 16-bit parameters the next
// forward reads. The fused Adam kernel itself (apex/Transformer Engine FusedAdam, torch fused
// AdamW) reads the fp32 master parameter, fp32 gradient, momentum and variance and writes three
// of them: A = 4·4 + 3·4 = 28. w = the storage dtype's bytes (2; fp32 training 4, whose
// parameters are their own master copy), S = dp when the step covers a 1/dp shard of a gradient
// buffer it also clears (the distributed optimizer), else 1:
//   megatron       bf16, fp8, fp32 (fp32 main_grad buffer): 4 + A + (4 + w if w < 4) + 4·S —
//                  get_grad_norm_fp32 reads the main grads (clip_grads.py, multi_tensor_l2norm),
//                  Adam, _copy_main_params_to_model_params (multi_tensor_scale, fp32 → 16-bit),
//                  the grad buffer's zero_() before the next step (train_step: zero_grad_buffer,
//                  param_and_grad_buffer reset; the whole local buffer, S shards of the step);
//                  fp16 (a 16-bit main_grad buffer): + 2 + 4 for main_grad.float() and 8 for
//                  the loss scaler's _amp_foreach_non_finite_check_and_unscale_, a 2-byte zero_();
//                  (megatron/core/optimizer/optimizer.py prepare_grads, step_with_ready_grads;
//                  NVIDIA/Megatron-LM d98e8a64). The clip's multi_tensor_scale runs only when the
//                  norm exceeds clip_grad (clip_coeff < 1), not charged.
//   megatron-2021  fp16: 6 + 8 + 4 + A + 6 = 52: model_param.grad.float() into a new fp32 main
//                  grad, unscale, norm, Adam, copy back; zero_grad(set_to_none=True) clears
//                  nothing (megatron/optimizer/optimizer.py l.283–414 at 50a4b5fa); bf16 (buffers
//                  forced): as megatron's bf16; fp32 (FP32Optimizer): 4 + A.
//   deepspeed, deepspeed-0.5, fsdp, fsdp2   A − 4 + w = 24 + w: the fused Adam only. Their other passes
//                  run over a ZeRO shard of P/dp — DeepSpeed's norm, flatten, fp32 cast,
//                  unscale_and_clip mul_ and fp32 → 16-bit copy (stage3.py step l.2065–2110,
//                  v0.16.0: about +28 bytes in bf16), FSDP's clip_grad_norm_ (+12) — under 0.1% of
//                  every validated step, and not charged; Stagecraft's own executor
//                  (executor/model/adamw.cpp), which runs these training files too, moves 24 + w.
//
// Host work per collective is charged only where the host is on the critical path: deepspeed-0.5
// synchronises the device at every fetch, so its n narrow() calls and n copy_ launches add
//   host_s = n · (narrow_s + copy_launch_s)
// per collective; narrow_s = 1.5 µs (one ATen view op called from Python) and copy_launch_s = 5 µs
// (one copy_ kernel launched from Python) are estimates of PyTorch eager-mode op overhead, not
// measurements of that stack, and carry that uncertainty. Its gathers also pay a host time of their
// own, whatever n: the hook, the per-parameter bookkeeping, the debug f-strings it formats whether
// or not it prints (a CUDA tensor's norm among them, whose formatting waits for the device) and the
// round trips of its synchronisations, each exposed as the device waits for the host:
//   host_s_per_gather = 0.8 ms per gathered tensor (±25%),
// from the one measurement of that stack at hand, DeepSpeed issue #1174 (v0.3.16, PyTorch 1.8, one
// p4d: 8 A100 40GB on NVLink): a 5.1B BERT (DeepSpeedExamples bing_bert, 64 layers of hidden 2560,
// its config in PR #1188) ran its forward in about 480 ms under ZeRO-3 against about 60 ms under
// ZeRO-2 (PR #1188: ~470 ms). Its layers hold 6 weight tensors above the persistence threshold
// (query, key, value, attention output, intermediate, output; biases and norms stay whole), so the
// forward gathers 64 · 6 + 4 (word, position embeddings, pooler, prediction transform) = 388
// tensors, 10.2 GB; the simulator charges them 104 ms (NCCL's ring over NVLink at 230 GB/s of bus
// bandwidth and its latency, the 4·S copies at the A100 40GB's HBM rate, n · 6.5 µs each). The
// other (420 − 104)/388 = 0.81 ms per tensor is this term. The extra forward is independent of the
// batch there (the gathers are serialised with the compute), so the unknown batch does not enter.
// The gradients' reduce-scatters of that code have no such measurement and are not charged it.
// The current frameworks keep the host ahead of the GPU (≤ 2 queued events), so their per-module
// hook cost is hidden and not charged.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/spec/dtype.hpp"

namespace stagecraft::spec {

enum class Framework : uint8_t { kDeepSpeed, kDeepSpeed05, kFsdp, kMegatron, kMegatron2021, kFsdp2 };
inline constexpr Framework kFrameworks[] = {Framework::kDeepSpeed, Framework::kDeepSpeed05, Framework::kFsdp,
                                            Framework::kFsdp2, Framework::kMegatron, Framework::kMegatron2021};

// What one ZeRO-3 all-gather fetches.
enum class GatherUnit : uint8_t {
  kModule,     // each parameter-owning module (a Linear, an embedding table); prefetched modules coalesced
  kParameter,  // each parameter tensor, one collective each
  kBlock,      // one flat parameter per transformer block (FSDP wrapping policy)
};
// When the next bucket's gather is issued.
enum class Prefetch : uint8_t {
  kLookAhead,  // DeepSpeed: while live < max_live, at least one bucket ahead
  kNone,       // gathered when needed, after all earlier GPU work (device sync)
  kNextUnit,   // FSDP: the next unit, always
};

struct FrameworkProfile {
  Framework framework = Framework::kDeepSpeed;
  GatherUnit gather = GatherUnit::kModule;
  Prefetch prefetch = Prefetch::kLookAhead;
  bool sync_reduce = false;           // the host waits for the previous gradient bucket before queuing more work
  bool reshard_after_use = false;     // FSDP: a unit used again at once (recompute → backward) is kept
  std::optional<Dtype> reduce_dtype;  // gradient collectives' dtype; nullopt: the training dtype
  double gather_copy_passes = 0;      // HBM bytes moved per gathered byte, beyond NCCL's own
  double reduce_copy_passes = 0;      // HBM bytes moved per reduced byte, beyond NCCL's own
  double coalesced_copy_passes = 0;   // HBM bytes per byte of a coalesced gather, copied on the compute stream
  double host_s_per_rank = 0;         // exposed host work per collective and group member
  double host_s_per_gather = 0;       // exposed host work per gathered tensor (ZeRO-3 gathers), whatever n
  bool tp_grad_overlap = false;       // the backward TP collective of a column-parallel linear beside its wgrad GEMM
  bool one_dp_communicator = false;   // parameter gathers and gradient reductions on one communicator: one at a time
  bool replica_stream = false;        // hierarchical ZeRO: the replicas' all-reduce on a stream of its own
  int max_zero_stage = 3;
  std::string source;                 // where the constants come from (the header above, by line)
};

// The gradient pass of one backward (above): HBM bytes per parameter of a unit, averaged over the
// step's `micro_batches`. `dtype` is the training's compute dtype, `reduce_bytes` r
// (Training::reduce_bytes), `zero_stage` the plan's, `dp` its data-parallel size.
double grad_pass_bytes(Framework f, Dtype dtype, int64_t reduce_bytes, int zero_stage, int64_t dp, int64_t micro_batches);

// The optimizer step (above): HBM bytes per parameter it updates, for a plan at `zero_stage` over a
// data-parallel group of `dp`.
double optimizer_step_bytes(Framework f, Dtype dtype, int zero_stage, int64_t dp);

// The profile of a framework for a training in `dtype` (megatron-2021's gradient buffers depend on
// it), with the training file's overrides (reduce_dtype, reduce_communicator) applied by the caller.
FrameworkProfile framework_profile(Framework f, Dtype dtype);

// Whether a plan's parameter gathers and gradient reductions share one communicator (Communicators
// above), and why: `set` (training.json "reduce_communicator") when given; else a DeepSpeed ZeRO-3
// plan with tp > 1 shares one (Megatron-DeepSpeed's code); else the framework's own choice.
struct CommunicatorChoice {
  bool shared = false;
  std::string why;
};
CommunicatorChoice dp_communicator(Framework f, std::optional<bool> set, int64_t tp, int zero_stage);
const char* to_string(Framework f);
std::optional<Framework> parse_framework(std::string_view s);

}  // namespace stagecraft::spec
