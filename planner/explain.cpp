#include "planner/explain.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "core/text/format.hpp"
#include "core/program/lower.hpp"
#include "sim/costs.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::planner {

namespace {

using text::fmt;

std::string gib(double bytes) { return text::gib(bytes) + " GiB"; }
std::string signed_pct(double x) { return fmt(x >= 0 ? "+%.1f%%" : "%.1f%%", 100 * x); }

struct Terms {
  double compute, exposed, bubble;
};
Terms terms(const Metrics& m) { return {m.time.compute_s, m.time.exposed_comm_s, m.time.bubble_s}; }

// The breakdown term that grew most from `best` to `other`, in words.
std::string grew(const Metrics& best, const Metrics& other) {
  const Terms a = terms(best), b = terms(other);
  const std::pair<double, std::string> deltas[] = {
      {b.compute - a.compute, "compute"}, {b.exposed - a.exposed, "exposed communication"}, {b.bubble - a.bubble, "pipeline bubble"}};
  const auto* top = std::max_element(std::begin(deltas), std::end(deltas),
                                     [](const auto& x, const auto& y) { return x.first < y.first; });
  if (top->first <= 0) return "no single term grew";
  std::string lane;
  if (top->second == "exposed communication") {
    const std::pair<double, const char*> lanes[] = {{other.time.tp_s - best.time.tp_s, "tp"},
                                                       {other.time.pp_s - best.time.pp_s, "pp"},
                                                       {other.time.dp_s - best.time.dp_s, "dp"},
                                                       {other.time.cp_s - best.time.cp_s, "cp"},
                                                       {other.time.ep_s - best.time.ep_s, "ep"}};
    const auto* l = std::max_element(std::begin(lanes), std::end(lanes), [](const auto& x, const auto& y) { return x.first < y.first; });
    if (l->first > 0) lane = std::string(", mostly ") + l->second;
  }
  return "more " + top->second + " (" + fmt("+%.3f s", top->first) + lane + ")";
}

// The value of `axis` in a candidate.
std::string value_of(const Candidate& c, const std::string& axis) {
  for (const auto& [a, v] : axis_values(c)) {
    if (a == axis) return v;
  }
  throw std::logic_error("unknown axis " + axis);
}

AxisAlternative alternative(const SearchResult& r, const Evaluated& best, const std::string& axis, const std::string& value,
                            const AxisCell& cell) {
  AxisAlternative a;
  a.value = value;
  const Evaluated* found = nullptr;
  bool simulated = false;
  for (const Evaluated& e : r.evaluated) {
    if (value_of(e.candidate, axis) != value) continue;
    simulated = true;
    if (!e.metrics.fits || e.metrics.failed) continue;
    if (found == nullptr || better(e, *found)) found = &e;
  }
  const double t0 = best.metrics.step_time_s;
  if (found) {
    a.verdict = "simulated";
    a.step_time_s = found->metrics.step_time_s;
    a.delta = a.step_time_s / t0 - 1;
    a.plan = found->key;
    a.reason = signed_pct(a.delta) + " (" + fmt("%.3f s", a.step_time_s) + "): " + grew(best.metrics, found->metrics);
    // ZeRO across nodes: what it changes is the traffic that crosses nodes
    // expert parallelism: what it changes is where the all-to-alls go, NVLink or the network
    if (axis == "ep") {
      a.reason += "; all-to-all bytes a GPU sends a step: " + text::short_bytes(found->metrics.ep_intranode_bytes) +
                  " inside its node, " + text::short_bytes(found->metrics.ep_internode_bytes) + " to other nodes (the best plan's " +
                  text::short_bytes(best.metrics.ep_intranode_bytes) + " and " +
                  text::short_bytes(best.metrics.ep_internode_bytes) + ")";
    }
    if (axis == "zero_variant") {
      a.reason += "; data-parallel traffic a GPU sends to other nodes per micro-batch " +
                  text::short_bytes(found->metrics.dp_internode_bytes) + ", the best plan's " +
                  text::short_bytes(best.metrics.dp_internode_bytes);
    }
  } else if (cell.has_survivor && !simulated) {
    a.verdict = "bound";
    const double kth = r.top.back().metrics.step_time_s;
    if (cell.min_step_lb >= t0) {
      a.step_time_s = cell.min_step_lb;
      a.reason = "no such plan can be faster than " + fmt("%.3f s", cell.min_step_lb) + " (" +
                 signed_pct(cell.min_step_lb / t0 - 1) + ", step-time lower bound), so none was simulated";
    } else {
      a.step_time_s = kth;
      a.reason = "every such plan was ruled out by its critical path after lowering: none beats the top " +
                 std::to_string(r.top.size()) + " (" + fmt("%.3f s", kth) + ")";
    }
    a.delta = a.step_time_s / t0 - 1;
  } else if (simulated) {
    a.verdict = "not fitting";
    a.reason = "the simulated plans do not fit in memory";
  } else if (cell.min_memory_lb == INT64_MAX) {  // no candidate but dominated ones: no memory bound was taken
    a.verdict = "dominated";
    a.reason = "every such plan is dominated, so none was simulated: it lowers to the same Program as a plan counted "
               "under another value, or offloads the optimizer where the same plan without offload fits";
  } else {
    a.verdict = "memory";
    a.reason = "does not fit: needs at least " + gib(static_cast<double>(cell.min_memory_lb)) + " per GPU";
  }
  return a;
}

}  // namespace

Explanation explain(const SearchResult& r) {
  if (r.top.empty()) throw std::logic_error("explain: no plan to explain");
  const Evaluated& best = r.top.front();
  Explanation x;
  x.limit = sim::limit_text(best.metrics, &x.limit_term);
  x.memory = sim::memory_text(best.metrics);
  for (const auto& [axis, value] : axis_values(best.candidate)) {
    auto it = r.axes.find(axis);
    if (it == r.axes.end() || it->second.size() < 2) continue;   // nothing to compare with
    AxisExplanation ax;
    ax.axis = axis;
    ax.best_value = value;
    for (const auto& [v, cell] : it->second) {
      if (v == value || cell.candidates == 0) continue;
      ax.alternatives.push_back(alternative(r, best, axis, v, cell));
    }
    std::sort(ax.alternatives.begin(), ax.alternatives.end(), [](const AxisAlternative& a, const AxisAlternative& b) {
      const bool sa = a.verdict == "simulated" || a.verdict == "bound", sb = b.verdict == "simulated" || b.verdict == "bound";
      if (sa != sb) return sa;
      return a.step_time_s != b.step_time_s ? a.step_time_s < b.step_time_s : a.value < b.value;
    });
    x.axes.push_back(std::move(ax));
  }
  return x;
}

std::vector<std::string> expert_lines(const Space& space, const Evaluated& best) {
  std::vector<std::string> out;
  if (!space.model().moe.on()) return out;
  const int64_t gpn = space.cluster().gpus_per_node;
  const spec::Plan& p = best.plan;
  const int64_t local = space.model().moe.experts / p.ep;
  const auto sizes = [](int64_t ep, int64_t etp) {
    return "ep " + std::to_string(ep) + (etp > 1 ? " etp " + std::to_string(etp) : std::string());
  };
  const std::string dispatcher =
      p.moe_dispatcher == spec::MoeDispatcher::kAllGather
          ? " with the all-gather dispatcher (" + std::to_string(p.ep * p.etp) + " ranks gather every token)"
      : p.moe_dispatcher == spec::MoeDispatcher::kFlex
          ? " with the flex dispatcher (DeepEP: a token once to each GPU and once to each node holding its experts)"
          : std::string();
  out.push_back("Experts: " + sizes(p.ep, p.etp) + " (" + std::to_string(local) + (local == 1 ? " expert" : " experts") +
                (p.etp > 1 ? ", each 1/" + std::to_string(p.etp) + " of its width," : std::string()) + " a GPU)" +
                dispatcher + "; a GPU's all-to-alls send " + text::short_bytes(best.metrics.ep_intranode_bytes) +
                " a step inside its node and " + text::short_bytes(best.metrics.ep_internode_bytes) +
                " to other nodes. With the best plan's other choices:");
  for (int64_t ep : space.ep_values(p.tp, p.cp, p.dp)) {
    for (int64_t etp : space.etp_values(p.tp, p.cp, p.dp, ep)) {
      if (ep == p.ep && etp == p.etp) continue;
      spec::Plan alt = p;
      alt.ep = ep;
      alt.etp = etp;
      if (ep * etp == 1) alt.moe_dispatcher = spec::MoeDispatcher::kAllToAll;   // nothing to dispatch across GPUs
      std::string line = "  " + sizes(ep, etp) + ": ";
      try {
        const program::Program prog = program::lower(space.model(), space.training(), alt);
        const auto [inside, across] = sim::ep_bytes_per_step(prog, gpn);
        const sim::Metrics m = sim::simulate(prog, space.cluster()).metrics;
        line += ep == 1 ? std::string("no all-to-all (every GPU holds every expert") +
                              (etp > 1 ? ", split over " + std::to_string(etp) + " GPUs)" : ")")
                        : text::short_bytes(inside) + " inside the node, " + text::short_bytes(across) + " across nodes";
        line += "; " + fmt("%.3f s", m.step_time_s) + " (" + signed_pct(m.step_time_s / best.metrics.step_time_s - 1) + ")" +
                (m.fits ? "" : ", does not fit: " + gib(static_cast<double>(m.peak_memory_bytes)) + " peak") +
                ", ep lane " + fmt("%.3f s", m.time.ep_s) + " against " + fmt("%.3f s", best.metrics.time.ep_s);
      } catch (const std::exception& e) {
        line += std::string("not a valid plan: ") + e.what();
      }
      out.push_back(line);
    }
  }
  return out;
}

std::vector<std::string> Explanation::lines() const {
  std::vector<std::string> out;
  out.push_back("What limits it: " + limit + ".");
  out.push_back("Memory: " + memory + ".");
  out.push_back("Why it wins, axis by axis (the best plan with each other value):");
  constexpr std::size_t kShown = 5;   // the closest alternatives; to_json() has them all
  for (const AxisExplanation& a : axes) {
    std::string line = "  " + a.axis + " = " + a.best_value + ":";
    for (std::size_t i = 0; i < a.alternatives.size() && i < kShown; ++i) {
      line += "\n      " + a.axis + " = " + a.alternatives[i].value + ": " + a.alternatives[i].reason;
    }
    if (a.alternatives.size() > kShown) {
      line += "\n      (" + std::to_string(a.alternatives.size() - kShown) + " more values, slower or not fitting)";
    }
    out.push_back(line);
  }
  return out;
}

nlohmann::json Explanation::to_json() const {
  nlohmann::json axes_json = nlohmann::json::array();
  for (const AxisExplanation& a : axes) {
    nlohmann::json alts = nlohmann::json::array();
    for (const AxisAlternative& alt : a.alternatives) {
      nlohmann::json j = {{"value", alt.value}, {"verdict", alt.verdict}, {"reason", alt.reason}};
      if (alt.verdict == "simulated" || alt.verdict == "bound") {
        j["step_time_s"] = alt.step_time_s;
        j["delta"] = alt.delta;
      }
      if (!alt.plan.empty()) j["plan"] = alt.plan;
      alts.push_back(std::move(j));
    }
    axes_json.push_back({{"axis", a.axis}, {"best", a.best_value}, {"alternatives", alts}});
  }
  return {{"limit", limit}, {"limit_term", limit_term}, {"memory", memory}, {"axes", axes_json}};
}

}  // namespace stagecraft::planner
