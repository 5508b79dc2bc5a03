// stagecraft simulate --model M --cluster C --training T --plan P [--nodes N] [--full]
//                     [--trace out.json] [--json]: one plan, simulated.
// stagecraft simulate --model M --cluster C --deepspeed ds_config.json [...]: a user's DeepSpeed
//                     config (planner/deepspeed.hpp; missing keys take DeepSpeed's defaults).
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/spec/limits.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/spec/overrides.hpp"
#include "core/thread/parallel_for.hpp"
#include "core/trace/trace.hpp"
#include "planner/deepspeed.hpp"
#include "render/timeline_png.hpp"
#include "sim/report.hpp"
#include "sim/run_cost.hpp"
#include "sim/model_error.hpp"
#include "sim/models/work.hpp"
#include "sim/simulator.hpp"
#include "sim/straggler.hpp"
#include "sim/uncertainty.hpp"
#include "traces/io/trace_io.hpp"
#include "traces/timeline.hpp"

namespace stagecraft::cli {

namespace {

// The busiest expert's load as the simulation takes it (Training::moe_busiest_load) and why.
std::string expert_load(const spec::Training& t) {
  const std::string rho = text::fmt("%.2f", t.moe_imbalance);
  if (t.moe_capacity_factor <= 0) return "load imbalance " + rho + " (training \"moe_imbalance\"), dropless";
  const std::string c = text::fmt("%.2f", t.moe_capacity_factor);
  if (t.moe_pad_to_capacity) return "every expert padded to its capacity, " + c + "x its balanced share (\"moe_capacity_factor\")";
  return "the busiest rank at " + text::fmt("%.2f", t.moe_busiest_load()) + "x the mean (imbalance " + rho + ", capacity " + c +
         ": copies beyond it dropped)";
}

// What the plan's ZeRO runs across nodes (docs/program.md), in words; empty for plain ZeRO.
std::string across_nodes_text(const spec::Plan& p, spec::Framework f) {
  const spec::ZeroConfig& z = p.zero;
  std::vector<std::string> parts;
  const std::string dp = std::to_string(p.dp);
  if (spec::hierarchical(z, p.dp)) {
    const char* who = f == spec::Framework::kDeepSpeed ? "MiCS" : f == spec::Framework::kMegatron ? "optimizer instances" : "hybrid sharding";
    parts.push_back(std::string(who) + ": model states sharded over " + std::to_string(z.shard_group) + " of the " + dp +
                    " data-parallel ranks, replicas all-reduced " +
                    (spec::replica_sync(z, f) == spec::ReplicaSync::kStep ? "once a step" : "after every reduce-scatter") +
                    (z.hierarchical_gather ? ", gathers across nodes then inside each" : ""));
  }
  if (spec::secondary_partition(z, p.dp)) {
    parts.push_back(f == spec::Framework::kFsdp2 ? "reshard_after_forward=" + std::to_string(z.hpz_group) + ": the backward gathers over " +
                                                       std::to_string(z.hpz_group) + " ranks"
                                                 : "hpZ: gathers after a bucket's first of the step over " + std::to_string(z.hpz_group) +
                                                       " ranks (a secondary copy)");
  }
  if (z.quantized_weights.on()) parts.push_back("qwZ: int8 weights on the wire");
  if (z.quantized_gradients.on()) {
    parts.push_back(z.local_group > 0 && z.local_group < p.dp ? "qgZ: int4 gradients, all-to-all inside each node then across"
                                                              : "qgZ: off on one node, as DeepSpeed runs it");
  }
  std::string out;
  for (const std::string& s : parts) out += (out.empty() ? "" : "; ") + s;
  return out;
}


struct SimulateArgs {
  std::string model, cluster, training, plan, trace, deepspeed, png;
  int64_t nodes = 0;
  int64_t gpus = 0;
  bool full = false;
  bool json = false;
  bool no_error_bars = false;
  TrainingArgs training_args;
  CostArgs cost_args;
  std::vector<std::string> set;
};

// A --full trace holds an event per instruction of every rank: sized before simulating, and refused
// (exit 1, with the numbers) when this host's memory or the trace's folder cannot hold it. Bytes per
// instruction, measured on the demo plan (GPT-3 13B, 64 H100s, simulate --full --trace: 4,039,168
// instruction events and 1,343,552 memory samples, peak RSS 598 MB, a 1,103,175,456-byte file):
// 150 in memory while simulating (148 measured), 275 written (273).
constexpr double kPngBytesPerInstruction = 300;  // drawing it, on top: the same plan --full --png peaked at 1.74 GB (283 more)
std::string full_trace_shortfall(const program::Program& prog, const SimulateArgs& a) {
  int64_t events = 0;
  for (int64_t r = 0; r < prog.placement.world(); ++r) events += static_cast<int64_t>(prog.rank(r).size());
  const double memory = static_cast<double>(events) * (150.0 + (a.png.empty() ? 0.0 : kPngBytesPerInstruction));
  const double file = a.trace.empty() ? 0.0 : static_cast<double>(events) * 275.0;
  const std::string what = "the full trace of " + spec::summary(prog.plan) + " holds " + with_commas(events) +
                           " events (an instruction of each of its " + std::to_string(prog.placement.world()) + " ranks)";
  const double available = host_available_bytes();
  if (available > 0 && memory > available) {
    return what + ": about " + short_bytes(memory) + " of memory to simulate and " + (a.png.empty() ? "write" : "draw") +
           ", and this host has " + short_bytes(available) + " available; simulate one replica (drop --full), or trace fewer GPUs";
  }
  if (file > 0) {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::absolute(a.trace).parent_path();
    const std::filesystem::space_info s = std::filesystem::space(dir, ec);
    if (!ec && file > static_cast<double>(s.available)) {
      return what + ": about " + short_bytes(file) + " written to " + a.trace + ", and its folder has " +
             short_bytes(static_cast<double>(s.available)) + " free; simulate one replica (drop --full) or write elsewhere";
    }
  }
  return {};
}

int run_simulate(const SimulateArgs& a) {
  using spec::ConfigKind;
  if (!a.png.empty() && !render::png_available()) {
    std::cerr << "stagecraft: error: --png needs a build with Qt6 (STAGECRAFT_WITH_GUI=ON); this one has none\n";
    return kImpossible;
  }
  const spec::Model m = load_model_arg(a.model);
  const std::vector<spec::Override> overrides = spec::parse_overrides(a.set);
  spec::Cluster c = spec::load_cluster(spec::resolve_config(ConfigKind::kCluster, a.cluster), overrides);
  if (a.nodes > 0) c.nodes = a.nodes;
  apply_price(c, a.cost_args);
  spec::Training t;
  spec::Plan p;
  std::vector<std::string> deepspeed_defaults;
  if (!a.deepspeed.empty()) {
    const planner::DeepSpeedImport ds = planner::load_deepspeed(a.deepspeed, a.gpus > 0 ? a.gpus : c.gpus(), m.layers, hf_args(m), c.gpus_per_node);
    t = spec::with_overrides(ds.training, overrides);  // --set training.* as on a training file
    p = ds.plan;
    deepspeed_defaults = ds.defaults;
    if (!a.json) {
      for (const std::string& d : ds.defaults) std::cerr << "stagecraft: " << a.deepspeed << ": " << d << "\n";
    }
    for (const std::string& w : ds.warnings) std::cerr << "stagecraft: warning: " << a.deepspeed << ": " << w << "\n";
  } else {
    if (a.training.empty()) throw spec::SpecError("--training", "", "expected a training file or bundled name (or --deepspeed)");
    if (a.plan.empty()) throw spec::SpecError("--plan", "", "expected a plan file or bundled name (or --deepspeed)");
    t = spec::load_training(spec::resolve_config(ConfigKind::kTraining, a.training), overrides);
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
                          std::string(p.cp > 1 ? "expected tp × cp × pp × dp (" : "expected tp × pp × dp (") +
                              std::to_string(p.world()) + ") to equal the GPUs in use, " +
                              std::to_string(gpus) + (a.gpus > 0 ? " (--gpus)" : " (" + std::to_string(c.nodes) +
                              " nodes × " + std::to_string(c.gpus_per_node) + "; size it with --nodes or --gpus)"));
  }
  program::LowerOptions lowering;
  lowering.threads = thread::hardware_threads();
  const program::Program prog = program::lower(m, t, p, lowering);
  sim::SimOptions options;
  options.full = a.full;
  options.record_trace = !a.trace.empty() || !a.png.empty();
  if (a.full && options.record_trace) {
    if (const std::string why = full_trace_shortfall(prog, a); !why.empty()) {
      std::cerr << "stagecraft: error: " << why << "\n";
      return kImpossible;
    }
  }
  // the central simulation beside the perturbed ones of the error bars, when there are any
  const sim::SimWithErrorBars run = a.no_error_bars ? sim::SimWithErrorBars{sim::simulate(prog, c, options), {}}
                                              : sim::simulate_with_error_bars(prog, c, options);
  const sim::SimResult& r = run.result;
  const sim::ErrorBars& bars = run.bars;
  if (!a.trace.empty()) trace::write_trace(r.trace, a.trace);
  if (!a.png.empty()) {
    // The timeline compare --png draws, from this simulation's own trace.
    const std::string title = "simulated: " + spec::summary(prog.plan) + " on " + std::to_string(gpus) + " GPUs (" + c.name + ")";
    render::write_timeline_png({traces::timeline_panel(traces::from_core(r.trace, a.trace.empty() ? "simulated" : a.trace), title)},
                               a.png);
    std::cerr << "stagecraft: wrote " << a.png << "\n";
  }
  // What published runs of this framework and ZeRO class measured against their simulation.
  const std::optional<sim::ValidationRecord> record = sim::bundled_validation_record();
  const std::optional<sim::ModelError> model_error =
      record ? std::optional(sim::model_error(*record, prog.training.framework, prog.plan.zero.stage, c.gpu.name,
                                                     spec::validation_class(prog.plan, prog.model)))
             : std::nullopt;
  // The attention the simulation timed: a fused kernel of the GPU profile, or unfused.
  const spec::AttentionKernel* kernel = sim::attention_kernel(c, prog.training);
  // ZeRO-3's gathers and the gradient reductions: one NCCL communicator (taking turns) or one each,
  // and why (spec::dp_communicator)
  std::optional<spec::CommunicatorChoice> communicator;
  if (prog.plan.zero.stage == 3 && prog.plan.dp_cp() > 1) {
    communicator = spec::dp_communicator(prog.training.framework, prog.training.shared_reduce_communicator, prog.plan.tp,
                                                 prog.plan.zero.stage);
  }
  const std::vector<sim::StageMemory> stages = sim::stage_memory(r.rank_peaks, prog.placement);
  // a straggler's cost: the step against the symmetric one, and where the others wait
  const std::optional<sim::StragglerReport> straggler = sim::straggler_report(prog, c, r);
  // What the plan costs, at the step time and at the ends of its 1σ range.
  const std::optional<double> budget = token_budget(a.cost_args);
  const double tokens_per_step = static_cast<double>(prog.tokens_per_step());
  const double checkpoint = sim::checkpoint_bytes(prog.model, prog.training.dtype);
  const sim::RunCost cost = sim::run_cost(c, gpus, tokens_per_step, r.metrics.step_time_s, budget, checkpoint);
  const bool cost_range = !bars.empty() && budget.has_value();
  const sim::RunCost cost_low = cost_range ? sim::run_cost(c, gpus, tokens_per_step, bars.step_low_s, budget, checkpoint) : cost;
  const sim::RunCost cost_high = cost_range ? sim::run_cost(c, gpus, tokens_per_step, bars.step_high_s, budget, checkpoint) : cost;
  if (a.json) {
    nlohmann::json j = sim::to_json(r.metrics, prog.plan);
    if (!bars.empty()) j["uncertainty"] = sim::to_json(bars);
    if (model_error) j["model_error"] = sim::to_json(*model_error);
    if (straggler) j["straggler"] = sim::to_json(*straggler);
    if (!a.deepspeed.empty()) j["defaults_applied"] = deepspeed_defaults;  // what text mode prints to stderr
    std::string term;
    const std::string limit = sim::limit_text(r.metrics, &term);
    j["limits"] = {{"term", term}, {"time", limit}, {"memory", sim::memory_text(r.metrics)}};  // as text mode's "limits"
    j["attention"] = kernel ? nlohmann::json{{"mode", "flash"}, {"kernel", kernel->name}}
                            : nlohmann::json{{"mode", "unfused"}};
    j["stages"] = sim::to_json(stages);
    if (communicator) j["communicator"] = {{"shared", communicator->shared}, {"why", communicator->why}};
    // what MFU is measured against: the storage format's peak (bf16 for fp8, whose block GEMMs run at the FP8 peak)
    j["precision"] = {{"dtype", spec::to_string(prog.training.dtype)},
                      {"mfu_peak_flops", c.gpu.peak_flops.at(spec::storage_dtype(prog.training.dtype))}};
    if (prog.training.dtype == spec::Dtype::kFp8) j["precision"]["fp8_peak_flops"] = c.gpu.peak_flops.at(spec::Dtype::kFp8);
    j["cost"] = sim::to_json(cost);
    if (cost_range && j["cost"].contains("train")) {
      j["cost"]["train"]["seconds_range"] = {cost_low.train_seconds, cost_high.train_seconds};
      if (cost.train_cost) j["cost"]["train"]["cost_range"] = {*cost_low.train_cost, *cost_high.train_cost};
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << sim::report_text(r.metrics, prog.plan, prog.placement.world(), c.name);
    if (stages.size() > 1) std::cout << sim::stage_memory_text(stages, r.metrics.capacity_bytes);
    std::cout << "attention   "
              << (kernel ? "fused kernel \"" + kernel->name + "\" of the " + c.gpu.name + " profile (\"attention\": \"" +
                               prog.training.attention + "\")"
                         : std::string("unfused: score GEMMs and softmax passes, scores kept for the backward"))
              << "\n";
    if (const std::string across = across_nodes_text(prog.plan, prog.training.framework); !across.empty()) {
      std::cout << "across nodes " << across << "; a GPU sends " << text::short_bytes(r.metrics.dp_internode_bytes)
                << " of data-parallel traffic to other nodes per micro-batch\n";
    }
    if (prog.model.moe.on() && (prog.placement.ep > 1 || prog.placement.etp > 1)) {
      const std::vector<int64_t> group = prog.placement.group_members(program::Group::kEp, 0);
      const int64_t nodes = (group.back() / c.gpus_per_node) - (group.front() / c.gpus_per_node) + 1;
      const std::string etp = prog.plan.etp > 1 ? " etp " + std::to_string(prog.plan.etp) : "";
      const std::string width = (prog.plan.etp > 1 ? ", each 1/" + std::to_string(prog.plan.etp) + " of its width" : "") +
                                std::string(prog.plan.moe_dispatcher == spec::MoeDispatcher::kAllGather
                                                ? ", tokens all-gathered over the " + std::to_string(prog.plan.ep * prog.plan.etp) +
                                                      " ranks of the expert grid"
                                            : prog.plan.moe_dispatcher == spec::MoeDispatcher::kFlex
                                                ? ", tokens dispatched by DeepEP (the flex dispatcher) over the " +
                                                      std::to_string(prog.plan.ep * prog.plan.etp) + " ranks of the expert grid"
                                                : "");
      std::cout << "experts     ep " << prog.plan.ep << etp << " (" << prog.model.moe.experts / prog.plan.ep << " of "
                << prog.model.moe.experts << " experts a GPU" << width << ", its group on " << nodes
                << (nodes == 1 ? " node" : " nodes") << "), their gradients over " << prog.plan.expert_dp() << (prog.plan.expert_dp() == 1 ? " rank" : " ranks")
                << "; a GPU's all-to-alls send "
                << text::short_bytes(r.metrics.ep_intranode_bytes) << " a step inside its node, "
                << text::short_bytes(r.metrics.ep_internode_bytes) << " to other nodes; " << expert_load(prog.training) << "\n";
    }
    if (communicator) {
      std::cout << "collectives ZeRO-3's parameter gathers and gradient reductions "
                << (communicator->shared ? "share one NCCL communicator and take turns: " : "have a communicator each, side by side: ")
                << communicator->why
                << (prog.training.shared_reduce_communicator ? "\n"
                                                             : " (framework.reduce_communicator in the training file can say otherwise)\n");
    }
    if (prog.training.dtype == spec::Dtype::kFp8) {
      std::cout << "precision   fp8: the block GEMMs in FP8 at " << text::fmt("%.1f", c.gpu.peak_flops.at(spec::Dtype::kFp8) / 1e12)
                << " TFLOP/s peak, the head, attention and every other kernel in bf16; MFU is against the bf16 peak, "
                << text::fmt("%.1f", c.gpu.peak_flops.at(spec::Dtype::kBf16) / 1e12) << " TFLOP/s\n";
    }
    if (straggler) std::cout << "straggler   " << sim::straggler_text(*straggler) << "\n";
    if (!bars.empty()) std::cout << "uncertainty " << sim::error_bars_text(bars) << "\n";
    if (model_error) std::cout << "validation  " << sim::model_error_text(*model_error) << "\n";
    std::cout << sim::run_cost_text(cost, cost_range ? &cost_low : nullptr, cost_range ? &cost_high : nullptr);
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
  add_cost_options(app, args->cost_args);
  // The config's train_batch_size and fp16/bf16 sections say these; --seq-len it does not.
  args->training_args.global_batch_option->excludes(deepspeed);
  args->training_args.dtype_option->excludes(deepspeed);
  add_set_option(app, args->set);
  app->add_option("--nodes", args->nodes, "number of nodes (default: the cluster file's)")->check(positive_int(spec::limits::kGpus));
  app->add_option("--gpus", args->gpus, "GPUs in use, filling nodes in order (default: all of the cluster's)")
      ->check(positive_int(spec::limits::kGpus));
  app->add_flag("--full", args->full, "simulate every rank instead of one data-parallel replica");
  app->add_option("--trace", args->trace, "write the simulated trace (Chrome trace JSON, opens in Perfetto)")->check(writable_file());
  app->add_option("--png", args->png,
                  "draw the simulated step's timeline (a row per rank and lane, a bar per instruction) into this PNG "
                  "(needs Qt)")
      ->check(writable_file());
  app->add_flag("--json", args->json, "print one JSON document");
  app->add_flag("--no-error-bars", args->no_error_bars,
                "skip the step-time range from the cluster profile's parameter uncertainties (two more "
                "simulations per uncertain parameter)");
  return {app, [args]() { return run_simulate(*args); }};
}

}  // namespace stagecraft::cli
