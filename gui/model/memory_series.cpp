#include "gui/model/memory_series.hpp"

#include <algorithm>

namespace stagecraft::gui {

MemoryStack memory_of(const trace::Trace& t, int64_t rank, int64_t origin_ns) {
  MemoryStack s;
  s.rank = rank;
  std::vector<const trace::MemorySample*> samples;
  for (const trace::MemorySample& m : t.memory) {
    if (m.rank == rank) samples.push_back(&m);
  }
  std::stable_sort(samples.begin(), samples.end(), [](const auto* a, const auto* b) { return a->time_ns < b->time_ns; });
  for (const trace::MemorySample* m : samples) {
    // Several changes at one moment: the last one is what is held from then on.
    if (!s.time_ns.empty() && s.time_ns.back() == m->time_ns - origin_ns) {
      s.bytes.back() = m->bytes;
      s.instr.back() = m->instr;
      continue;
    }
    s.time_ns.push_back(m->time_ns - origin_ns);
    s.bytes.push_back(m->bytes);
    s.instr.push_back(m->instr);
  }
  for (std::size_t i = 0; i < s.bytes.size(); ++i) {
    if (s.bytes[i].total() > s.bytes[s.peak].total()) s.peak = i;
  }
  return s;
}

int MemoryStack::sample_at(int64_t t) const {
  const auto it = std::upper_bound(time_ns.begin(), time_ns.end(), t);
  return static_cast<int>(it - time_ns.begin()) - 1;
}

std::vector<int> MemoryStack::columns(int64_t t0, int64_t t1, int n) const {
  std::vector<int> out(static_cast<std::size_t>(std::max(1, n)), -1);
  if (empty() || t1 <= t0) return out;
  const auto cols = static_cast<int64_t>(out.size());
  const int64_t q = (t1 - t0) / cols, rem = (t1 - t0) % cols;
  const auto col_start = [&](int64_t c) { return t0 + c * q + c * rem / cols; };
  int i = sample_at(t0);
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t end = c + 1 == cols ? t1 : col_start(c + 1);
    int best = i;   // the sample holding at the column's start
    int64_t best_total = best >= 0 ? bytes[static_cast<std::size_t>(best)].total() : -1;
    while (i + 1 < static_cast<int>(time_ns.size()) && time_ns[static_cast<std::size_t>(i + 1)] < end) {
      ++i;
      const int64_t total = bytes[static_cast<std::size_t>(i)].total();
      if (total > best_total) {
        best = i;
        best_total = total;
      }
    }
    out[static_cast<std::size_t>(c)] = best;
  }
  return out;
}

}  // namespace stagecraft::gui
