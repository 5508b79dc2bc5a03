// Stage split: which blocks each pipeline stage (and virtual chunk) holds. Given stage_layers,
// it is used as is (each stage's layers spread evenly over its virtual chunks, the first chunks
// taking the remainder). Otherwise the blocks are cut into pp*v contiguous chunks in model order
// minimising the largest chunk cost, with the embedding on the first chunk and the head + loss
// on the last — a dynamic-programming linear partition (DeepSpeed's partition_balanced solves the
// same problem). Cost = forward FLOPs per token of the chunk's units.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/units.hpp"
#include "core/spec/plan.hpp"

namespace stagecraft::program {

// Blocks per model chunk in model order: chunk k (0 <= k < pp*v) runs on stage k % pp as its
// virtual chunk k / pp.
std::vector<int64_t> chunk_layers(const spec::Model& m, const spec::Plan& p, const std::vector<Unit>& units);
// Minimises max over parts of (sum of costs in part + extra_first if first + extra_last if last)
// for `parts` contiguous non-empty parts of `costs`. Returns the part sizes.
std::vector<int64_t> linear_partition(const std::vector<double>& costs, int64_t parts, double extra_first,
                                      double extra_last);

}  // namespace stagecraft::program
