// qgZ (DeepSpeed ZeRO++'s quantized gradients, coalesced_collectives.py all_to_all_quant_reduce)
// for one gradient matrix of a bucket, on host values: the geometry of its partitions and groups,
// and the three computations around its two all-to-alls. No communication here: the interpreter
// (interpreter_zero.cpp) moves the buffers these fill.
//
// W = dp ranks, L of them a node (local_group), M = W/L nodes; dp index d = node·L + j (j: local
// index). Rank d's partition of the tensor is what the reduction leaves it: here the tensor's
// intersection with rank d's shard of the flat stage buffer (zero/stage_layout.hpp), where
// DeepSpeed cuts each tensor in W equal parts (its partitions are per tensor; ours are slices of
// one flat buffer, so some are empty and their sizes differ). The groups are DeepSpeed's:
// G = max(rows, cols, W) groups of n/G consecutive elements of the tensor; a group a partition edge
// cuts becomes two (one scale each). Steps (b = 4 bits, quantize.hpp):
//   1 swizzle + quantize   partitions reordered so that the ones for local peer j — ranks
//                          j, j+L, ..., j+(M-1)L — are contiguous (swizzled_quantize.cu: partition
//                          p goes to slot (p mod L)·M + p/L), each quantized in its groups
//   (all-to-all over the node: chunk j to local peer j; values and scales)
//   2 reduce + requantize  the L chunks received (from local peers 0..L-1, each the partitions of
//                          ranks j + kL) dequantized and summed in fp32, requantized in the same
//                          groups (quant_reduce.cu: output groups of the input groups' size)
//   (all-to-all across nodes: partition of rank j + kL to node k; values and scales)
//   3 dequantize + sum     the M partitions received (one a node), dequantized and summed: this
//                          rank's partition of Σ over all W ranks.
// The result is the sum over the ranks, the executor's reduce-scatter convention (the loss is
// weighted 1/(micro_batches·dp) so sums are the global mean). DeepSpeed divides step 3's sum by M
// (nodes) where its reduce_scatter_coalesced pre-divides by W: that is Σ/M against Σ/W, a factor L
// apart; a correct reduction gives what the plain path gives, so no division here.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "executor/model/params.hpp"
#include "executor/zero/quantize.hpp"

namespace stagecraft::executor {

// Quantized values (int8, or int4 packed two a byte) and fp32 scales of some pieces, in order.
struct QuantizedPayload {
  std::vector<int8_t> values;
  std::vector<float> scales;
};

class QgzMatrix {
 public:
  // `range`: the tensor's flat positions; `parts`: its W partitions in dp order (range ∩ shard d,
  // tiling range); `rows` x `cols` its shape; `local` = L. Throws ExecutorError when n is not a
  // multiple of 2W, G not a multiple of W (DeepSpeed's kernel asserts it) or L does not divide W.
  QgzMatrix(Range range, std::vector<Range> parts, int64_t rows, int64_t cols, int64_t local);

  Range range() const { return range_; }
  int64_t groups() const { return groups_; }  // G
  int64_t world() const { return static_cast<int64_t>(parts_.size()); }
  int64_t local() const { return local_; }
  int64_t nodes() const { return world() / local_; }
  Range part(int64_t d) const { return parts_[static_cast<std::size_t>(d)]; }
  // Group lengths of partition d: the tensor's groups of n/G cut at the partition's edges.
  std::vector<int64_t> part_groups(int64_t d) const;
  int64_t part_bytes(int64_t d) const { return int4_bytes(part(d).size()); }
  int64_t part_scales(int64_t d) const { return static_cast<int64_t>(part_groups(d).size()); }

  // Step 1: the tensor's n values (dp order) -> the swizzled payload; `send_values` and
  // `send_scales` get the count of each local peer's chunk. `error` adds the quantization's loss.
  QuantizedPayload swizzle_quantize(std::span<const float> tensor, std::vector<int64_t>& send_values,
                               std::vector<int64_t>& send_scales, QuantizationError& error) const;
  // Counts one chunk of local index j holds (what each local peer sends to rank j).
  int64_t chunk_values(int64_t j) const;
  int64_t chunk_scales(int64_t j) const;
  // Step 2 on local index j: `received` = L chunks j in local-peer order -> the M partitions of
  // ranks j + kL summed and requantized, in k order; the send counts per node k.
  QuantizedPayload reduce_requantize(int64_t j, const QuantizedPayload& received, std::vector<int64_t>& send_values,
                                std::vector<int64_t>& send_scales, QuantizationError& error) const;
  // Step 3 on dp index d: `received` = M partitions d in node order -> their dequantized sum.
  std::vector<float> dequantize_sum(int64_t d, const QuantizedPayload& received) const;

 private:
  // The part's values dequantized from `values` / `scales` at the given offsets.
  void dequantize_part(int64_t d, std::span<const int8_t> values, std::span<const float> scales, std::span<float> out) const;
  void quantize_part(int64_t d, std::span<const float> x, QuantizedPayload& out, QuantizationError& error) const;

  Range range_;
  std::vector<Range> parts_;
  int64_t groups_ = 0, group_elems_ = 0, local_ = 1;
};

}  // namespace stagecraft::executor
