// stagecraft simulate --model M --cluster C --training T --plan P [--nodes N] [--full]
//                     [--trace out.json] [--json]: one plan, simulated.
// stagecraft simulate --model M --cluster C --deepspeed ds_config.json [...]: a user's DeepSpeed
//                     config (planner/deepspeed.hpp; missing keys take DeepSpeed's defaults).
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/spec/limits.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/trace/trace.hpp"
#include "planner/deepspeed.hpp"
#include "sim/report.hpp"
#include "sim/models/work.hpp"
#include "sim/simulator.hpp"
#include "sim/uncertainty.hpp"

namespace stagecraft::cli {

namespace {

struct SimulateArgs {
  std::string model, cluster, training, plan, trace, deepspeed;
  int64_t nodes = 0;
  int64_t gpus = 0;
  bool full = false;
  bool json = false;
  bool no_error_bars = false;
  TrainingArgs training_args;
};

int run_simulate(const SimulateArgs& a) {
  using spec::ConfigKind;
  const spec::Model m = load_model_arg(a.model);
  spec::Cluster c = spec::load_cluster(spec::resolve_config(ConfigKind::kCluster, a.cluster));
  if (a.nodes > 0) c.nodes = a.nodes;
  spec::Training t;
  spec::Plan p;
  std::vector<std::string> deepspeed_defaults;
  if (!a.deepspeed.empty()) {
    const planner::DeepSpeedImport ds = planner::load_deepspeed(a.deepspeed, a.gpus > 0 ? a.gpus : c.gpus(), m.layers);
    t = ds.training;
    p = ds.plan;
    deepspeed_defaults = ds.defaults;
    if (!a.json) {
      for (const std::string& d : ds.defaults) std::cerr << "stagecraft: " << a.deepspeed << ": " << d << "\n";
    }
    for (const std::string& w : ds.warnings) std::cerr << "stagecraft: warning: " << a.deepspeed << ": " << w << "\n";
  } else {
    if (a.training.empty()) throw spec::SpecError("--training", "", "expected a training file or bundled name (or --deepspeed)");
    if (a.plan.empty()) throw spec::SpecError("--plan", "", "expected a plan file or bundled name (or --deepspeed)");
    t = spec::load_training(spec::resolve_config(ConfigKind::kTraining, a.training));
    p = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, a.plan));
  }
  t = with_training_args(std::move(t), a.training_args);
  warn_training_length(m, &t);
  if (a.gpus > c.gpus()) {
    std::cerr << "stagecraft: error: --gpus " << a.gpus << ": expected at most the cluster's " << c.gpus() << " GPUs ("
              << c.nodes << " nodes × " << c.gpus_per_node << ")\n";
    return kBadInput;
  }
  const int64_t gpus = a.gpus > 0 ? a.gpus : c.gpus();
  if (p.world() != gpus) {
    throw spec::SpecError(p.file, "/dp",
                          "expected tp × pp × dp (" + std::to_string(p.world()) + ") to equal the GPUs in use, " +
                              std::to_string(gpus) + (a.gpus > 0 ? " (--gpus)" : " (" + std::to_string(c.nodes) +
                              " nodes × " + std::to_string(c.gpus_per_node) + "; size it with --nodes or --gpus)"));
  }
  const program::Program prog = program::lower(m, t, p);
  sim::SimOptions options;
  options.full = a.full;
  options.record_trace = !a.trace.empty();
  const sim::SimResult r = sim::simulate(prog, c, options);
  if (!a.trace.empty()) trace::write_trace(r.trace, a.trace);
  const sim::ErrorBars bars = a.no_error_bars ? sim::ErrorBars{} : sim::error_bars(prog, c, options, r.metrics);
  // The attention the simulation timed: a fused kernel of the GPU profile, or unfused.
  const spec::AttentionKernel* kernel = sim::attention_kernel(c, prog.training);
  if (a.json) {
    nlohmann::json j = sim::to_json(r.metrics, prog.plan);
    if (!bars.empty()) j["uncertainty"] = sim::to_json(bars);
    if (!a.deepspeed.empty()) j["defaults_applied"] = deepspeed_defaults;  // what text mode prints to stderr
    std::string term;
    const std::string limit = sim::limit_text(r.metrics, &term);
    j["limits"] = {{"term", term}, {"time", limit}, {"memory", sim::memory_text(r.metrics)}};  // as text mode's "limits"
    j["attention"] = kernel ? nlohmann::json{{"mode", "flash"}, {"kernel", kernel->name}}
                            : nlohmann::json{{"mode", "unfused"}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << sim::report_text(r.metrics, prog.plan, prog.placement.world(), c.name);
    std::cout << "attention   "
              << (kernel ? "fused kernel \"" + kernel->name + "\" of the " + c.gpu.name + " profile (\"attention\": \"" +
                               prog.training.attention + "\")"
                         : std::string("unfused: score GEMMs and softmax passes, scores kept for the backward"))
              << "\n";
    if (!bars.empty()) std::cout << "uncertainty " << sim::error_bars_text(bars) << "\n";
  }
  return r.metrics.fits ? kOk : kImpossible;
}

}  // namespace

Subcommand add_simulate(CLI::App& root) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* app = root.add_subcommand("simulate", "Simulate one plan: step time, where the time goes, peak memory");
  app->add_option("--model", args->model, "model file or bundled name")->required();
  app->add_option("--cluster", args->cluster, "cluster file or bundled name")->required();
  CLI::Option* training = app->add_option("--training", args->training, "training file or bundled name");
  CLI::Option* plan = app->add_option("--plan", args->plan, "plan file or bundled name");
  CLI::Option* deepspeed =
      app->add_option("--deepspeed", args->deepspeed,
                      "a DeepSpeed ds_config.json instead of --plan and --training (missing keys take DeepSpeed's defaults)")
          ->excludes(training)
          ->excludes(plan);
  add_training_options(app, args->training_args);
  // The config's train_batch_size and fp16/bf16 sections say these; --seq-len it does not.
  args->training_args.global_batch_option->excludes(deepspeed);
  args->training_args.dtype_option->excludes(deepspeed);
  app->add_option("--nodes", args->nodes, "number of nodes (default: the cluster file's)")->check(positive_int(spec::limits::kGpus));
  app->add_option("--gpus", args->gpus, "GPUs in use, filling nodes in order (default: all of the cluster's)")
      ->check(positive_int(spec::limits::kGpus));
  app->add_flag("--full", args->full, "simulate every rank instead of one data-parallel replica");
  app->add_option("--trace", args->trace, "write the simulated trace (Chrome trace JSON, opens in Perfetto)")->check(writable_file());
  app->add_flag("--json", args->json, "print one JSON document");
  app->add_flag("--no-error-bars", args->no_error_bars,
                "skip the step-time range from the cluster profile's parameter uncertainties (two more "
                "simulations per uncertain parameter)");
  return {app, [args]() { return run_simulate(*args); }};
}

}  // namespace stagecraft::cli
