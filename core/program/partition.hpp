// Stage split: which blocks each pipeline stage (and virtual chunk) holds. Given stage_layers,
// it is used as is (each stage's layers spread evenly over its virtual chunks, the first chunks
// taking the remainder). Otherwise the blocks are cut into pp*v contiguous chunks in model order
// minimising the largest chunk cost, with the embedding on the first chunk and the head + loss
// on the last — a dynamic-programming linear partition (DeepSpeed's partition_balanced solves the
// same problem). Cost = forward FLOPs per token of the chunk's units.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/program.hpp"
#include "core/program/units.hpp"
#include "core/spec/plan.hpp"

namespace stagecraft::program {

// Blocks per model chunk in model order: chunk k (0 <= k < pp*v) runs on stage k % pp as its
// virtual chunk k / pp.
std::vector<int64_t> chunk_layers(const spec::Model& m, const spec::Plan& p, const std::vector<Unit>& units);
// Blocks per stage: stage s holds chunks s, s + pp, s + 2pp, ... of `chunk_layers`.
std::vector<int64_t> stage_layers_of(const std::vector<int64_t>& chunk_layers, int64_t pp);
// The chunks of `chunk_layers` placed on their stages (stage-major, as Program::chunks): chunk k
// in model order runs on stage k % pp as virtual chunk k / pp; chunk 0 also holds the embedding,
// the last chunk the head. `params` is left 0.
std::vector<ChunkInfo> place_chunks(const spec::Model& m, int64_t pp, int64_t v, const std::vector<int64_t>& chunk_layers);
// Minimises max over parts of (sum of costs in part + extra_first if first + extra_last if last)
// for `parts` contiguous non-empty parts of `costs`. Returns the part sizes.
std::vector<int64_t> linear_partition(const std::vector<double>& costs, int64_t parts, double extra_first,
                                      double extra_last);

}  // namespace stagecraft::program
