#include "sim/straggler.hpp"

#include "core/text/format.hpp"

namespace stagecraft::sim {

std::optional<StragglerReport> straggler_report(const program::Program& prog, const spec::Cluster& cluster,
                                                const SimResult& straggled) {
  if (!cluster.straggler) return std::nullopt;
  StragglerReport out;
  out.straggler = *cluster.straggler;
  spec::Cluster symmetric = cluster;
  symmetric.straggler.reset();
  const SimResult base = simulate(prog, symmetric);
  out.symmetric_step_s = base.metrics.step_time_s;
  out.step_s = straggled.metrics.step_time_s;
  out.slowdown_of_step = out.symmetric_step_s > 0 ? out.step_s / out.symmetric_step_s : 1;
  double best = -1;
  for (int l = 0; l < program::kLaneCount; ++l) {
    out.wait_growth_s[static_cast<std::size_t>(l)] =
        straggled.others_wait_s[static_cast<std::size_t>(l)] - base.others_wait_s[static_cast<std::size_t>(l)];
    if (out.wait_growth_s[static_cast<std::size_t>(l)] > best) {
      best = out.wait_growth_s[static_cast<std::size_t>(l)];
      out.waiting_lane = static_cast<program::Lane>(l);
    }
  }
  return out;
}

std::string straggler_text(const StragglerReport& r) {
  std::string s = spec::describe(r.straggler) + ": step " + text::fmt("%.4g s", r.symmetric_step_s) + " → " +
                  text::fmt("%.4g s", r.step_s) + text::fmt(" (%.3g×)", r.slowdown_of_step);
  const double growth = r.wait_growth_s[static_cast<std::size_t>(r.waiting_lane)];
  if (growth > 0) {
    s += std::string("; the other ranks wait most on their ") + program::to_string(r.waiting_lane) + " lane, " +
         text::fmt("+%.4g s a rank", growth);
  } else {
    s += "; no other rank waits longer";
  }
  return s;
}

nlohmann::json to_json(const StragglerReport& r) {
  nlohmann::json growth = nlohmann::json::object();
  for (int l = 0; l < program::kLaneCount; ++l) {
    if (r.wait_growth_s[static_cast<std::size_t>(l)] != 0) {
      growth[program::to_string(static_cast<program::Lane>(l))] = r.wait_growth_s[static_cast<std::size_t>(l)];
    }
  }
  return {{"kind", spec::to_string(r.straggler.kind)},
          {"first", r.straggler.first},
          {"count", r.straggler.count},
          {"slowdown", r.straggler.slowdown},
          {"symmetric_step_time_s", r.symmetric_step_s},
          {"step_time_s", r.step_s},
          {"slowdown_of_step", r.slowdown_of_step},
          {"waiting_lane", program::to_string(r.waiting_lane)},
          {"wait_growth_s", growth}};
}

}  // namespace stagecraft::sim
