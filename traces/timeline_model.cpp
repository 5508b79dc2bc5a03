#include "traces/timeline_model.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <numeric>

#include "core/spec/error.hpp"
#include "traces/analysis.hpp"

namespace stagecraft::traces {

namespace {

int64_t union_length(const TimelineRow& r, int64_t t0, int64_t t1) {
  int64_t total = 0, cur_s = 0, cur_e = std::numeric_limits<int64_t>::min();
  for (std::size_t i = 0; i < r.size(); ++i) {
    const int64_t s = std::max(r.start[i], t0), e = std::min(r.end[i], t1);
    if (e <= s) continue;
    if (s > cur_e) {
      if (cur_e > cur_s) total += cur_e - cur_s;
      cur_s = s;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  if (cur_e > cur_s) total += cur_e - cur_s;
  return total;
}

}  // namespace

std::string kind_name(int kind) {
  if (kind >= 0 && kind < program::kOpCount) return program::to_string(static_cast<program::Op>(kind));
  if (kind >= program::kOpCount && kind < kKindCount) return std::string(to_string(static_cast<KernelClass>(kind - program::kOpCount))) + " kernels";
  return "other";
}

TimelineModel::TimelineModel(const Trace& t, const ProgramContext* pc, int32_t step) {
  kernel_level_ = t.kernel_level();
  std::vector<Activity> acts = kernel_level_ ? activities(t, Level::kKernelClass) : activities(t, Level::kInstruction, pc);
  if (acts.empty()) return;
  if (step < 0) {
    step = std::numeric_limits<int32_t>::max();
    for (const Activity& a : acts) step = std::min(step, a.step);
  } else if (kernel_level_) {
    // the k-th ProfilerStep present, in order (their numbers need not start at 0)
    std::vector<int32_t> steps;
    for (const Activity& a : acts) steps.push_back(a.step);
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    step = steps[static_cast<std::size_t>(std::min<int64_t>(step, static_cast<int64_t>(steps.size()) - 1))];
  }
  std::erase_if(acts, [&](const Activity& a) { return a.step != step; });
  if (acts.empty()) return;
  origin_ns_ = std::numeric_limits<int64_t>::max();
  int64_t last = std::numeric_limits<int64_t>::min();
  for (const Activity& a : acts) {
    origin_ns_ = std::min(origin_ns_, a.start_ns);
    last = std::max(last, a.end_ns);
  }
  end_ns_ = last - origin_ns_;
  std::stable_sort(acts.begin(), acts.end(), [](const Activity& a, const Activity& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    if (a.row != b.row) return a.row < b.row;
    return a.start_ns < b.start_ns;
  });
  for (const Activity& a : acts) {
    const auto lane = kernel_level_ ? program::Lane::kCompute : static_cast<program::Lane>(a.row);
    if (rows_.empty() || rows_.back().rank != a.rank || (kernel_level_ ? rows_.back().stream != a.row : rows_.back().lane != lane)) {
      TimelineRow r;
      r.rank = a.rank;
      r.lane = lane;
      r.stream = kernel_level_ ? a.row : -1;
      r.label = "rank " + std::to_string(a.rank) + " " + (kernel_level_ ? "stream " + std::to_string(a.row) : std::string(program::to_string(lane)));
      rows_.push_back(std::move(r));
    }
    TimelineRow& r = rows_.back();
    r.start.push_back(a.start_ns - origin_ns_);
    r.end.push_back(a.end_ns - origin_ns_);
    r.busy_from.push_back(a.busy_from_ns - origin_ns_);
    r.max_end.push_back(std::max(r.max_end.empty() ? std::numeric_limits<int64_t>::min() : r.max_end.back(), r.end.back()));
    if (kernel_level_) {
      r.op.push_back(program::Op::kForward);
      r.kind.push_back(static_cast<uint8_t>(program::kOpCount + a.key));
      r.instr.push_back(-1);
      r.mb.push_back(-1);
      r.chunk.push_back(-1);
    } else {
      const trace::Event& e = t.data.events[a.source];
      r.op.push_back(e.op);
      r.kind.push_back(static_cast<uint8_t>(e.op));
      r.instr.push_back(e.instr);
      r.mb.push_back(e.mb);
      r.chunk.push_back(e.chunk);
    }
    r.source.push_back(a.source);
    ++events_;
  }
  for (TimelineRow& r : rows_) r.busy_ns = union_length(r, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
}

int TimelineModel::row_of(int64_t rank, program::Lane lane) const {
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].rank == rank && rows_[i].lane == lane) return static_cast<int>(i);
  }
  return -1;
}

std::pair<std::size_t, std::size_t> TimelineModel::visible(std::size_t row, int64_t t0, int64_t t1) const {
  const TimelineRow& r = rows_.at(row);
  // first: the first index whose prefix-max end reaches past t0 (or a zero-length event at t0)
  const auto first = std::lower_bound(r.max_end.begin(), r.max_end.end(), t0) - r.max_end.begin();
  const auto last = std::lower_bound(r.start.begin(), r.start.end(), t1) - r.start.begin();
  auto f = static_cast<std::size_t>(first), l = static_cast<std::size_t>(std::max(first, last));
  // Skip the leading events that end before t0 (only where intervals overlap).
  while (f < l && r.end[f] < t0) ++f;
  return {f, l};
}

std::optional<std::size_t> TimelineModel::event_at(std::size_t row, int64_t t) const {
  const TimelineRow& r = rows_.at(row);
  auto it = std::upper_bound(r.start.begin(), r.start.end(), t);
  while (it != r.start.begin()) {
    --it;
    const auto i = static_cast<std::size_t>(it - r.start.begin());
    if (r.end[i] > t) return i;
    if (r.max_end[i] <= t) break;   // nothing earlier reaches t
  }
  return std::nullopt;
}

std::vector<TimelineColumn> TimelineModel::columns(std::size_t row, int64_t t0, int64_t t1, int n) const {
  std::vector<TimelineColumn> out(static_cast<std::size_t>(std::max(1, n)));
  if (t1 <= t0) return out;
  const TimelineRow& r = rows_.at(row);
  const auto [first, last] = visible(row, t0, t1);
  std::vector<std::array<int64_t, kKindCount>> by_op(out.size(), std::array<int64_t, kKindCount>{});
  const double span = static_cast<double>(t1 - t0);
  // Column c starts at t0 + floor(c·(t1 − t0)/n), in integers (no overflow for any span).
  const auto n_cols = static_cast<int64_t>(out.size());
  const int64_t q = (t1 - t0) / n_cols, rem = (t1 - t0) % n_cols;
  const auto col_start = [&](std::size_t c) {
    const auto ci = static_cast<int64_t>(c);
    return t0 + ci * q + ci * rem / n_cols;
  };
  for (std::size_t i = first; i < last; ++i) {
    const int64_t s = std::max(r.start[i], t0), e = std::min(r.end[i], t1);
    if (e <= s) continue;
    auto c = static_cast<std::size_t>(static_cast<double>(s - t0) / span * static_cast<double>(out.size()));
    c = std::min(c, out.size() - 1);
    while (c > 0 && col_start(c) > s) --c;   // floating-point edges: the column that holds s
    for (; c < out.size(); ++c) {
      const int64_t cs = col_start(c), ce = c + 1 == out.size() ? t1 : col_start(c + 1);
      if (cs >= e) break;
      const int64_t overlap = std::min(e, ce) - std::max(s, cs);
      if (overlap <= 0) continue;
      out[c].busy_ns += overlap;
      by_op[c][r.kind[i]] += overlap;
    }
  }
  for (std::size_t c = 0; c < out.size(); ++c) {
    if (out[c].busy_ns == 0) continue;
    const auto it = std::max_element(by_op[c].begin(), by_op[c].end());
    out[c].dominant = static_cast<int>(it - by_op[c].begin());
  }
  return out;
}

Breakdown TimelineModel::breakdown_in(int64_t rank, int64_t t0, int64_t t1) const {
  std::vector<std::pair<int64_t, int64_t>> compute, comm;
  for (const TimelineRow& r : rows_) {
    if (r.rank != rank) continue;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const Category c = kernel_level_ ? (r.kind[i] == program::kOpCount + static_cast<int>(KernelClass::kCommunication)
                                              ? Category::kCommunication
                                              : Category::kCompute)
                                       : category_of(r.lane, r.op[i]);
      if (c == Category::kCompute) compute.emplace_back(r.start[i], r.end[i]);
      if (c == Category::kCommunication) comm.emplace_back(r.busy_from[i], r.end[i]);
    }
  }
  return partition(compute, comm, t0, t1);
}

std::vector<int64_t> TimelineModel::kind_time_in(std::size_t row, int64_t t0, int64_t t1) const {
  std::vector<int64_t> out(kKindCount, 0);
  const TimelineRow& r = rows_.at(row);
  const auto [first, last] = visible(row, t0, t1);
  for (std::size_t i = first; i < last; ++i) out[r.kind[i]] += std::max<int64_t>(0, std::min(r.end[i], t1) - std::max(r.start[i], t0));
  return out;
}

int64_t TimelineModel::busy_in(std::size_t row, int64_t t0, int64_t t1) const { return union_length(rows_.at(row), t0, t1); }

}  // namespace stagecraft::traces
