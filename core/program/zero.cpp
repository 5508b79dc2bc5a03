#include "core/program/zero.hpp"

#include <algorithm>

namespace stagecraft::program {

UnitParams unit_params(const std::vector<Unit>& units, int32_t unit, bool stage_has_embedding, int64_t tied_copy,
                       int64_t persistence_threshold) {
  const Unit& u = units[static_cast<std::size_t>(unit)];
  UnitParams p;
  auto add = [&](int64_t t) {
    p.elems += t;
    if (t < persistence_threshold) p.persistent += t;
  };
  for (int64_t t : u.tensors) add(t);
  if (u.kind == UnitKind::kHead && !stage_has_embedding && tied_copy > 0) add(tied_copy);
  return p;
}

std::vector<Bucket> grad_buckets(const ChunkInfo& c, const std::vector<UnitParams>& params, int64_t reduce_bucket) {
  std::vector<Bucket> out;
  Bucket cur{c.stage, c.chunk, c.unit_end, c.unit_end, 0, 0};
  for (int32_t u = c.unit_end - 1; u >= c.unit_begin; --u) {
    const int64_t e = params[static_cast<std::size_t>(u)].elems;
    if (cur.elems > 0 && cur.elems + e > reduce_bucket) {
      out.push_back(cur);
      cur = Bucket{c.stage, c.chunk, u + 1, u + 1, 0, 0};
    }
    cur.unit_begin = u;
    cur.elems += e;
  }
  if (cur.unit_begin < cur.unit_end) out.push_back(cur);
  return out;  // backward order: out[0] holds the chunk's last units
}

std::vector<Bucket> param_buckets(const ChunkInfo& c, const std::vector<UnitParams>& params, int64_t prefetch_bucket) {
  std::vector<Bucket> out;
  Bucket cur{c.stage, c.chunk, c.unit_begin, c.unit_begin, 0, 0};
  for (int32_t u = c.unit_begin; u < c.unit_end; ++u) {
    const UnitParams& p = params[static_cast<std::size_t>(u)];
    const int64_t gathered = p.elems - p.persistent;
    if (cur.elems > 0 && cur.elems + gathered > prefetch_bucket) {
      out.push_back(cur);
      cur = Bucket{c.stage, c.chunk, u, u, 0, 0};
    }
    cur.unit_end = u + 1;
    cur.elems += gathered;
    cur.persistent_elems += p.persistent;
  }
  if (cur.unit_begin < cur.unit_end) out.push_back(cur);
  return out;  // forward order
}

std::vector<Bucket> allgather_buckets(int32_t stage, int64_t stage_elems, int64_t allgather_bucket) {
  std::vector<Bucket> out;
  for (int64_t done = 0; done < stage_elems; done += allgather_bucket) {
    out.push_back(Bucket{stage, -1, -1, -1, std::min(allgather_bucket, stage_elems - done), 0});
  }
  return out;
}

}  // namespace stagecraft::program
