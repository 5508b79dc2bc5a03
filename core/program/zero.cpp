#include "core/program/zero.hpp"

#include <algorithm>
#include <unordered_map>
#include <cmath>
#include <numeric>

namespace stagecraft::program {

UnitParams unit_params(const std::vector<Unit>& units, int32_t unit, bool stage_has_embedding, int64_t tied_copy,
                       int64_t persistence_threshold, TensorSet set) {
  const Unit& u = units[static_cast<std::size_t>(unit)];
  UnitParams p;
  p.block = u.block >= 0 ? u.block : (u.kind == UnitKind::kEmbedding ? -1 : -2);
  auto add = [&](int64_t t, int64_t dim) {
    p.elems += t;
    ++p.tensors;
    p.sizes.push_back(t);
    p.dims.push_back(dim);
    if (t < persistence_threshold) p.persistent += t;
    else p.gathered.push_back(t);
  };
  for (std::size_t i = 0; i < u.tensors.size(); ++i) {
    const bool expert = i < u.expert.size() && u.expert[i] != 0;
    if (set == TensorSet::kAll || (set == TensorSet::kExperts) == expert) add(u.tensors[i], u.dims.empty() ? 0 : u.dims[i]);
  }
  // a tied head's copy of the embedding table (the embedding unit's first tensor, wte)
  if (set != TensorSet::kExperts && u.kind == UnitKind::kHead && !stage_has_embedding && tied_copy > 0) {
    add(tied_copy, units.front().dims.empty() ? 0 : units.front().dims.front());
  }
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
  // qgZ: a matrix whose elements divide by 2W is all-to-all'd in max(d, W) groups; anything else falls back
  const auto qgz = [&](const UnitParams& p) {
    if (rule.qgz_world <= 0) return;
    for (std::size_t i = 0; i < p.sizes.size(); ++i) {
      const int64_t n = p.sizes[i], d = i < p.dims.size() ? p.dims[i] : 0;
      if (d > 0 && n % (2 * rule.qgz_world) == 0) {
        ++cur.qgz_matrices;
        cur.qgz_elems += n;
        cur.qgz_groups += std::max(d, rule.qgz_world);
      } else {
        ++cur.qgz_fallbacks;
      }
    }
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
    qgz(p);
    tensors.insert(tensors.end(), p.sizes.rbegin(), p.sizes.rend());
    block = p.block;
  }
  if (cur.unit_begin < cur.unit_end) close();
  return out;  // backward order: out[0] holds the chunk's last units
}

std::vector<Bucket> expert_grad_buckets(const ChunkInfo& c, const std::vector<UnitParams>& params, const BucketRule& rule) {
  std::vector<Bucket> out;
  const auto holds = [&](int32_t u) { return params[static_cast<std::size_t>(u)].elems > 0; };
  for (Bucket b : grad_buckets(c, params, rule)) {
    if (b.elems == 0) continue;
    while (!holds(b.unit_begin)) ++b.unit_begin;
    while (!holds(b.unit_end - 1)) --b.unit_end;
    b.experts = true;
    out.push_back(b);
  }
  return out;
}

std::vector<std::vector<int64_t>> gather_split(const std::vector<int64_t>& tensors, const BucketRule& rule) {
  std::vector<std::vector<int64_t>> out;
  if (tensors.empty()) return out;
  if (rule.gather == spec::GatherUnit::kBlock) return {tensors};
  if (rule.gather == spec::GatherUnit::kParameter) {
    for (int64_t t : tensors) out.push_back({t});
    return out;
  }
  std::vector<int64_t> open;  // the collective being filled
  int64_t elems = 0;
  for (int64_t t : tensors) {
    open.push_back(t);
    elems += t;
    if (elems >= rule.prefetch_bucket) {
      out.push_back(std::move(open));
      open.clear();
      elems = 0;
    }
  }
  if (!open.empty()) out.push_back(std::move(open));
  return out;
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
  const std::vector<std::vector<int64_t>> split = gather_split(tensors, rule);
  g.collectives = static_cast<int32_t>(split.size());
  if (rule.gather == spec::GatherUnit::kBlock) {
    // FSDP's flat parameter is the gathered buffer itself; FSDP2's per-parameter tensors are copied out of it
    g.coalesced = rule.block_copy_out ? std::accumulate(tensors.begin(), tensors.end(), int64_t{0}) : 0;
    return g;
  }
  for (const std::vector<int64_t>& c : split) {
    if (c.size() > 1 && rule.gather == spec::GatherUnit::kModule) g.coalesced += std::accumulate(c.begin(), c.end(), int64_t{0});
  }
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

namespace {

int64_t qwz_groups_uncached(int64_t shard, int64_t block) {
  if (shard <= 0 || block <= 0 || shard % 8 != 0) return 0;  // no g below the shard has 8g | shard
  // DeepSpeed raises g one by one from ⌈s/b⌉ until 8g | s: the least divisor of m = s/8 at or
  // above it — the least such divisor up to √m (scanning up), or m/e for the largest divisor
  // e ≤ m/start below √m (scanning down; m/e ≥ start): each scan stops at its first hit
  const int64_t start = (shard + block - 1) / block, m = shard / 8;
  if (start > m) return 0;
  int64_t g = m;  // m divides m
  for (int64_t d = start; d * d <= m; ++d) {
    if (m % d == 0) {
      g = d;
      break;
    }
  }
  int64_t root = static_cast<int64_t>(std::sqrt(static_cast<double>(m)));
  while (root * root > m) --root;
  while ((root + 1) * (root + 1) <= m) ++root;
  for (int64_t e = std::min(m / start, root); e >= 1; --e) {
    if (m % e == 0) {
      g = std::min(g, m / e);
      break;
    }
  }
  while (shard % (16 * g) == 0 && shard / g > block) g *= 2;
  if (shard % (8 * g) != 0 || shard / g >= 16000 || shard <= g) return 0;
  return g;
}

}  // namespace

// The divisor scans take up to ~2√(shard/8) steps and every lowering of a qwZ plan asks again for
// the same few shards: each thread keeps its answers (a search lowers thousands of such plans).
int64_t qwz_groups(int64_t shard, int64_t block) {
  thread_local std::unordered_map<int64_t, std::pair<int64_t, int64_t>> known;   // shard -> (block, g)
  if (auto it = known.find(shard); it != known.end() && it->second.first == block) return it->second.second;
  if (known.size() > 4096) known.clear();
  const int64_t g = qwz_groups_uncached(shard, block);
  known[shard] = {block, g};
  return g;
}

QuantizedGather qwz_gather(const std::vector<int64_t>& tensors, const BucketRule& rule, int64_t dp, int64_t group,
                           int64_t block) {
  QuantizedGather q;
  for (const std::vector<int64_t>& c : gather_split(tensors, rule)) {
    int64_t shard = 0;  // this rank's piece of the collective: primary shards, or dp/group of them (hpZ's secondary)
    for (int64_t n : c) shard += shard_elems(n, dp) * (dp / group);
    const int64_t g = qwz_groups(shard, block);
    if (g == 0 && q.bad_shard == 0) q.bad_shard = shard;
    ++q.collectives;
    q.scales += 4 * g * group;
    q.bytes += shard * group + 4 * g * group;
  }
  return q;
}

std::vector<Bucket> allgather_buckets(int32_t stage, int64_t stage_elems, int64_t allgather_bucket, bool experts) {
  std::vector<Bucket> out;
  for (int64_t done = 0; done < stage_elems; done += allgather_bucket) {
    out.push_back(Bucket{stage, -1, -1, -1, std::min(allgather_bucket, stage_elems - done), 0, 1});
    out.back().experts = experts;
  }
  return out;
}

}  // namespace stagecraft::program
