// Memory model: what a GPU holds during a step.
//
// Model states (Rajbhandari et al., SC'20), P_s = the stage's parameters on one tp rank, d = dp:
//   16-bit training with fp32 master weights and Adam (K = 12 bytes: master, momentum, variance)
//     stage 0: params 2P_s, grads 2P_s, optimizer K·P_s
//     stage 1: 2P_s, 2P_s, K·P_s/d       stage 2: 2P_s, 2P_s/d, K·P_s/d
//     stage 3: 2P_s/d (+ persistent tensors whole), 2P_s/d, K·P_s/d
//   fp32 training: params 4, grads 4, optimizer K = 8 (momentum, variance) bytes per parameter.
//   Optimizer offload to the host removes the optimizer term from the GPU; parameter offload
//   (stage 3) the 2P_s/d shard (persistent tensors stay).
//   Example (REFERENCE.md): P = 7.5e9, d = 64 gives 120, 31.4, 16.6 and 1.88 GB.
//   Hierarchical partitions (MiCS, FSDP hybrid sharding, Megatron-LM's optimizer instances): d is
//   the shard group g (spec::partition_group), so each replica holds 1/g, more than 1/dp.
//   DeepSpeed hpZ (and FSDP2's reshard_after_forward=h) keeps a secondary copy of the gathered
//   16-bit parameters sharded over h ranks besides the 1/d primary one: w·⌈P_g/h⌉ more, P_g the
//   stage's parameters ZeRO-3 gathers (all but the persistent ones). DeepSpeed ZeRO++ tutorial:
//   18B on 64 V100 with h = 16, MaxMemAllocated 8.09 → 10.02 GB.
// Activations per token of one micro-batch, 16-bit (Korthikanti et al., MLSys'23, Table 2;
// per layer s·b·h·(34 + 5as/h), of which attention 11, MLP 19, layer norms 4, scores 5as), with
// the tensors written by their widths so GQA, a head_dim other than h/a and MLPs other than 4h
// are kept at their size (q = heads·d, kv_r = K/V heads per rank · d, f = ffn_hidden):
//   attention sublayer  R + 4q/t + 4kv_r + 5as/t, R = 5h (norm input 2h, QKV input 2h, dropout
//                       mask h), the split part Q 2q, K 2kv, V 2kv, context 2q
//   MLP sublayer        R + 4f/t (gated: 6f/t: gate, up and their product), R = 5h (norm input 2h,
//                       first linear's input 2h, dropout mask h)
//   MoE sublayer        R + (4E/w₁₆ + k·(2h(1 + etp) + 6f_e or 4f_e))/t + shared experts' 6f_s/t
//                       (or 4f_s/t): fp32 routing probabilities, each of the k routed copies'
//                       expert input 2h (with expert tensor parallelism the etp peers' copies
//                       gathered, 2h·etp, the grouped GEMM's saved input) and output 2h and its
//                       experts' activations (etp times the copies over 1/etp of the width),
//                       for the 1/t of the tokens a tp rank routes (mean routing; the
//                       Megatron-Core alltoall dispatcher)
//   R is whole on every tp rank, or R/t with sequence parallelism. With q = kv = h, f = 4h these
//   are the paper's 13h + 5as, 21h per token (no TP), 5h + 8h/t + 5as/t and 5h + 16h/t (TP t),
//   (13h + 5as)/t and 21h/t (SP): a layer is 34h + 5as, h(10 + 24/t) + 5as/t, (34h + 5as)/t.
//   Block variants: a post-norm (attn_norms / mlp_norms == 2) keeps its input, +2h to R; a parallel
//   block whose MLP shares the attention's norm (mlp_norms == 0) keeps neither its norm input nor
//   its first linear's input, -4h; q/k norms keep their inputs, +2q/t + 2kv_r; an embedding norm
//   keeps 2h. FlashAttention ("attention": "flash", training.json) never writes the scores: in their
//   place it keeps the fp32 logsumexp of each query row, 4a/t bytes per token (Dao et al. 2022,
//   Algorithm 2: L and O saved for the backward); selective recompute then re-runs the fused
//   kernel and keeps neither it nor the context, -2q/t. Unfused, selective recompute drops the
//   5as/t scores; full recompute keeps only the block's
//   input, 2h (/t with SP), and re-creates the block's activations while it is back-propagated.
//   Head: the final norm's input 2h and fp32 logits 4V/t. fp32 training doubles the 16-bit bytes.
//   fp8 training (Transformer Engine) keeps each block GEMM's activation operand as its 1-byte FP8
//   copy: the QKV input -h (whole, or /t with SP), the context -q/t (when kept), fc1's own input -h
//   (whole or /t), fc2's input (the activation's output) -f/t.
// FP8 state (fp8 training, per block linear on the rank, W its weight elements there): the FP8
// weight and its transpose, cached across micro-batches, 2·W bytes, and the scaling state of its
// five FP8 tensors (input, weight, output forward; output and input gradients backward), each an
// amax history of 1024 fp32 values (Transformer Engine's DelayedScaling recipe default) with a
// scale and its inverse: 5 · 1026 · 4 = 20,520 bytes. Counted as parameters.
// Communication buffers a stage holds the whole step (besides ZeRO-3's gathered buckets, which
// come and go with their GatherParams and ReleaseParams), with P_s and w as above:
//   pipeline p2p         2·M when pp > 1: one send and one receive buffer of the Program's
//                        message M (core/program/comm_rules.hpp: T·h/t·w)
//   ZeRO >= 2 gradients  min(reduce_bucket, P_s)·w when dp > 1: DeepSpeed's contiguous gradient
//                        bucket (reduce_bucket_size elements) that reduce-scatters fill
#pragma once

#include <cstdint>

#include "core/program/units.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::sim {

struct ModelStates {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// stage_params and persistent are per tp rank (persistent: ZeRO-3 tensors kept whole).
ModelStates model_states(int64_t stage_params, int64_t persistent, const spec::ZeroConfig& zero, int64_t dp,
                         spec::Dtype dtype);

int64_t p2p_buffer_bytes(int64_t message_bytes, int64_t pp);
// hpZ's secondary partition (above): w·⌈gathered/h⌉, 0 when hpz_group is off or the whole dp group.
int64_t hpz_secondary_bytes(int64_t gathered_params, const spec::ZeroConfig& zero, int64_t dp, int64_t param_bytes);

// The FP8 state of `blocks` transformer blocks on one of `tp` ranks (above); 0 unless fp8.
inline constexpr int64_t kFp8ScalingStateBytes = 5 * (1024 + 2) * 4;
int64_t fp8_state_bytes(const spec::Model& m, int64_t tp, int64_t blocks, spec::Dtype dtype);
int64_t grad_bucket_buffer_bytes(const spec::ZeroConfig& zero, int64_t dp, int64_t stage_params, int64_t param_bytes);
// Both.
int64_t comm_buffer_bytes(int64_t message_bytes, int64_t pp, const spec::ZeroConfig& zero, int64_t dp, int64_t stage_params,
                          int64_t param_bytes);

// Bytes per token a unit keeps from its forward until its backward, under `mode`, for the
// training's dtype and attention.
double activation_bytes_per_token(const program::Unit& unit, const spec::Model& m, const spec::Plan& p,
                                  const spec::Training& training, spec::Recompute mode);

}  // namespace stagecraft::sim
