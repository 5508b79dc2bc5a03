// stagecraft sweep --model M --cluster C --training T [--nodes N] [--set K=V ...]
//                  --vary KEY (--values V1,V2,... | --range LO:HI:N[:log])
//                  [--plan P ...] [--top K] [--threads N] [--json]
// How the step time of a few plans moves as one cluster or training field changes, and where the
// fastest of them changes (planner/sweep.hpp). The plans are --plan files, or else the top K rows
// of a search at the base inputs (bucket variants of one step time count once).
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/overrides.hpp"
#include "planner/report.hpp"
#include "planner/search.hpp"
#include "planner/sweep.hpp"

namespace stagecraft::cli {

namespace {

struct SweepArgs {
  std::string model, cluster, training, vary, range;
  std::vector<std::string> values, plans, set;
  int64_t nodes = 0, top = 5;
  int threads = 0;
  bool json = false;
};

int run_sweep(const SweepArgs& a) {
  using spec::ConfigKind;
  install_interrupt_handler();
  planner::SweepInputs in;
  in.model = load_model_arg(a.model);
  in.cluster_path = spec::resolve_config(ConfigKind::kCluster, a.cluster);
  in.training_path = spec::resolve_config(ConfigKind::kTraining, a.training);
  in.base = spec::parse_overrides(a.set);
  in.nodes = a.nodes;
  const spec::Override axis = spec::parse_override(a.vary + "=0");
  if (a.values.empty() == a.range.empty()) throw spec::SpecError("--values", "", "expected --values or --range (one of them)");
  const std::vector<std::string> values = a.values.empty() ? planner::range_values(a.range, "--range") : a.values;

  std::vector<planner::SweepPlan> plans;
  if (!a.plans.empty()) {
    for (const std::string& p : a.plans) {
      const spec::Plan plan = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, p));
      plans.push_back({planner::plan_key(plan), plan});
    }
  } else {
    spec::Cluster c = spec::load_cluster(in.cluster_path, in.base);
    if (a.nodes > 0) c.nodes = a.nodes;
    const spec::Training t = spec::load_training(in.training_path, in.base);
    const planner::Space space(in.model, c, t, c.gpus(), {});
    planner::SearchOptions o;
    o.top_k = std::max<int64_t>(a.top * 4, 10);   // bucket variants share rows: keep enough to fill K rows
    o.threads = a.threads;
    o.cancel = &interrupted();
    const planner::SearchResult r = planner::search(space, o);
    if (r.interrupted) {
      std::cerr << "stagecraft: interrupted during the search for the plans to sweep; nothing swept\n";
      return interrupted_exit_code();
    }
    if (r.top.empty()) {
      std::cerr << "stagecraft: no plan to sweep: " << r.reason << "\n";
      return kImpossible;
    }
    for (std::size_t row : planner::table_rows(r.top)) {
      if (static_cast<int64_t>(plans.size()) == a.top) break;
      plans.push_back({r.top[row].key, r.top[row].plan});
    }
  }
  const planner::Sweep s = planner::sweep(in, axis, values, plans, a.threads, &interrupted());
  if (a.json) {
    std::cout << planner::to_json(s).dump(2) << "\n";
  } else {
    std::cout << planner::format_sweep(s);
  }
  if (s.interrupted) {
    std::cerr << "stagecraft: interrupted; the sweep above is partial (exit status 128 + the signal)\n";
    return interrupted_exit_code();
  }
  return kOk;
}

}  // namespace

Subcommand add_sweep(CLI::App& root) {
  auto a = std::make_shared<SweepArgs>();
  CLI::App* app = root.add_subcommand("sweep", "How the step time of a few plans moves as one cluster or training field changes");
  app->add_option("--model", a->model, "model file or bundled name")->required();
  app->add_option("--cluster", a->cluster, "cluster file or bundled name")->required();
  app->add_option("--training", a->training, "training file or bundled name")->required();
  app->add_option("--nodes", a->nodes, "number of nodes (default: the cluster file's)")->check(positive_int(spec::limits::kGpus));
  add_set_option(app, a->set);
  app->add_option("--vary", a->vary, "the field to sweep, as --set names it, e.g. cluster.inter_node.nic_bandwidth_Bps")->required();
  app->add_option("--values", a->values, "its values, e.g. 100Gbps,200Gbps,400Gbps")->delimiter(',');
  app->add_option("--range", a->range, "LO:HI:N (linear) or LO:HI:N:log values instead of --values");
  app->add_option("--plan", a->plans, "a plan to sweep (repeatable; default: the top plans of a search at the base values)");
  app->add_option("--top", a->top, "how many of the search's top plans to sweep (default 5)")->check(positive_int(int64_t{64}));
  app->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(positive_int(spec::limits::kThreads));
  app->add_flag("--json", a->json, "print one JSON document");
  return {app, [a]() { return run_sweep(*a); }};
}

}  // namespace stagecraft::cli
