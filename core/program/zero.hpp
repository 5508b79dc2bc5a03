// ZeRO bucketing (Rajbhandari et al., SC'20; DeepSpeed's runtime, REFERENCE.md):
//  * gradient buckets: per chunk, units taken in backward order (last unit first) and packed
//    while the bucket stays within reduce_bucket elements (a single larger unit is a bucket of
//    its own) — DeepSpeed flushes its reduce bucket when the next gradient would overflow it;
//  * ZeRO-3 parameter buckets: per chunk, units in forward order packed within prefetch_bucket
//    elements; tensors under param_persistence_threshold stay whole on every rank and are not
//    gathered (persistent_elems);
//  * ZeRO-1/2 all-gather buckets: the stage's updated parameters in allgather_bucket pieces.
// The framework (spec/framework.hpp) changes the rule (BucketRule):
//  * FSDP: one bucket per transformer block (its FlatParameter), for parameters and gradients
//    alike; the embedding and the head are buckets of their own; nothing is persistent;
//  * collectives per bucket (Bucket::collectives), what the simulator pays latency for:
//      deepspeed      the bucket's gathered tensors in forward order, a collective closing once it
//                     holds prefetch_bucket elements or more (the coordinator adds whole parameters
//                     while numel_prefetching < budget) — one per Linear once Linears exceed it;
//                     Gradients: DeepSpeed's IPG bucket takes the bucket's tensors in backward order
//                     and flushes (one reduce-scatter) when the next would overflow reduce_bucket
//                     (stage3.py reduce_independent_p_g_buckets_and_remove_grads), so a unit whose
//                     weights exceed reduce_bucket is reduced weight by weight;
//      deepspeed-0.5  one per gathered tensor, and one reduce-scatter per gradient tensor;
//      fsdp           one per bucket.
//  * coalesced elements (Bucket::coalesced_elems): DeepSpeed gathers a lone parameter straight
//    into its buffer, but a collective of several into one flat buffer that
//    AllGatherCoalescedHandle.wait() copies out parameter by parameter (partition_parameters.py
//    l.676-716) on the compute stream: the elements of collectives holding two or more tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/program.hpp"
#include "core/program/units.hpp"
#include "core/spec/framework.hpp"
#include "core/spec/plan.hpp"

namespace stagecraft::program {

// Parameters of `unit` as held on `stage` (a tied head keeps a copy of the embedding table on a
// stage that does not hold the embedding), and the part of them below the persistence threshold.
struct UnitParams {
  int64_t elems = 0;
  int64_t persistent = 0;
  int32_t tensors = 0;              // parameter tensors
  int32_t block = -1;               // transformer block, -1 embedding, -2 head
  std::vector<int64_t> gathered;    // elements of each tensor at or above the threshold, forward order
  std::vector<int64_t> sizes;       // elements of every tensor, forward order
  std::vector<int64_t> dims;        // per tensor of `sizes`: a matrix's larger dimension, 0 for a vector
};

// How a framework cuts a stage's parameters and gradients into buckets.
struct BucketRule {
  int64_t prefetch_bucket = 0;
  int64_t reduce_bucket = 0;
  bool per_block = false;                            // FSDP: one bucket per block
  spec::GatherUnit gather = spec::GatherUnit::kModule;
  bool per_tensor_reduce = false;                    // one reduce-scatter per gradient tensor
  bool ipg_flush = false;                            // DeepSpeed: a bucket's tensors flushed by the IPG rule
  bool block_copy_out = false;                       // FSDP2: a block's gathered buffer copied out per parameter
  int64_t qgz_world = 0;                             // qgZ (DeepSpeed ZeRO++) over this many ranks: the bucket's
                                                     // split into all-to-all'd matrices and fallbacks (below)
};
BucketRule bucket_rule(const spec::ZeroConfig& zero, const spec::FrameworkProfile& framework);
// Elements below which a ZeRO-3 tensor stays whole on every rank (0 when nothing persists: FSDP
// flattens every tensor of a unit, and below stage 3 nothing is gathered).
int64_t persistence_threshold(const spec::ZeroConfig& zero, const spec::FrameworkProfile& framework);
// Which of a unit's tensors: all, all but the routed experts' (Unit::expert), or only those.
// Where the experts' data-parallel group differs from the dense layers' (spec::Plan::expert_dp),
// their gradients are bucketed and reduced apart (expert_grad_buckets), as Megatron-Core keeps
// expert parameters in buffers of their own.
enum class TensorSet : uint8_t { kAll, kDense, kExperts };
UnitParams unit_params(const std::vector<Unit>& units, int32_t unit, bool stage_has_embedding, int64_t tied_copy,
                       int64_t persistence_threshold, TensorSet set = TensorSet::kAll);

std::vector<Bucket> grad_buckets(const ChunkInfo& chunk, const std::vector<UnitParams>& params, const BucketRule& rule);
// The routed experts' gradient buckets of a chunk: grad_buckets over their parameters alone
// (`params` of TensorSet::kExperts), each trimmed to the units holding experts, empty ones dropped,
// Bucket::experts set.
std::vector<Bucket> expert_grad_buckets(const ChunkInfo& chunk, const std::vector<UnitParams>& params, const BucketRule& rule);
// Whether gradient bucket `b` holds its stage's copy of an embedding table tied over `pp` > 1
// stages (the embedding on the first stage, the head on the last). Its gradient is summed over
// the embedding group and reduced once a step, after the stage's last compute, whatever the ZeRO
// stage (program/emit.cpp grads_ready says why): under ZeRO-2/3 it stays whole until then.
inline bool holds_tied_table(const spec::Model& m, int64_t pp, const Bucket& b) {
  return m.tied_embeddings && pp > 1 &&
         ((b.stage == 0 && b.unit_begin == 0) || (b.stage == pp - 1 && b.unit_end == head_unit(m) + 1));
}
std::vector<Bucket> param_buckets(const ChunkInfo& chunk, const std::vector<UnitParams>& params, const BucketRule& rule);
std::vector<Bucket> allgather_buckets(int32_t stage, int64_t stage_elems, int64_t allgather_bucket, bool experts = false);

// Elements of one dp rank's shard: ceil(elems / dp) (flat buffers are padded to a multiple of dp).
inline int64_t shard_elems(int64_t elems, int64_t dp) { return (elems + dp - 1) / dp; }

// ZeRO++ (DeepSpeed; docs/program.md "Hierarchical and quantized ZeRO").
// qwZ quantizes each gather's local shard of s elements in g groups, one fp32 scale each
// (partition_parameters.py CUDAQuantizer.quantize, target group size b = 8000):
//     g = ⌈s/b⌉, raised by one until 8g divides s, then doubled while 16g divides s and s/g > b
// (DeepSpeed then asserts 8g | s and s/g < 16000; qwz_groups returns 0 when they fail). A gather
// over W ranks of the tensors of a collective c moves W·s_c int8 values and 4·W·g(s_c) bytes of
// scales, s_c = Σ_tensors ⌈n/dp⌉·(dp/W) (each tensor's primary shard over dp, or hpZ's secondary
// of dp/W of them), in two all-gathers: the values and the scales.
int64_t qwz_groups(int64_t shard, int64_t block);
// The framework's collectives for gathering `tensors` (forward order): the tensors of each
// (DeepSpeed: closing at prefetch_bucket elements; deepspeed-0.5: one each; FSDP: one).
std::vector<std::vector<int64_t>> gather_split(const std::vector<int64_t>& tensors, const BucketRule& rule);
struct QuantizedGather {
  int64_t bytes = 0;        // values and scales on the wire, over the whole group
  int64_t scales = 0;       // fp32 scales on the wire
  int32_t collectives = 0;  // the framework's collectives for the bucket (each one sends two)
  int64_t bad_shard = 0;    // a collective's shard DeepSpeed's quantizer refuses (not a multiple of 8), 0 if none
};
// `tensors`: the bucket's gathered tensors in forward order; `rule` splits them into collectives.
QuantizedGather qwz_gather(const std::vector<int64_t>& tensors, const BucketRule& rule, int64_t dp, int64_t group,
                           int64_t block);

// qgZ (coalesced_collectives.py all_to_all_quant_reduce, stage3.py __avg_scatter_grads) reduces a
// gradient bucket tensor by tensor over W = dp ranks, L of them on a node: a vector, or a tensor
// whose n is not a multiple of 2W, by a reduce-scatter of its own (the fallback); any other
// (a matrix of larger dimension d) in G = max(d, W) groups of int4 values:
//     swizzle + quantize                   n/2 bytes and 4G of scales
//     all-to-all over the node (L)         two all-to-alls: the values and the scales
//     dequantize, sum L chunks, requantize n/(2L) bytes and 4G/L of scales
//     all-to-all across nodes (W/L)        two all-to-alls
//     dequantize, average the W/L chunks   n/W elements: the rank's shard
// Bucket fields (grad buckets, with BucketRule::qgz_world): the matrices, their elements and Σ G.

}  // namespace stagecraft::program
