#include "traces/compare_plans.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <tuple>

#include "core/spec/error.hpp"
#include "core/spec/plan.hpp"
#include "traces/compare.hpp"
#include "traces/program_context.hpp"

namespace stagecraft::traces {

using nlohmann::json;

namespace {

double ratio(double a, double b) { return a > 0 ? b / a : std::numeric_limits<double>::quiet_NaN(); }

std::string ratio_text(double a, double b) {
  const double r = ratio(a, b);
  if (!std::isfinite(r)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3fx", r);
  return buf;
}

std::string gib(int64_t bytes) {
  if (bytes < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
  return buf;
}

PlanSide side_of(const Trace& t, Level level) {
  PlanSide s;
  s.file = t.files.at(0);
  for (std::size_t i = 1; i < t.files.size(); ++i) s.file += ", " + t.files[i];
  s.source = t.kernel_level() ? to_string(t.format) : t.data.source;
  std::optional<ProgramContext> pc;
  if (!t.kernel_level() && !t.data.model.empty() && !t.data.plan.empty()) pc = program_of(t);
  if (pc) s.plan = spec::summary(pc->program.plan);
  const std::vector<Activity> acts = activities(t, level, pc ? &*pc : nullptr);
  if (acts.empty()) throw spec::SpecError(s.file, "", "no events inside a step to compare");
  const std::vector<int64_t> ranks = t.ranks();
  s.world = pc ? pc->world() : static_cast<int64_t>(ranks.size());
  s.steps = t.step_count();
  s.step_s = step_time_s(t, acts);
  const std::map<int64_t, Breakdown> by_rank = breakdown_by_rank(t, acts);
  // per kind: Σ over a rank's items per step, median over steps, mean over ranks
  std::map<std::string, std::map<int64_t, std::map<int32_t, double>>> per;   // kind -> rank -> step -> s
  for (const Activity& a : acts) {
    if (std::string_view(a.kind) == "release") continue;
    per[a.kind][a.rank][a.step] += static_cast<double>(a.end_ns - a.start_ns) * 1e-9;
  }
  const double n_ranks = static_cast<double>(by_rank.size());
  for (const auto& [kind, ranks_of_kind] : per) {
    double total = 0;
    for (const auto& [rank, steps] : ranks_of_kind) {
      std::vector<double> v;
      for (const auto& [step, sec] : steps) v.push_back(sec);
      // a step without this kind on the rank counts as 0 when the rank has other steps
      for (int32_t k = static_cast<int32_t>(v.size()); k < s.steps; ++k) v.push_back(0);
      total += median(v);
    }
    s.kinds[kind] = n_ranks > 0 ? total / n_ranks : 0;
  }
  // stages
  std::map<int64_t, StageSpend> stages;
  for (const auto& [rank, b] : by_rank) {
    const int64_t stage = pc ? pc->program.placement.stage_of(rank) : rank;
    StageSpend& st = stages[stage];
    st.stage = stage;
    ++st.ranks;
    st.breakdown.step_s += b.step_s;
    st.breakdown.compute_s += b.compute_s;
    st.breakdown.exposed_comm_s += b.exposed_comm_s;
    st.breakdown.bubble_s += b.bubble_s;
  }
  for (const trace::MemorySample& m : t.data.memory) {
    const int64_t stage = pc ? pc->program.placement.stage_of(m.rank) : m.rank;
    auto it = stages.find(stage);
    if (it != stages.end()) it->second.peak_memory_bytes = std::max(it->second.peak_memory_bytes, m.total());
  }
  for (auto& [stage, st] : stages) {
    const double n = static_cast<double>(st.ranks);
    st.breakdown = {st.breakdown.step_s / n, st.breakdown.compute_s / n, st.breakdown.exposed_comm_s / n,
                    st.breakdown.bubble_s / n};
    s.stages.push_back(st);
  }
  s.breakdown = mean_of(by_rank);
  return s;
}

json side_json(const PlanSide& s) {
  json stages = json::array();
  for (const StageSpend& st : s.stages) {
    stages.push_back({{"stage", st.stage},
                      {"ranks", st.ranks},
                      {"breakdown", to_json(st.breakdown)},
                      {"peak_memory_bytes", st.peak_memory_bytes >= 0 ? json(st.peak_memory_bytes) : json(nullptr)}});
  }
  return {{"file", s.file},   {"source", s.source},  {"plan", s.plan.empty() ? json(nullptr) : json(s.plan)},
          {"world", s.world}, {"steps", s.steps},    {"step_time_s", s.step_s},
          {"breakdown", to_json(s.breakdown)}, {"kinds_s", s.kinds}, {"stages", stages}};
}

// Every kind either side has, with both sides' seconds (0 where a side has none), by name.
std::vector<std::tuple<std::string, double, double>> kind_pairs(const PlanComparison& c) {
  std::map<std::string, std::pair<double, double>> both;
  for (const auto& [k, v] : c.a.kinds) both[k].first = v;
  for (const auto& [k, v] : c.b.kinds) both[k].second = v;
  std::vector<std::tuple<std::string, double, double>> out;
  for (const auto& [k, ab] : both) out.emplace_back(k, ab.first, ab.second);
  return out;
}

}  // namespace

PlanComparison compare_plans(const Trace& a, const Trace& b) {
  PlanComparison c;
  c.level = a.kernel_level() || b.kernel_level() ? Level::kKernelClass : Level::kInstruction;
  c.a = side_of(a, c.level);
  c.b = side_of(b, c.level);
  return c;
}

json to_json(const PlanComparison& c) {
  json kinds = json::object();
  for (const auto& [k, a, b] : kind_pairs(c)) {
    kinds[k] = {{"a_s", a}, {"b_s", b}, {"ratio", number_or_null(ratio(a, b))}};
  }
  return {{"level", c.level == Level::kInstruction ? "instruction kind" : "kernel class"},
          {"a", side_json(c.a)},
          {"b", side_json(c.b)},
          {"step_time_ratio", number_or_null(ratio(c.a.step_s, c.b.step_s))},
          {"kinds", kinds}};
}

std::string to_text(const PlanComparison& c) {
  std::string out;
  char line[512];
  for (const auto* s : {&c.a, &c.b}) {
    std::snprintf(line, sizeof line, "%s  %s (%s, %d step%s)%s%s, %lld GPUs\n", s == &c.a ? "A" : "B", s->file.c_str(),
                  s->source.c_str(), s->steps, s->steps == 1 ? "" : "s", s->plan.empty() ? "" : ": ", s->plan.c_str(),
                  static_cast<long long>(s->world));
    out += line;
  }
  std::snprintf(line, sizeof line, "\n%-24s %13s %13s %9s\n", "", "A", "B", "B / A");
  out += line;
  std::snprintf(line, sizeof line, "%-24s %13s %13s %9s\n", "step time", seconds_text(c.a.step_s).c_str(),
                seconds_text(c.b.step_s).c_str(), ratio_text(c.a.step_s, c.b.step_s).c_str());
  out += line;
  const std::pair<const char*, double Breakdown::*> rows[] = {{"  compute", &Breakdown::compute_s},
                                                              {"  exposed communication", &Breakdown::exposed_comm_s},
                                                              {"  bubble", &Breakdown::bubble_s}};
  for (const auto& [name, field] : rows) {
    std::snprintf(line, sizeof line, "%-24s %13s %13s %9s\n", name, seconds_text(c.a.breakdown.*field).c_str(),
                  seconds_text(c.b.breakdown.*field).c_str(), ratio_text(c.a.breakdown.*field, c.b.breakdown.*field).c_str());
    out += line;
  }
  out += std::string("\nper ") + (c.level == Level::kInstruction ? "kind" : "kernel class") +
         " (time per step and GPU: total per rank, mean over ranks)\n";
  for (const auto& [k, a, b] : kind_pairs(c)) {
    std::snprintf(line, sizeof line, "  %-22s %13s %13s %9s\n", k.c_str(), seconds_text(a).c_str(), seconds_text(b).c_str(),
                  ratio_text(a, b).c_str());
    out += line;
  }
  for (const auto* s : {&c.a, &c.b}) {
    std::snprintf(line, sizeof line, "\n%s by %s (mean over its ranks)\n  %5s %5s %13s %13s %13s %13s\n",
                  s == &c.a ? "A" : "B", s->plan.empty() ? "rank" : "pipeline stage", s->plan.empty() ? "rank" : "stage",
                  "ranks", "compute", "exposed comm", "bubble", "peak memory");
    out += line;
    for (const StageSpend& st : s->stages) {
      std::snprintf(line, sizeof line, "  %5lld %5lld %13s %13s %13s %13s\n", static_cast<long long>(st.stage),
                    static_cast<long long>(st.ranks), seconds_text(st.breakdown.compute_s).c_str(),
                    seconds_text(st.breakdown.exposed_comm_s).c_str(), seconds_text(st.breakdown.bubble_s).c_str(),
                    gib(st.peak_memory_bytes).c_str());
      out += line;
    }
  }
  return out;
}

}  // namespace stagecraft::traces
