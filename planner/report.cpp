#include "planner/report.hpp"

#include <cstdio>

#include "core/text/format.hpp"
#include "sim/report.hpp"

namespace stagecraft::planner {

namespace {

using text::fmt;

// The key without its bucket sizes: rows that differ only there may share a line.
std::string without_buckets(const std::string& key) {
  std::string out;
  std::size_t pos = 0;
  while (pos < key.size()) {
    std::size_t next = key.find(' ', pos);
    if (next == std::string::npos) next = key.size();
    const std::string word = key.substr(pos, next - pos);
    if (word.rfind("rb=", 0) != 0 && word.rfind("pf=", 0) != 0 && word.rfind("live=", 0) != 0) {
      out += (out.empty() ? "" : " ") + word;
    }
    pos = next + 1;
  }
  return out;
}

std::string pad(std::string s, std::size_t n) {
  if (s.size() < n) s.append(n - s.size(), ' ');
  return s;
}

}  // namespace

std::vector<std::size_t> table_rows(const std::vector<Evaluated>& plans) {
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const Evaluated& e = plans[i];
    if (!rows.empty()) {
      const Evaluated& head = plans[rows.back()];
      if (head.metrics.step_time_s == e.metrics.step_time_s && without_buckets(head.key) == without_buckets(e.key)) continue;
    }
    rows.push_back(i);
  }
  return rows;
}

std::string format_table(const std::vector<Evaluated>& plans) {
  struct Row {
    const Evaluated* e;
    int variants;
  };
  std::vector<Row> rows;
  const std::vector<std::size_t> heads = table_rows(plans);
  for (std::size_t r = 0; r < heads.size(); ++r) {
    const std::size_t end = r + 1 < heads.size() ? heads[r + 1] : plans.size();
    rows.push_back({&plans[heads[r]], static_cast<int>(end - heads[r] - 1)});
  }
  std::size_t width = 4;
  for (const Row& r : rows) width = std::max(width, r.e->key.size() + (r.variants ? 22 : 0));
  std::string out = pad("  #  plan", width + 5) + sim::table_header() + "\n";
  int rank = 0;
  for (const Row& r : rows) {
    std::string plan = r.e->key + (r.variants ? " (+" + std::to_string(r.variants) + " bucket variant" + (r.variants > 1 ? "s)" : ")") : "");
    char number[16];
    std::snprintf(number, sizeof number, "%3d  ", ++rank);
    out += number + pad(plan, width) + "  " + sim::table_cells(r.e->metrics) + "\n";
  }
  return out;
}

std::string format_counts(const SearchResult& r) {
  const Counts& c = r.counts;
  std::string s = std::to_string(c.candidates) + " candidate plans: " + std::to_string(c.dominated) + " dominated, " +
                  std::to_string(c.pruned_memory) + " pruned by memory, " + std::to_string(c.pruned_bound) +
                  " by the step-time bound (" + std::to_string(c.pruned_critical_path) + " of them after lowering), " +
                  std::to_string(c.evaluated) + " simulated";
  if (c.reused) s += " (" + std::to_string(c.reused) + " reused from the results store)";
  s += ", " + std::to_string(c.fitting) + " fit; " + fmt("%.1f s", r.seconds);
  if (r.interrupted) s += " (interrupted: " + std::to_string(c.unexplored) + " plans not reached; results so far)";
  return s;
}

std::string compare_with_baseline(const SearchResult& r, const Baseline& b) {
  if (!b.metrics.fits || b.metrics.failed) {
    return "The " + b.name + " does not fit in memory in simulation" +
           (r.top.empty() ? "." : "; the best plan does, at " + fmt("%.3f s", r.top.front().metrics.step_time_s) + " per step.");
  }
  if (r.top.empty()) return "The " + b.name + " simulates at " + fmt("%.3f s", b.metrics.step_time_s) + " per step.";
  const double best = r.top.front().metrics.step_time_s, base = b.metrics.step_time_s;
  if (best < base) {
    return "The best plan is " + fmt("%.1f%%", 100 * (base / best - 1)) + " faster than the " + b.name + ": " +
           fmt("%.3f s", base) + " -> " + fmt("%.3f s", best) + " per step, " + fmt("%.2fx", base / best) + " the tokens/s.";
  }
  return "The " + b.name + " is as fast as the best plan found or faster (" + fmt("%.3f s", base) + " vs " +
         fmt("%.3f s", best) + " per step).";
}

nlohmann::json to_json(const SearchResult& r, const std::optional<Baseline>& baseline) {
  auto entries = [&](const std::vector<Evaluated>& list) {
    nlohmann::json a = nlohmann::json::array();
    for (const Evaluated& e : list) {
      a.push_back({{"plan", spec::to_json(e.plan)}, {"key", e.key}, {"metrics", sim::to_json(e.metrics, e.plan)}});
    }
    return a;
  };
  nlohmann::json j = {{"plans", entries(r.top)},
                      {"evaluated", r.counts.evaluated},
                      {"pruned", r.counts.pruned()},
                      {"seconds", r.seconds},
                      {"counts", to_json(r.counts)},
                      {"pareto", entries(r.pareto)},
                      {"interrupted", r.interrupted},
                      {"warnings", r.warnings}};
  if (!r.top.empty()) j["explanation"] = explain(r).to_json();
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (baseline) {
    j["baseline"] = {{"name", baseline->name},
                     {"plan", spec::to_json(baseline->plan)},
                     {"metrics", sim::to_json(baseline->metrics, baseline->plan)},
                     {"comparison", compare_with_baseline(r, *baseline)}};
    if (!r.top.empty() && baseline->metrics.fits && !baseline->metrics.failed) {
      j["baseline"]["speedup"] = baseline->metrics.step_time_s / r.top.front().metrics.step_time_s;
    }
  }
  return j;
}

}  // namespace stagecraft::planner
