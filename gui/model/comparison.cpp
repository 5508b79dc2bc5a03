#include "gui/model/comparison.hpp"

#include <algorithm>

#include "core/program/lower.hpp"
#include "traces/calibrate/samples.hpp"

namespace stagecraft::gui {

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
      const std::string& kind = g.kinds[k];
      const bool compute = kind == "forward" || kind == "backward" || kind == "backward_input" || kind == "backward_weight" ||
                           kind == "recompute" || kind == "optimizer" || kind == "compute";
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
  auto v = std::make_shared<PlanView>();
  v->key = simulated->key;
  v->plan = simulated->plan;
  v->cluster = simulated->cluster;
  v->context = simulated->context;   // compare checked that the plans are equal: the same Program
  v->trace = measured;
  v->timeline = traces::TimelineModel(v->trace, &v->context, d.step);
  match_messages(*v);
  d.measured = v;
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

PlanViewPtr resimulate(const PlanView& v, const spec::Cluster& cluster) {
  auto out = std::make_shared<PlanView>();
  out->key = v.key;
  out->plan = v.plan;
  out->cluster = cluster;
  out->context = v.context;
  sim::SimOptions o;
  o.record_trace = true;
  out->sim = sim::simulate(out->context.program, cluster, o);
  out->trace = traces::from_core(out->sim.trace, "simulated");
  out->timeline = traces::TimelineModel(out->trace, &out->context);
  match_messages(*out);
  return out;
}

traces::Calibration calibrate_from(const traces::Trace& measured, const spec::Cluster& base, const spec::Training& training) {
  traces::Samples samples;
  traces::add_trace_samples(measured, base, training, samples);
  return traces::calibrate(samples, base);
}

}  // namespace stagecraft::gui
