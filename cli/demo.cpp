// stagecraft demo: README's first command, no arguments needed. Searches the bundled case —
// GPT-3 13B on 8 DGX-H100 nodes over NDR InfiniBand, global batch 1024 — prints the top plans,
// why the best one wins and what limits it, compares it with the hand-written plan
// configs/plans/demo-13b.json, and writes into ./stagecraft-demo/ (or --out DIR):
//   plan.json        the best plan (stagecraft simulate / run / program take it)
//   ds_config.json   the same plan for DeepSpeed (warnings on stderr where DeepSpeed cannot run it)
//   trace.json       its simulated step (Chrome trace JSON: open it in https://ui.perfetto.dev)
//   search.json      the whole answer, as `stagecraft search --json` prints it
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/io/file.hpp"
#include "core/spec/limits.hpp"
#include "core/count/count.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/trace/trace.hpp"
#include "planner/deepspeed.hpp"
#include "planner/explain.hpp"
#include "planner/report.hpp"
#include "planner/search.hpp"
#include "sim/model_error.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::cli {

namespace {

constexpr const char* kModel = spec::kDemoCase.model;
constexpr const char* kCluster = spec::kDemoCase.cluster;
constexpr const char* kTraining = spec::kDemoCase.training;
constexpr const char* kPlan = spec::kDemoCase.plan;
constexpr int64_t kNodes = spec::kDemoCase.nodes;

struct DemoArgs {
  std::string out = "stagecraft-demo";
  int threads = 0;
};

void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  io::write_file(path.string(), j.dump(2) + "\n");
}

void print_case(const spec::Model& m, const spec::Cluster& c, const spec::Training& t) {
  std::printf("Stagecraft demo: which plan trains %s fastest on %lld x %s (%lld GPUs), global batch %lld?\n",
              m.name.c_str(), static_cast<long long>(c.nodes), c.gpu.name.c_str(), static_cast<long long>(c.gpus()),
              static_cast<long long>(t.global_batch));
  std::printf("  model     %s parameters, %s FLOP per token forward (%s)\n", short_count(static_cast<double>(count::parameters(m))).c_str(),
              short_count(count::flops_per_token_fwd(m)).c_str(), m.file.c_str());
  std::printf("  cluster   %s: %lld nodes x %lld GPUs, %lld x %.0f Gb/s NICs per node (%s)\n", c.name.c_str(),
              static_cast<long long>(c.nodes), static_cast<long long>(c.gpus_per_node),
              static_cast<long long>(c.inter_node.nics_per_node), c.inter_node.nic_bandwidth_Bps * 8 / 1e9, c.file.c_str());
  std::printf("  training  %lld sequences x %lld tokens, %s, %s (%s)\n\n", static_cast<long long>(t.global_batch),
              static_cast<long long>(m.seq_len), spec::to_string(t.dtype), spec::to_string(t.optimizer), t.file.c_str());
}

void write_outputs(const std::filesystem::path& dir, const planner::Space& space, const planner::SearchResult& r,
                   const planner::Baseline& baseline) {
  std::filesystem::create_directories(dir);
  const planner::Evaluated& best = r.top.front();
  spec::Plan plan = best.plan;
  plan.source = "stagecraft demo: the fastest of " + std::to_string(r.counts.candidates) + " candidate plans (" +
                std::to_string(r.counts.evaluated) + " simulated) for " + space.model().name + " on " +
                std::to_string(space.gpus()) + " GPUs of " + space.cluster().name;
  write_json(dir / "plan.json", spec::to_json(plan));
  const planner::DeepSpeedExport ds = planner::to_deepspeed(plan, space.training());
  for (const std::string& w : ds.warnings) std::cerr << "stagecraft: ds_config.json: warning: " << w << "\n";
  write_json(dir / "ds_config.json", ds.config);
  sim::SimOptions options;
  options.record_trace = true;
  const program::Program prog = program::lower(space.model(), space.training(), plan);
  trace::write_trace(sim::simulate(prog, space.cluster(), options).trace, (dir / "trace.json").string());
  write_json(dir / "search.json", planner::to_json(r, baseline));
}

int run_demo(const DemoArgs& a) {
  using spec::ConfigKind;
  const spec::Model m = spec::load_model(spec::resolve_config(ConfigKind::kModel, kModel));
  spec::Cluster c = spec::load_cluster(spec::resolve_config(ConfigKind::kCluster, kCluster));
  c.nodes = kNodes;
  const spec::Training t = spec::load_training(spec::resolve_config(ConfigKind::kTraining, kTraining));
  print_case(m, c, t);
  const planner::Space space(m, c, t, c.gpus(), {});
  const spec::Plan hand = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, kPlan));
  spec::validate_plan(hand, m, t, c.gpus());
  const planner::Baseline baseline{"hand-written plan " + hand.file, hand, planner::simulate_plan(space, hand)};

  planner::SearchOptions o;
  o.top_k = 5;
  o.threads = a.threads;
  install_interrupt_handler();
  o.cancel = &interrupted();
  const bool bar = isatty(STDERR_FILENO);
  if (bar) {
    o.on_progress = [](const planner::Progress& p) {
      std::fprintf(stderr, "\rsearching: %lld plans simulated, best %.3f s per step   ", static_cast<long long>(p.evaluated),
                   p.best_step_time_s);
    };
  }
  const planner::SearchResult r = planner::search(space, o);
  if (bar) std::fprintf(stderr, "\n");
  for (const std::string& w : r.warnings) std::cerr << "stagecraft: warning: " << w << "\n";
  std::printf("%s\n\n", planner::format_counts(r).c_str());
  if (r.top.empty()) {
    std::cerr << "stagecraft: no plan: " << r.reason << "\n";
    return r.interrupted ? interrupted_exit_code() : kImpossible;
  }
  std::printf("Top plans (fastest first, all fit in memory):\n%s\n", planner::format_table(r.top).c_str());
  std::printf("Best plan: %s\n", r.top.front().key.c_str());
  for (const std::string& line : planner::explain(r).lines()) std::printf("%s\n", line.c_str());
  const std::vector<std::string> uncertainty = planner::error_bar_lines(r.top, planner::top_error_bars(space, r.top, 5));
  if (!uncertainty.empty()) std::printf("\n");
  for (const std::string& line : uncertainty) std::printf("%s\n", line.c_str());
  if (const std::optional<sim::ValidationRecord> record = sim::bundled_validation_record()) {
    std::printf("\n");
    for (const std::string& line : planner::model_error_lines(r.top, space.model(), space.training().framework, *record, space.cluster().gpu.name)) {
      std::printf("%s\n", line.c_str());
    }
  }
  std::printf("\n%s\n", planner::compare_with_baseline(r, baseline).c_str());
  const std::filesystem::path dir = a.out;
  write_outputs(dir, space, r, baseline);
  std::printf("\nWrote %s/: plan.json (the best plan), ds_config.json (for DeepSpeed), trace.json (its simulated step;\n"
              "open it in https://ui.perfetto.dev), search.json (this answer as JSON).\n"
              "Next: stagecraft simulate --model %s --cluster %s --nodes %lld --training %s --plan %s/plan.json\n",
              dir.string().c_str(), kModel, kCluster, static_cast<long long>(kNodes), kTraining, dir.string().c_str());
  if (r.interrupted) {
    std::cerr << "stagecraft: interrupted; the answer above is the best of the plans simulated before it (exit status 128 + the signal)\n";
    return interrupted_exit_code();
  }
  return kOk;
}

}  // namespace

Subcommand add_demo(CLI::App& root) {
  auto a = std::make_shared<DemoArgs>();
  CLI::App* app = root.add_subcommand("demo", "The bundled case: GPT-3 13B on 8 DGX-H100 nodes, global batch 1024");
  app->add_option("--out", a->out, "where to write the best plan, its DeepSpeed config and trace (default ./stagecraft-demo)")
      ->check(writable_dir());
  app->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(positive_int(spec::limits::kThreads));
  return {app, [a]() { return run_demo(*a); }};
}

}  // namespace stagecraft::cli
