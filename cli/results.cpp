// stagecraft results --db results.sqlite [--search ID] [--top K] [--where EXPR] [--json]
// Lists a results store: its searches, and the plans of one (the latest by default), best first.
// --where is an SQL expression over the plans table's columns (docs/planner.md), e.g.
// "pp >= 4 AND zero_stage = 1"; the store is opened read-only.
#include <cstdio>
#include <iostream>
#include <memory>

#include <limits>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "planner/store.hpp"
#include "sim/report.hpp"

namespace stagecraft::cli {

namespace {

struct ResultsArgs {
  std::string db, where;
  int64_t search = 0, top = 10;
  bool json = false, list = false;
};

nlohmann::json search_json(const planner::StoredSearch& s) {
  return {{"id", s.id},          {"status", s.status},         {"version", s.version},  {"started_at", s.started_at},
          {"finished_at", s.finished_at}, {"model", s.model}, {"cluster", s.cluster},   {"gpus", s.gpus},
          {"global_batch", s.global_batch}, {"top_k", s.top_k}, {"counts", planner::to_json(s.counts)},
          {"seconds", s.seconds}};
}

void print_searches(const std::vector<planner::StoredSearch>& all) {
  std::printf("  id  status       model            cluster              gpus  batch  candidates  simulated  seconds  started\n");
  for (const planner::StoredSearch& s : all) {
    std::printf("%4lld  %-11s  %-15s  %-19s %5lld  %5lld  %10lld  %9lld  %7.1f  %s\n", static_cast<long long>(s.id),
                s.status.c_str(), s.model.c_str(), s.cluster.c_str(), static_cast<long long>(s.gpus),
                static_cast<long long>(s.global_batch), static_cast<long long>(s.counts.candidates),
                static_cast<long long>(s.counts.evaluated), s.seconds, s.started_at.c_str());
  }
}

void print_plans(const planner::StoredSearch& s, const std::vector<planner::StoredPlan>& plans) {
  std::printf("Search %lld (%s): %s on %lld GPUs of %s, global batch %lld; %lld plans simulated\n\n",
              static_cast<long long>(s.id), s.status.c_str(), s.model.c_str(), static_cast<long long>(s.gpus),
              s.cluster.c_str(), static_cast<long long>(s.global_batch), static_cast<long long>(s.counts.evaluated));
  std::size_t width = 4;
  for (const auto& p : plans) width = std::max(width, p.key.size());
  std::printf("  #  %-*s  fits%s\n", static_cast<int>(width), "plan", sim::table_header().c_str());
  int rank = 0;
  for (const auto& p : plans) {
    std::printf("%3d  %-*s  %-4s%s\n", ++rank, static_cast<int>(width), p.key.c_str(), p.numbers.fits ? "yes" : "no",
                sim::table_cells(p.numbers).c_str());
  }
}

int run_results(const ResultsArgs& a) {
  planner::Store store(a.db, true);
  const std::vector<planner::StoredSearch> all = store.searches();
  if (all.empty()) {
    std::cerr << "stagecraft: " << a.db << ": no search recorded yet\n";
    return kImpossible;
  }
  if (a.list) {
    if (a.json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& s : all) j.push_back(search_json(s));
      std::cout << nlohmann::json{{"searches", j}}.dump(2) << "\n";
    } else {
      print_searches(all);
    }
    return kOk;
  }
  const planner::StoredSearch* chosen = &all.back();
  if (a.search > 0) {
    chosen = nullptr;
    for (const auto& s : all) {
      if (s.id == a.search) chosen = &s;
    }
    if (!chosen) throw planner::StoreError(a.db, "--search " + std::to_string(a.search) + ": no such search (see --list)");
  }
  const std::vector<planner::StoredPlan> plans = store.plans(chosen->id, a.where, a.top);
  if (a.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& p : plans) list.push_back({{"key", p.key}, {"plan", p.plan}, {"metrics", p.metrics}});
    std::cout << nlohmann::json{{"search", search_json(*chosen)}, {"plans", list}}.dump(2) << "\n";
  } else if (!plans.empty()) {
    print_plans(*chosen, plans);
  }
  if (plans.empty()) {
    std::cerr << "stagecraft: search " << chosen->id << " in " << a.db << " has no plans"
              << (a.where.empty() ? "" : " matching --where \"" + a.where + "\"") << "\n";
    return kImpossible;
  }
  return kOk;
}

}  // namespace

Subcommand add_results(CLI::App& root) {
  auto a = std::make_shared<ResultsArgs>();
  CLI::App* app = root.add_subcommand("results", "List the searches and plans of a results store (--db of search)");
  app->add_option("--db", a->db, "the SQLite results store")->required()->check(CLI::ExistingFile);
  app->add_option("--search", a->search, "which search (default: the latest)")->check(positive_int(std::numeric_limits<int64_t>::max()));
  app->add_option("--top", a->top, "how many plans (default 10; 0 for all)")->check(non_negative_int(std::numeric_limits<int64_t>::max()));
  app->add_option("--where", a->where, "SQL condition over the plans columns, e.g. \"fits AND pp >= 4\"");
  app->add_flag("--list", a->list, "list the searches instead of plans");
  app->add_flag("--json", a->json, "print one JSON document");
  return {app, [a]() { return run_results(*a); }};
}

}  // namespace stagecraft::cli
