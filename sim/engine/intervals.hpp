// Time intervals [begin, end) in nanoseconds, and the three operations the time breakdown needs:
// union, total length and overlap. Used by the simulator and by trace analysis alike, so a
// simulated and a measured trace are split into compute / exposed communication / bubble the
// same way.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace stagecraft::sim {

struct Interval {
  int64_t begin = 0, end = 0;
};

// The union as disjoint intervals in time order (empty intervals dropped), computed in place.
inline std::vector<Interval> union_of(std::vector<Interval> v) {
  auto by_begin = [](const Interval& a, const Interval& b) { return a.begin < b.begin; };
  if (!std::is_sorted(v.begin(), v.end(), by_begin)) std::sort(v.begin(), v.end(), by_begin);
  std::size_t n = 0;  // v[0, n) is the union so far
  for (const Interval& i : v) {
    if (i.end <= i.begin) continue;
    if (n > 0 && i.begin <= v[n - 1].end) {
      v[n - 1].end = std::max(v[n - 1].end, i.end);
    } else {
      v[n++] = i;
    }
  }
  v.resize(n);
  return v;
}

// The union of two disjoint, time-ordered lists, by merging: O(|a| + |b|).
inline std::vector<Interval> unite(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  out.reserve(a.size() + b.size());
  auto add = [&out](const Interval& i) {
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  };
  std::size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].begin <= b[j].begin)) {
      add(a[i++]);
    } else {
      add(b[j++]);
    }
  }
  return out;
}

inline int64_t length(const std::vector<Interval>& disjoint) {
  int64_t total = 0;
  for (const Interval& i : disjoint) total += i.end - i.begin;
  return total;
}

// Length of the intersection of two disjoint, time-ordered lists.
inline int64_t overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t total = 0;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    total += std::max<int64_t>(0, std::min(a[i].end, b[j].end) - std::max(a[i].begin, b[j].begin));
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

}  // namespace stagecraft::sim
