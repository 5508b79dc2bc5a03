// ZeRO bucketing (Rajbhandari et al., SC'20; DeepSpeed's runtime, REFERENCE.md):
//  * gradient buckets: per chunk, units taken in backward order (last unit first) and packed
//    while the bucket stays within reduce_bucket elements (a single larger unit is a bucket of
//    its own) — DeepSpeed flushes its reduce bucket when the next gradient would overflow it;
//  * ZeRO-3 parameter buckets: per chunk, units in forward order packed within prefetch_bucket
//    elements; tensors under param_persistence_threshold stay whole on every rank and are not
//    gathered (persistent_elems);
//  * ZeRO-1/2 all-gather buckets: the stage's updated parameters in allgather_bucket pieces.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/program.hpp"
#include "core/program/units.hpp"

namespace stagecraft::program {

// Parameters of `unit` as held on `stage` (a tied head keeps a copy of the embedding table on a
// stage that does not hold the embedding), and the part of them below the persistence threshold.
struct UnitParams {
  int64_t elems = 0;
  int64_t persistent = 0;
};
UnitParams unit_params(const std::vector<Unit>& units, int32_t unit, bool stage_has_embedding, int64_t tied_copy,
                       int64_t persistence_threshold);

std::vector<Bucket> grad_buckets(const ChunkInfo& chunk, const std::vector<UnitParams>& params, int64_t reduce_bucket);
std::vector<Bucket> param_buckets(const ChunkInfo& chunk, const std::vector<UnitParams>& params, int64_t prefetch_bucket);
std::vector<Bucket> allgather_buckets(int32_t stage, int64_t stage_elems, int64_t allgather_bucket);

// Elements of one dp rank's shard: ceil(elems / dp) (flat buffers are padded to a multiple of dp).
inline int64_t shard_elems(int64_t elems, int64_t dp) { return (elems + dp - 1) / dp; }

}  // namespace stagecraft::program
