// Half-open position ranges of a flat buffer (executor::Range, params.hpp): intersection and
// difference of sorted lists, the small algebra ZeRO sharding is made of. Lists are sorted and
// disjoint in, sorted and disjoint out.
#pragma once

#include <algorithm>
#include <vector>

#include "executor/model/params.hpp"

namespace stagecraft::executor {

inline Range intersect(Range a, Range b) {
  const int64_t lo = std::max(a.begin, b.begin), hi = std::min(a.end, b.end);
  return lo < hi ? Range{lo, hi} : Range{lo, lo};
}

// The parts of `r` not covered by `holes` (sorted, disjoint).
inline std::vector<Range> subtract(Range r, const std::vector<Range>& holes) {
  std::vector<Range> out;
  int64_t at = r.begin;
  for (const Range& h : holes) {
    if (h.end <= at) continue;
    if (h.begin >= r.end) break;
    if (h.begin > at) out.push_back({at, h.begin});
    at = std::max(at, h.end);
  }
  if (at < r.end) out.push_back({at, r.end});
  return out;
}

inline std::vector<Range> subtract(const std::vector<Range>& rs, const std::vector<Range>& holes) {
  std::vector<Range> out;
  for (const Range& r : rs) {
    for (const Range& p : subtract(r, holes)) out.push_back(p);
  }
  return out;
}

// The parts of `rs` inside `window`.
inline std::vector<Range> clip(const std::vector<Range>& rs, Range window) {
  std::vector<Range> out;
  for (const Range& r : rs) {
    const Range c = intersect(r, window);
    if (c.size() > 0) out.push_back(c);
  }
  return out;
}

inline int64_t total(const std::vector<Range>& rs) {
  int64_t n = 0;
  for (const Range& r : rs) n += r.size();
  return n;
}

}  // namespace stagecraft::executor
