#include "gui/model/comparison.hpp"

#include <algorithm>

#include "core/program/instruction.hpp"
#include "traces/calibrate/samples.hpp"

namespace stagecraft::gui {

namespace {

// A kind that runs on the compute lane: the trace kind of a compute op or of the optimizer step,
// or the compute kernel class of a PyTorch trace.
bool is_compute_kind(const std::string& kind) {
  if (kind == traces::to_string(traces::KernelClass::kCompute)) return true;
  for (int i = 0; i < program::kOpCount; ++i) {
    const auto op = static_cast<program::Op>(i);
    if ((program::is_compute(op) || op == program::Op::kOptimizerStep) && kind == program::trace_kind(op)) return true;
  }
  return false;
}

}  // namespace

ErrorGrid error_grid(const traces::Comparison& c) {
  ErrorGrid g;
  g.kinds = traces::kind_order(c.kinds);
  double worst = -1;
  for (const traces::RankComparison& r : c.ranks) {
    g.ranks.push_back(r.rank);
    std::vector<double> row;
    for (std::size_t k = 0; k < g.kinds.size(); ++k) {
      const auto it = r.kinds.find(g.kinds[k]);
      const double e = it == r.kinds.end() ? NAN : it->second.error();
      row.push_back(e);
      const bool compute = is_compute_kind(g.kinds[k]);
      if (compute && std::isfinite(e) && std::fabs(e) > worst) {
        worst = std::fabs(e);
        g.worst_rank = static_cast<int>(g.ranks.size()) - 1;
        g.worst_kind = static_cast<int>(k);
      }
    }
    g.error.push_back(std::move(row));
  }
  return g;
}

CompareData compare_data(const PlanViewPtr& simulated, const traces::Trace& measured, int32_t step) {
  CompareData d;
  d.simulated = simulated;
  d.comparison = traces::compare(simulated->trace, measured);
  d.grid = error_grid(d.comparison);
  d.steps = std::max<int32_t>(1, measured.step_count());
  d.step = std::clamp<int32_t>(step, 0, d.steps - 1);
  if (measured.kernel_level()) {
    d.note = "a PyTorch profiler trace: compared by rank, step and kernel class; its kernels drawn per stream";
  }
  // compare checked that the plans are equal: the same Program
  d.measured = traced_view(*simulated, measured, d.step);
  return d;
}

QColor error_colour(double e) {
  if (!std::isfinite(e)) return QColor(225, 225, 225);
  const double t = std::clamp(std::fabs(e) / 0.5, 0.0, 1.0);
  const QColor end = e < 0 ? QColor(68, 119, 170) : QColor(204, 68, 68);
  return QColor(static_cast<int>(std::lround(255 + (end.red() - 255) * t)), static_cast<int>(std::lround(255 + (end.green() - 255) * t)),
                static_cast<int>(std::lround(255 + (end.blue() - 255) * t)));
}

Overlay overlay_of(const CompareData& d) {
  Overlay o;
  if (!d.measured || d.measured->timeline.kernel_level()) return o;   // no instruction ids to match
  std::map<int64_t, int64_t> counterpart;   // measured rank -> simulated rank
  for (const traces::RankComparison& r : d.comparison.ranks) counterpart[r.rank] = r.simulated_rank;
  std::map<std::pair<int64_t, int32_t>, std::pair<int64_t, int64_t>> sim;   // (rank, instr) -> interval
  for (const traces::TimelineRow& r : d.simulated->timeline.rows()) {
    for (std::size_t i = 0; i < r.size(); ++i) sim[{r.rank, r.instr[i]}] = {r.start[i], r.end[i]};
  }
  for (const traces::TimelineRow& r : d.measured->timeline.rows()) {
    std::vector<std::optional<std::pair<int64_t, int64_t>>> ghosts(r.size());
    std::vector<double> errors(r.size(), NAN);
    const auto c = counterpart.find(r.rank);
    for (std::size_t i = 0; c != counterpart.end() && i < r.size(); ++i) {
      const auto s = sim.find({c->second, r.instr[i]});
      if (s == sim.end()) continue;
      ghosts[i] = s->second;
      const double measured = static_cast<double>(r.end[i] - r.start[i]);
      if (measured > 0) errors[i] = static_cast<double>(s->second.second - s->second.first) / measured - 1;
    }
    o.ghost.push_back(std::move(ghosts));
    o.error.push_back(std::move(errors));
  }
  return o;
}

PlanViewPtr resimulate(const PlanView& v, const spec::Cluster& cluster) { return simulated_view(v.key, v.plan, cluster, v.context); }

traces::Calibration calibrate_from(const traces::Trace& measured, const spec::Cluster& base, const spec::Training& training) {
  traces::Samples samples;
  traces::add_trace_samples(measured, base, training, samples);
  return traces::calibrate(samples, base);
}

}  // namespace stagecraft::gui
