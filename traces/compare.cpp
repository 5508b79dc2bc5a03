#include "traces/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>

#include "core/spec/error.hpp"
#include "core/spec/plan.hpp"
#include "sim/symmetry.hpp"

namespace stagecraft::traces {

using nlohmann::json;

std::string seconds_text(double s) {
  char buf[32];
  if (s == 0) return "0";
  if (std::fabs(s) >= 1) {
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  } else if (std::fabs(s) >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f us", s * 1e6);
  }
  return buf;
}

json to_json(const Breakdown& b) {
  return {{"step_s", b.step_s}, {"compute_s", b.compute_s}, {"exposed_comm_s", b.exposed_comm_s}, {"bubble_s", b.bubble_s}};
}

Breakdown mean_of(const std::map<int64_t, Breakdown>& by_rank) {
  Breakdown m;
  if (by_rank.empty()) return m;
  for (const auto& [r, b] : by_rank) {
    m.step_s += b.step_s;
    m.compute_s += b.compute_s;
    m.exposed_comm_s += b.exposed_comm_s;
    m.bubble_s += b.bubble_s;
  }
  const double n = static_cast<double>(by_rank.size());
  return {m.step_s / n, m.compute_s / n, m.exposed_comm_s / n, m.bubble_s / n};
}

namespace {

struct Item {
  const char* kind = "";
  std::map<int32_t, double> per_step;  // seconds
  std::size_t source = 0;              // an event of it, for error messages
  double value() const {
    std::vector<double> v;
    for (const auto& [step, s] : per_step) v.push_back(s);
    return median(v);
  }
};

using Items = std::map<std::pair<int64_t, int32_t>, Item>;  // (rank, instr or class)

Items items_of(const std::vector<Activity>& acts) {
  Items out;
  for (const Activity& a : acts) {
    if (std::string_view(a.kind) == "release") continue;
    Item& it = out[{a.rank, a.key}];
    if (it.per_step.empty()) it.source = a.source;
    it.kind = a.kind;
    it.per_step[a.step] += static_cast<double>(a.end_ns - a.start_ns) * 1e-9;
  }
  return out;
}

// The first place two JSON values differ, as a pointer below `at`, or "" when equal.
std::string first_difference(const json& a, const json& b, const std::string& at) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const std::string& k : keys) {
      if (k == "source") continue;
      if (!a.contains(k) || !b.contains(k)) return at + "/" + k;
      const std::string d = first_difference(a[k], b[k], at + "/" + k);
      if (!d.empty()) return d;
    }
    return "";
  }
  return a == b ? "" : at;
}

void check_same(const Trace& sim, const Trace& meas, const char* key, const json& a, const json& b) {
  if (a.empty() || b.empty()) return;
  const std::string d = first_difference(a, b, std::string("/stagecraft/") + key);
  if (d.empty()) return;
  const std::string rel = d.substr(std::string("/stagecraft/").size() + std::string(key).size());
  const json::json_pointer p(rel.empty() ? "" : rel);
  const json sv = a.contains(p) ? a.at(p) : json("(absent)");
  const json mv = b.contains(p) ? b.at(p) : json("(absent)");
  throw spec::SpecError(meas.files.at(0), d,
                        std::string("expected the simulated trace's ") + key + " (" + sim.files.at(0) + ": " + sv.dump() +
                            "), got " + mv.dump() + ": the traces come from different " + key +
                            "s (compare --plans sets two different plans side by side)");
}

std::optional<ProgramContext> context_of(const Trace& t) {
  if (t.kernel_level() || t.data.model.empty() || t.data.plan.empty()) return std::nullopt;
  return program_of(t);
}

class RankMap {
 public:
  RankMap(const Trace& sim, const Trace& meas, const std::optional<ProgramContext>& pc)
      : sim_(sim), meas_(meas), pc_(pc) {
    for (int64_t r : sim.ranks()) sim_ranks_.insert(r);
  }
  int64_t operator()(int64_t r) const {
    if (sim_ranks_.count(r)) return r;
    if (pc_ && r < pc_->world()) {
      const int64_t rep = sim::replica_rank(pc_->program.placement, r);
      if (sim_ranks_.count(rep)) return rep;
    }
    std::string have;
    for (int64_t s : sim_ranks_) have += (have.empty() ? "" : ", ") + std::to_string(s);
    throw spec::SpecError(meas_.files.at(0), "",
                          "rank " + std::to_string(r) + " has no counterpart in the simulated trace " + sim_.files.at(0) +
                              " (ranks " + have + "): the traces come from different plans");
  }

 private:
  const Trace& sim_;
  const Trace& meas_;
  const std::optional<ProgramContext>& pc_;
  std::set<int64_t> sim_ranks_;
};


struct Pair {
  int64_t rank;
  int32_t key;
  const char* kind;
  double sim, meas;
};

// Matched (measured item, simulated item) pairs. Instruction level: every measured item must
// have its simulated counterpart. Kernel level: the classes of both sides, 0 where a side has none.
std::vector<Pair> match(const Trace& meas, const Items& sim_items, const Items& meas_items, const RankMap& map,
                        Level level, Comparison& c) {
  std::vector<Pair> out;
  std::set<std::pair<int64_t, int32_t>> used;
  std::set<int64_t> meas_ranks;
  for (const auto& [key, item] : meas_items) {
    const auto [rank, k] = key;
    meas_ranks.insert(rank);
    const int64_t s = map(rank);
    const auto it = sim_items.find({s, k});
    if (it == sim_items.end() && level == Level::kInstruction) {
      throw spec::SpecError(meas.files.at(0), meas.event_pointer(item.source) + "/args/instr",
                            "instruction " + std::to_string(k) + " on rank " + std::to_string(rank) +
                                " has no simulated counterpart (rank " + std::to_string(s) +
                                " of the simulated trace): the traces come from different Programs");
    }
    if (it != sim_items.end()) used.insert(it->first);
    out.push_back({rank, k, item.kind, it == sim_items.end() ? 0.0 : it->second.value(), item.value()});
  }
  std::set<int64_t> mapped;  // the simulated ranks the measured ones stand for
  for (int64_t r : meas_ranks) mapped.insert(map(r));
  std::vector<std::string> missing;  // instructions of those ranks the measured trace lacks
  for (const auto& [key, item] : sim_items) {
    if (used.count(key)) continue;
    if (level == Level::kKernelClass) {
      for (int64_t r : meas_ranks) {
        if (map(r) == key.first) out.push_back({r, key.second, item.kind, item.value(), 0.0});
      }
    } else {
      ++c.unmatched_simulated;
      if (mapped.count(key.first)) {
        std::string what = "#";
        what += std::to_string(key.second);
        what += ' ';
        what += item.kind;
        what += " of rank ";
        what += std::to_string(key.first);
        missing.push_back(std::move(what));
      }
    }
  }
  if (!missing.empty()) {
    // A step time over part of the work would pass for an error of the simulator (a trace cut
    // short, or filtered, read +109% before this check).
    std::string first;
    for (std::size_t i = 0; i < missing.size() && i < 5; ++i) {
      if (i > 0) first += ", ";
      first += missing[i];
    }
    std::size_t of = 0;
    for (const auto& [key, item] : sim_items) of += mapped.count(key.first);
    throw spec::SpecError(meas.files.at(0), "/traceEvents",
                          "expected every instruction its ranks run in the simulated trace, but " +
                              std::to_string(missing.size()) + " of " + std::to_string(of) + " are missing (" + first +
                              (missing.size() > 5 ? ", ..." : "") +
                              "): a trace cut short or filtered measures part of the step; trace whole steps");
  }
  return out;
}

void accumulate(const std::vector<Pair>& pairs, Comparison& c) {
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> all;
  std::map<int64_t, std::map<std::string, std::pair<std::vector<double>, std::vector<double>>>> per_rank;
  for (const Pair& p : pairs) {
    all[p.kind].first.push_back(p.sim);
    all[p.kind].second.push_back(p.meas);
    per_rank[p.rank][p.kind].first.push_back(p.sim);
    per_rank[p.rank][p.kind].second.push_back(p.meas);
  }
  auto stats = [](const std::vector<double>& s, const std::vector<double>& m, double ranks) {
    KindStats k;
    for (double v : s) k.simulated_s += v;
    for (double v : m) k.measured_s += v;
    k.simulated_s /= ranks;
    k.measured_s /= ranks;
    k.simulated_median_s = median(s);
    k.measured_median_s = median(m);
    k.count = static_cast<int64_t>(m.size());
    return k;
  };
  const double ranks = static_cast<double>(std::max<std::size_t>(1, per_rank.size()));
  for (const auto& [kind, v] : all) c.kinds[kind] = stats(v.first, v.second, ranks);
  for (RankComparison& rc : c.ranks) {
    for (const auto& [kind, v] : per_rank[rc.rank]) rc.kinds[kind] = stats(v.first, v.second, 1.0);
  }
  std::vector<Pair> sorted = pairs;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Pair& a, const Pair& b) {
    return std::fabs(a.sim - a.meas) > std::fabs(b.sim - b.meas);
  });
  c.matched = static_cast<int64_t>(pairs.size());
  for (std::size_t i = 0; i < sorted.size() && i < 5; ++i) {
    const Pair& p = sorted[i];
    c.worst.push_back({c.level == Level::kInstruction ? p.key : -1, p.rank, p.kind, p.sim, p.meas});
  }
}

double ratio_error(double simulated, double measured) {
  return measured > 0 ? simulated / measured - 1.0 : std::numeric_limits<double>::quiet_NaN();
}


json kind_json(const KindStats& k) {
  return {{"simulated_s", k.simulated_s},
          {"measured_s", k.measured_s},
          {"error", number_or_null(k.error())},
          {"simulated_median_s", k.simulated_median_s},
          {"measured_median_s", k.measured_median_s},
          {"count", k.count}};
}

std::string percent(double error) {
  if (!std::isfinite(error)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100 * error);
  return buf;
}


void kinds_table(std::string& out, const std::map<std::string, KindStats>& kinds, const char* indent) {
  char line[256];
  std::snprintf(line, sizeof line, "%s%-16s %7s %13s %13s %8s %13s %13s\n", indent, "kind", "items", "sim total",
                "meas total", "error", "sim median", "meas median");
  out += line;
  for (const std::string& k : kind_order(kinds)) {
    const KindStats& s = kinds.at(k);
    std::snprintf(line, sizeof line, "%s%-16s %7lld %13s %13s %8s %13s %13s\n", indent, k.c_str(),
                  static_cast<long long>(s.count), seconds_text(s.simulated_s).c_str(), seconds_text(s.measured_s).c_str(),
                  percent(s.error()).c_str(), seconds_text(s.simulated_median_s).c_str(),
                  seconds_text(s.measured_median_s).c_str());
    out += line;
  }
}

void breakdown_table(std::string& out, const Breakdown& s, const Breakdown& m, const char* indent) {
  char line[256];
  const std::pair<const char*, double Breakdown::*> rows[] = {{"compute", &Breakdown::compute_s},
                                                              {"exposed communication", &Breakdown::exposed_comm_s},
                                                              {"bubble", &Breakdown::bubble_s}};
  for (const auto& [name, field] : rows) {
    std::snprintf(line, sizeof line, "%s%-22s %13s %13s %8s\n", indent, name, seconds_text(s.*field).c_str(),
                  seconds_text(m.*field).c_str(), percent(ratio_error(s.*field, m.*field)).c_str());
    out += line;
  }
}

}  // namespace

double KindStats::error() const { return ratio_error(simulated_s, measured_s); }
double Comparison::step_error() const { return ratio_error(step_simulated_s, step_measured_s); }

std::vector<std::string> kind_order(const std::map<std::string, KindStats>& kinds) {
  static const char* order[] = {"forward", "backward", "backward_input", "backward_weight", "recompute", "send", "recv",
                                "gather", "reduce_scatter", "all_reduce", "optimizer", "offload", "compute",
                                "communication", "memory"};
  std::vector<std::string> out;
  for (const char* k : order) {
    if (kinds.count(k)) out.push_back(k);
  }
  for (const auto& [k, v] : kinds) {
    if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  }
  return out;
}

Comparison compare(const Trace& sim, const Trace& meas) {
  Comparison c;
  c.level = sim.kernel_level() || meas.kernel_level() ? Level::kKernelClass : Level::kInstruction;
  c.simulated_file = sim.files.at(0);
  c.measured_file = meas.files.at(0);
  for (std::size_t i = 1; i < meas.files.size(); ++i) c.measured_file += ", " + meas.files[i];
  c.simulated_source = sim.kernel_level() ? to_string(sim.format) : sim.data.source;
  c.measured_source = meas.kernel_level() ? to_string(meas.format) : meas.data.source;
  if (!sim.kernel_level() && !meas.kernel_level()) {
    check_same(sim, meas, "plan", sim.data.plan, meas.data.plan);
    check_same(sim, meas, "model", sim.data.model, meas.data.model);
  }
  const std::optional<ProgramContext> sim_pc = context_of(sim);
  const std::optional<ProgramContext> meas_pc = context_of(meas);
  if (sim_pc && meas_pc && sim.data.program.fingerprint != meas.data.program.fingerprint) {
    throw spec::SpecError(c.measured_file, "/stagecraft/program/fingerprint",
                          "expected the Program of the simulated trace " + c.simulated_file + " (" +
                              sim.data.program.fingerprint + "), got " + meas.data.program.fingerprint +
                              ": the traces ran different Programs; simulate the plan with the training the measured "
                              "trace ran (its dtype: " + spec::to_string(meas_pc->training.dtype) + ")");
  }
  const std::vector<Activity> sim_acts = activities(sim, c.level, sim_pc ? &*sim_pc : nullptr);
  const std::vector<Activity> meas_acts = activities(meas, c.level, meas_pc ? &*meas_pc : nullptr);
  if (meas_acts.empty()) throw spec::SpecError(c.measured_file, "", "no events inside a step to compare");
  if (sim_acts.empty()) throw spec::SpecError(c.simulated_file, "", "no events inside a step to compare");
  c.simulated_steps = sim.step_count();
  c.measured_steps = meas.step_count();
  c.step_simulated_s = step_time_s(sim, sim_acts);
  c.step_measured_s = step_time_s(meas, meas_acts);
  const RankMap map(sim, meas, sim_pc ? sim_pc : meas_pc);
  const std::map<int64_t, Breakdown> sim_b = breakdown_by_rank(sim, sim_acts);
  const std::map<int64_t, Breakdown> meas_b = breakdown_by_rank(meas, meas_acts);
  c.simulated = mean_of(sim_b);
  c.measured = mean_of(meas_b);
  for (const auto& [rank, b] : meas_b) {
    RankComparison rc;
    rc.rank = rank;
    rc.simulated_rank = map(rank);
    rc.measured = b;
    const auto it = sim_b.find(rc.simulated_rank);
    if (it != sim_b.end()) rc.simulated = it->second;
    c.ranks.push_back(rc);
  }
  const std::vector<Pair> pairs = match(meas, items_of(sim_acts), items_of(meas_acts), map, c.level, c);
  accumulate(pairs, c);
  return c;
}

json to_json(const Comparison& c) {
  json kinds = json::object();
  for (const auto& [k, s] : c.kinds) kinds[k] = kind_json(s);
  json worst = json::array();
  for (const WorstItem& w : c.worst) {
    worst.push_back({{"instr", w.instr}, {"rank", w.rank}, {"kind", w.kind}, {"simulated_s", w.simulated_s},
                     {"measured_s", w.measured_s}, {"error", number_or_null(ratio_error(w.simulated_s, w.measured_s))}});
  }
  json ranks = json::array();
  for (const RankComparison& r : c.ranks) {
    json rk = json::object();
    for (const auto& [k, s] : r.kinds) rk[k] = kind_json(s);
    ranks.push_back({{"rank", r.rank},
                     {"simulated_rank", r.simulated_rank},
                     {"kinds", rk},
                     {"breakdown", {{"simulated", to_json(r.simulated)}, {"measured", to_json(r.measured)}}}});
  }
  return {{"step_time_s", {{"simulated", c.step_simulated_s}, {"measured", c.step_measured_s},
                           {"error", number_or_null(c.step_error())}}},
          {"kinds", kinds},
          {"worst", worst},
          {"level", c.level == Level::kInstruction ? "instruction" : "kernel_class"},
          {"breakdown", {{"simulated", to_json(c.simulated)}, {"measured", to_json(c.measured)}}},
          {"ranks", ranks},
          {"simulated", {{"file", c.simulated_file}, {"source", c.simulated_source}, {"steps", c.simulated_steps}}},
          {"measured", {{"file", c.measured_file}, {"source", c.measured_source}, {"steps", c.measured_steps}}},
          {"matched", c.matched},
          {"unmatched_simulated", c.unmatched_simulated}};
}

std::string to_text(const Comparison& c) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "simulated  %s (%s, %d step%s)\nmeasured   %s (%s, %d step%s)\naligned by %s\n",
                c.simulated_file.c_str(), c.simulated_source.c_str(), c.simulated_steps, c.simulated_steps == 1 ? "" : "s",
                c.measured_file.c_str(), c.measured_source.c_str(), c.measured_steps, c.measured_steps == 1 ? "" : "s",
                c.level == Level::kInstruction ? "instruction id" : "rank, step and kernel class");
  out += line;
  std::snprintf(line, sizeof line, "\nstep time  simulated %s   measured %s   error %s (simulated/measured - 1)\n",
                seconds_text(c.step_simulated_s).c_str(), seconds_text(c.step_measured_s).c_str(), percent(c.step_error()).c_str());
  out += line;
  std::snprintf(line, sizeof line, "\n%-24s %13s %13s %8s   (mean over ranks, median over steps)\n", "breakdown",
                "simulated", "measured", "error");
  out += line;
  breakdown_table(out, c.simulated, c.measured, "  ");
  out += "\nper kind (time per step: total per rank, mean over ranks)\n";
  kinds_table(out, c.kinds, "  ");
  for (const RankComparison& r : c.ranks) {
    std::snprintf(line, sizeof line, "\nrank %lld (simulated rank %lld)\n", static_cast<long long>(r.rank),
                  static_cast<long long>(r.simulated_rank));
    out += line;
    kinds_table(out, r.kinds, "  ");
    breakdown_table(out, r.simulated, r.measured, "  ");
  }
  out += "\nlargest differences\n";
  std::snprintf(line, sizeof line, "  %7s %5s %-16s %13s %13s %8s\n", "instr", "rank", "kind", "simulated", "measured",
                "error");
  out += line;
  for (const WorstItem& w : c.worst) {
    std::snprintf(line, sizeof line, "  %7s %5lld %-16s %13s %13s %8s\n", w.instr < 0 ? "-" : std::to_string(w.instr).c_str(),
                  static_cast<long long>(w.rank), w.kind.c_str(), seconds_text(w.simulated_s).c_str(),
                  seconds_text(w.measured_s).c_str(), percent(ratio_error(w.simulated_s, w.measured_s)).c_str());
    out += line;
  }
  if (c.unmatched_simulated > 0) {
    std::snprintf(line, sizeof line, "\n%lld simulated instructions have no measured counterpart\n",
                  static_cast<long long>(c.unmatched_simulated));
    out += line;
  }
  return out;
}

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace stagecraft::traces
