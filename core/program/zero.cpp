#include "core/program/zero.hpp"

#include <algorithm>
#include <numeric>

namespace stagecraft::program {

UnitParams unit_params(const std::vector<Unit>& units, int32_t unit, bool stage_has_embedding, int64_t tied_copy,
                       int64_t persistence_threshold) {
  const Unit& u = units[static_cast<std::size_t>(unit)];
  UnitParams p;
  p.block = u.block >= 0 ? u.block : (u.kind == UnitKind::kEmbedding ? -1 : -2);
  auto add = [&](int64_t t) {
    p.elems += t;
    ++p.tensors;
    p.sizes.push_back(t);
    if (t < persistence_threshold) p.persistent += t;
    else p.gathered.push_back(t);
  };
  for (int64_t t : u.tensors) add(t);
  if (u.kind == UnitKind::kHead && !stage_has_embedding && tied_copy > 0) add(tied_copy);
  return p;
}

BucketRule bucket_rule(const spec::ZeroConfig& zero, const spec::FrameworkProfile& framework) {
  BucketRule r;
  r.prefetch_bucket = zero.prefetch_bucket;
  r.reduce_bucket = zero.reduce_bucket;
  r.per_block = framework.gather == spec::GatherUnit::kBlock;
  r.gather = framework.gather;
  r.per_tensor_reduce = framework.gather == spec::GatherUnit::kParameter;
  r.ipg_flush = framework.framework == spec::Framework::kDeepSpeed;
  r.block_copy_out = framework.gather == spec::GatherUnit::kBlock && framework.coalesced_copy_passes > 0;
  return r;
}

int64_t persistence_threshold(const spec::ZeroConfig& zero, const spec::FrameworkProfile& framework) {
  if (zero.stage != 3 || framework.gather == spec::GatherUnit::kBlock) return 0;
  return zero.param_persistence_threshold;
}

namespace {

// DeepSpeed's IPG flushes over `tensors` in backward order: one each time the next tensor would
// overflow reduce_bucket, and one for the rest.
int32_t ipg_flushes(const std::vector<int64_t>& tensors, int64_t reduce_bucket) {
  int32_t n = 0;
  int64_t open = 0;
  for (int64_t t : tensors) {
    if (open > 0 && open + t > reduce_bucket) {
      ++n;
      open = 0;
    }
    open += t;
  }
  return n + (open > 0 ? 1 : 0);
}

}  // namespace

std::vector<Bucket> grad_buckets(const ChunkInfo& c, const std::vector<UnitParams>& params, const BucketRule& rule) {
  std::vector<Bucket> out;
  Bucket cur{c.stage, c.chunk, c.unit_end, c.unit_end, 0, 0, 0};
  std::vector<int64_t> tensors;  // the open bucket's tensors, backward order
  auto close = [&] {
    if (rule.ipg_flush) cur.collectives = std::max(1, ipg_flushes(tensors, rule.reduce_bucket));
    out.push_back(cur);
    tensors.clear();
  };
  int32_t block = 0;
  for (int32_t u = c.unit_end - 1; u >= c.unit_begin; --u) {
    const UnitParams& p = params[static_cast<std::size_t>(u)];
    const bool full = rule.per_block ? p.block != block : cur.elems + p.elems > rule.reduce_bucket;
    if (cur.elems > 0 && full) {
      close();
      cur = Bucket{c.stage, c.chunk, u + 1, u + 1, 0, 0, 0};
    }
    cur.unit_begin = u;
    cur.elems += p.elems;
    cur.collectives = rule.per_tensor_reduce ? cur.collectives + p.tensors : 1;
    tensors.insert(tensors.end(), p.sizes.rbegin(), p.sizes.rend());
    block = p.block;
  }
  if (cur.unit_begin < cur.unit_end) close();
  return out;  // backward order: out[0] holds the chunk's last units
}

namespace {

// Collectives the framework issues to gather `tensors` (forward order), and the elements of
// those holding two or more tensors (DeepSpeed's coalesced gathers).
struct GatherSplit {
  int32_t collectives = 0;
  int64_t coalesced = 0;
};
GatherSplit gather_collectives(const std::vector<int64_t>& tensors, const BucketRule& rule) {
  GatherSplit g;
  if (tensors.empty()) return g;
  if (rule.gather == spec::GatherUnit::kBlock) {
    // FSDP's flat parameter is the gathered buffer itself; FSDP2's per-parameter tensors are copied out of it
    return {1, rule.block_copy_out ? std::accumulate(tensors.begin(), tensors.end(), int64_t{0}) : 0};
  }
  if (rule.gather == spec::GatherUnit::kParameter) return {static_cast<int32_t>(tensors.size()), 0};
  int64_t open = 0;  // elements in the collective being filled
  int32_t count = 0; // its tensors
  auto close = [&] {
    ++g.collectives;
    if (count > 1) g.coalesced += open;
    open = 0;
    count = 0;
  };
  for (int64_t t : tensors) {
    open += t;
    ++count;
    if (open >= rule.prefetch_bucket) close();
  }
  if (open > 0) close();
  return g;
}

}  // namespace

std::vector<Bucket> param_buckets(const ChunkInfo& c, const std::vector<UnitParams>& params, const BucketRule& rule) {
  std::vector<Bucket> out;
  Bucket cur{c.stage, c.chunk, c.unit_begin, c.unit_begin, 0, 0, 0};
  std::vector<int64_t> tensors;  // gathered tensors of the open bucket
  auto close = [&] {
    const GatherSplit g = gather_collectives(tensors, rule);
    cur.collectives = g.collectives;
    cur.coalesced_elems = g.coalesced;
    out.push_back(cur);
    tensors.clear();
  };
  int32_t block = 0;
  for (int32_t u = c.unit_begin; u < c.unit_end; ++u) {
    const UnitParams& p = params[static_cast<std::size_t>(u)];
    const int64_t gathered = p.elems - p.persistent;
    const bool full = rule.per_block ? p.block != block : cur.elems + gathered > rule.prefetch_bucket;
    if (cur.elems > 0 && full) {
      close();
      cur = Bucket{c.stage, c.chunk, u, u, 0, 0, 0};
    }
    cur.unit_end = u + 1;
    cur.elems += gathered;
    cur.persistent_elems += p.persistent;
    tensors.insert(tensors.end(), p.gathered.begin(), p.gathered.end());
    block = p.block;
  }
  if (cur.unit_begin < cur.unit_end) close();
  return out;  // forward order
}

std::vector<Bucket> allgather_buckets(int32_t stage, int64_t stage_elems, int64_t allgather_bucket) {
  std::vector<Bucket> out;
  for (int64_t done = 0; done < stage_elems; done += allgather_bucket) {
    out.push_back(Bucket{stage, -1, -1, -1, std::min(allgather_bucket, stage_elems - done), 0, 1});
  }
  return out;
}

}  // namespace stagecraft::program
