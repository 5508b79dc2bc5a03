// stagecraft search --model M --cluster C --training T [--nodes N | --gpus G] [--top K]
//                   [--db results.sqlite [--resume]] [--deepspeed ds_config.json] [--json]
//                   [--threads N] [axis limits: --tp 8 --pp 4,8 --zero 1,3 --schedule 1f1b …]
// The fastest plans that fit, why the best one wins and what limits it (planner/search.hpp).
// Under `mpirun -np N` the ranks share the work; rank 0 prints and writes the store.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/spec/overrides.hpp"
#include "planner/deepspeed.hpp"
#include "planner/explain.hpp"
#include "planner/pool.hpp"
#include "planner/report.hpp"
#include "planner/search.hpp"
#include "planner/shard.hpp"
#include "planner/sizes.hpp"
#include "sim/model_error.hpp"
#include "sim/run_cost.hpp"

namespace stagecraft::cli {

namespace {

struct SearchArgs {
  std::string model, cluster, training, db, deepspeed, objective = "time";
  std::vector<int64_t> nodes, gpus;
  int64_t top = 10;
  bool no_error_bars = false;
  int threads = 0;
  bool json = false, resume = false, no_progress = false;
  double pareto_window = 0.1;
  std::vector<int64_t> tp, pp, micro_batch, virtual_stages, cp, ep, etp;
  std::vector<std::string> cp_comm;
  std::vector<std::string> moe_dispatcher;
  int64_t max_micro_batch = 0;
  std::vector<int> zero;
  std::vector<std::string> schedule, recompute, sequence_parallel, offload, split, overlap_comm, zero_variant;
  std::vector<double> reduce_bucket, prefetch_bucket, max_live;
  TrainingArgs training_args;
  CostArgs cost_args;
  std::vector<std::string> set;
};

template <typename T>
std::vector<T> parse_enum(const std::vector<std::string>& values, const std::string& option,
                          const std::vector<std::pair<std::string, T>>& names) {
  std::vector<T> out;
  for (const std::string& v : values) {
    bool found = false;
    for (const auto& [name, value] : names) {
      if (v == name) {
        out.push_back(value);
        found = true;
      }
    }
    if (!found) {
      std::string allowed;
      for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n.first;
      throw spec::SpecError(option, "", "expected one of " + allowed + ", got \"" + v + "\"");
    }
  }
  return out;
}

// (name, value) of every value of a spec enum, by its to_string.
template <typename E, std::size_t N>
std::vector<std::pair<std::string, E>> names_of(const E (&values)[N]) {
  std::vector<std::pair<std::string, E>> out;
  for (E v : values) out.emplace_back(spec::to_string(v), v);
  return out;
}

std::vector<int64_t> elems(const std::vector<double>& values, const std::string& option) {
  std::vector<int64_t> out;
  for (double v : values) {
    if (!(v >= 1) || v != static_cast<double>(static_cast<int64_t>(v))) {
      throw spec::SpecError(option, "", "expected a whole number of elements >= 1, got " + std::to_string(v));
    }
    out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

planner::SpaceLimits limits_of(const SearchArgs& a) {
  planner::SpaceLimits l;
  l.tp = a.tp;
  l.pp = a.pp;
  l.micro_batch = a.micro_batch;
  l.max_micro_batch = a.max_micro_batch;
  l.virtual_stages = a.virtual_stages;
  l.cp = a.cp;
  l.ep = a.ep;
  l.etp = a.etp;
  l.cp_comm = parse_enum(a.cp_comm, "--cp-comm", names_of(spec::kCpComms));
  l.moe_dispatcher = parse_enum(a.moe_dispatcher, "--moe-dispatcher", names_of(spec::kMoeDispatchers));
  l.zero = a.zero;
  for (int z : a.zero) {
    if (z < 0 || z > 3) throw spec::SpecError("--zero", "", "expected ZeRO stages 0, 1, 2 or 3, got " + std::to_string(z));
  }
  l.schedules = parse_enum(a.schedule, "--schedule", names_of(spec::kSchedules));
  l.recompute = parse_enum(a.recompute, "--recompute", names_of(spec::kRecomputes));
  l.sequence_parallel = parse_enum<int>(a.sequence_parallel, "--sequence-parallel", {{"off", 0}, {"on", 1}});
  l.offload = parse_enum(a.offload, "--offload", names_of(spec::kOffloads));
  std::vector<std::pair<std::string, planner::ZeroVariant>> variants;
  for (planner::ZeroVariant v : planner::kZeroVariants) variants.emplace_back(planner::to_string(v), v);
  l.zero_variants = parse_enum(a.zero_variant, "--zero-variant", variants);
  l.split = parse_enum<planner::Split>(a.split, "--split",
                                       {{"balanced", planner::Split::kBalanced}, {"uniform", planner::Split::kUniform}});
  if (!a.overlap_comm.empty()) l.overlap_comm = parse_enum<int>(a.overlap_comm, "--overlap-comm", {{"false", 0}, {"true", 1}});
  l.reduce_bucket = elems(a.reduce_bucket, "--reduce-bucket");
  l.prefetch_bucket = elems(a.prefetch_bucket, "--prefetch-bucket");
  l.max_live_parameters = elems(a.max_live, "--max-live-parameters");
  return l;
}

std::string progress_line(const planner::Progress& p) {
  const int64_t total = p.evaluated + p.remaining;
  const int width = 24;
  const int filled = total > 0 ? static_cast<int>(width * p.evaluated / total) : 0;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  char line[200];
  std::snprintf(line, sizeof line, "\r[%s] %lld/%lld plans  %.1f/s  ETA %.0fs  best %.3f s   ", bar.c_str(),
                static_cast<long long>(p.evaluated), static_cast<long long>(total), p.rate, p.eta_s, p.best_step_time_s);
  return line;
}

int default_threads() {
  int threads = planner::hardware_threads();
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); local && std::atoi(local) > 0) {
    threads = std::max(1, threads / std::atoi(local));
  }
  return threads;
}

void print_answer(const planner::SearchResult& r, const planner::Space& space, const std::optional<planner::Baseline>& b,
                  const std::vector<planner::RowErrorBars>& bars) {
  std::printf("Search: %s on %lld GPUs of %s, global batch %lld\n%s\n\n", space.model().name.c_str(),
              static_cast<long long>(space.gpus()), space.cluster().name.c_str(),
              static_cast<long long>(space.training().global_batch), planner::format_counts(r).c_str());
  if (r.top.empty()) return;
  std::printf("Top %zu plans (fastest first, all fit):\n%s\n", r.top.size(), planner::format_table(r.top).c_str());
  std::printf("Pareto front, step time vs peak memory:\n%s\n", planner::format_table(r.pareto).c_str());
  std::printf("Best plan: %s\n", r.top.front().key.c_str());
  for (const std::string& line : planner::explain(r).lines()) std::printf("%s\n", line.c_str());
  for (const std::string& line : planner::expert_lines(space, r.top.front())) std::printf("%s\n", line.c_str());
  const std::vector<std::string> uncertainty = planner::error_bar_lines(r.top, bars);
  if (!uncertainty.empty()) std::printf("\n");
  for (const std::string& line : uncertainty) std::printf("%s\n", line.c_str());
  if (const std::optional<sim::ValidationRecord> record = sim::bundled_validation_record()) {
    std::printf("\n");
    for (const std::string& line : planner::model_error_lines(r.top, space.model(), space.training().framework, *record, space.cluster().gpu.name)) {
      std::printf("%s\n", line.c_str());
    }
  }
  if (b) std::printf("\n%s\n", planner::compare_with_baseline(r, *b).c_str());
}

// One GPU count a search covers: the cluster sized for it, its space, what the search found.
struct SizeRun {
  spec::Cluster cluster;
  int64_t gpus = 0;
  std::optional<planner::Space> space;
  planner::SearchResult result;
  std::vector<planner::RowErrorBars> bars;
  planner::SizeCost cost;                 // the best plan's, when one fits
  std::optional<sim::RunCost> low, high;  // at the ends of its 1σ step range, with a token budget
};

// The sizes to search: several --nodes, or several --gpus (on the nodes --nodes or the file gives).
std::vector<std::pair<int64_t, int64_t>> sizes_of(const SearchArgs& a, const spec::Cluster& c) {
  if (a.nodes.size() > 1 && !a.gpus.empty()) {
    throw spec::SpecError("--gpus", "", "expected several --nodes or --gpus, not several --nodes with --gpus");
  }
  std::vector<std::pair<int64_t, int64_t>> sizes;   // (nodes, gpus)
  if (a.gpus.empty()) {
    for (int64_t n : a.nodes.empty() ? std::vector<int64_t>{c.nodes} : a.nodes) sizes.emplace_back(n, n * c.gpus_per_node);
  } else {
    const int64_t nodes = a.nodes.empty() ? c.nodes : a.nodes.front();
    for (int64_t g : a.gpus) {
      // Enough nodes for the largest size when several are given and --nodes is not.
      const int64_t n = a.nodes.empty() && a.gpus.size() > 1 ? std::max(nodes, (g + c.gpus_per_node - 1) / c.gpus_per_node) : nodes;
      sizes.emplace_back(n, g);
    }
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (sizes[j].second == sizes[i].second) {
        throw spec::SpecError(a.gpus.size() > 1 ? "--gpus" : "--nodes", "", "expected different sizes, got " +
                                                                               std::to_string(sizes[i].second) + " GPUs twice");
      }
    }
  }
  return sizes;
}

nlohmann::json search_json(const SizeRun& s, const std::optional<planner::Baseline>& baseline, double tokens_per_step,
                           const std::optional<double>& budget) {
  nlohmann::json j = planner::to_json(s.result, baseline);
  const std::optional<sim::ValidationRecord> record = sim::bundled_validation_record();
  for (std::size_t i = 0; i < s.result.top.size() && i < j["plans"].size(); ++i) {
    const planner::Evaluated& e = s.result.top[i];
    j["plans"][i]["cost"] = sim::to_json(sim::run_cost(s.cluster, s.gpus, tokens_per_step, e.metrics.step_time_s, budget,
                                                       sim::checkpoint_bytes(s.space->model(), s.space->training().dtype)));
    if (record) j["plans"][i]["model_error"] = sim::to_json(sim::model_error(*record, s.space->training().framework, e.plan.zero.stage,
                                                                                    s.cluster.gpu.name, spec::validation_class(e.plan, s.space->model())));
  }
  for (const planner::RowErrorBars& b : s.bars) {
    if (b.bars.empty() || b.index >= j["plans"].size()) continue;
    nlohmann::json& plan = j["plans"][b.index];
    plan["uncertainty"] = sim::to_json(b.bars);
    if (b.row > 1) plan["uncertainty"]["distinguishable_from_best"] = sim::distinguishable(s.bars.front().bars, b.bars);
  }
  if (s.cost && s.low && s.high && j["plans"].size() > 0 && j["plans"][0]["cost"].contains("train")) {
    j["plans"][0]["cost"]["train"]["seconds_range"] = {s.low->train_seconds, s.high->train_seconds};
    if (s.cost->train_cost) j["plans"][0]["cost"]["train"]["cost_range"] = {*s.low->train_cost, *s.high->train_cost};
  }
  return j;
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? " " + s : std::string(width - s.size(), ' ') + s;
}

// The table of sizes: each one's best plan, speed and cost, and the front.
void print_sizes(const std::vector<SizeRun>& runs, const std::vector<bool>& front, std::size_t chosen,
                 planner::Objective objective) {
  const sim::RunCost* priced = nullptr;
  for (const SizeRun& s : runs) {
    if (s.cost && s.cost->cost_per_step) priced = &*s.cost;
  }
  const bool budget = !runs.empty() && std::any_of(runs.begin(), runs.end(), [](const SizeRun& s) { return s.cost && s.cost->tokens; });
  std::printf("Sizes (the fastest plan that fits at each; * on the time-cost front, > chosen by %s):\n",
              planner::to_string(objective));
  std::string header = "     GPUs   step time    tokens/s     MFU  GPU-h/M tok";
  if (priced) header += "  " + pad_left(priced->currency + "/M tok", 11);
  const bool failures = std::any_of(runs.begin(), runs.end(), [](const SizeRun& s) { return s.cost && s.cost->goodput; });
  if (budget) header += "  time to train    GPU-hours" + std::string(priced ? "           cost" : "");
  if (failures) header += "  with failures  goodput";
  std::printf("%s  plan\n", header.c_str());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const SizeRun& s = runs[i];
    std::string row = std::string(i == chosen ? ">" : " ") + (front[i] ? "*" : " ") + pad_left(std::to_string(s.gpus), 7);
    if (!s.cost) {
      std::printf("%s  no plan fits: %s\n", row.c_str(), s.result.reason.c_str());
      continue;
    }
    const planner::Evaluated& best = s.result.top.front();
    row += pad_left(text::fmt("%.4g s", s.cost->step_time_s), 12) + pad_left(text::short_rate(best.metrics.tokens_per_s), 12) +
           pad_left(text::fmt("%.1f%%", best.metrics.mfu * 100), 8) +
           pad_left(text::fmt("%.4g", s.cost->gpu_hours_per_million_tokens), 13);
    if (priced) row += pad_left(s.cost->cost_per_million_tokens ? text::fmt("%.4g", *s.cost->cost_per_million_tokens) : "-", 13);
    if (budget) {
      row += pad_left(sim::duration_text(s.cost->train_seconds), 15) +
             pad_left(with_commas(static_cast<int64_t>(std::llround(s.cost->train_gpu_hours))), 13);
      if (priced) row += pad_left(s.cost->train_cost ? sim::money_text(*s.cost->train_cost, s.cost->currency) : "-", 15);
    }
    if (failures) {
      row += s.cost->goodput ? pad_left(sim::duration_text(s.cost->goodput->wall_s), 15) +
                                   pad_left(sim::goodput_text(s.cost->goodput->goodput), 9)
                             : pad_left("-", 15) + pad_left("-", 9);
    }
    std::printf("%s  %s\n", row.c_str(), best.key.c_str());
  }
  std::printf("\n");
}

int run_search(const SearchArgs& a) {
  using spec::ConfigKind;
  std::unique_ptr<planner::Shard> shard = planner::make_shard();
  const bool root = shard->rank() == 0;
  if (root && planner::launched_under_mpi() && !planner::built_with_mpi()) {
    std::cerr << "stagecraft: warning: launched under MPI but built without it (STAGECRAFT_WITH_MPI=OFF); every rank "
                 "searches alone\n";
  }
  const std::optional<planner::Objective> objective = planner::parse_objective(a.objective);
  if (!objective) throw spec::SpecError("--objective", "", "expected time, cost or goodput, got \"" + a.objective + "\"");
  const spec::Model m = load_model_arg(a.model);
  const std::vector<spec::Override> overrides = spec::parse_overrides(a.set);
  spec::Cluster c = spec::load_cluster(spec::resolve_config(ConfigKind::kCluster, a.cluster), overrides);
  apply_price(c, a.cost_args);
  const std::vector<std::pair<int64_t, int64_t>> sizes = sizes_of(a, c);
  if (sizes.size() > 1 && !a.deepspeed.empty()) {
    throw spec::SpecError("--deepspeed", "", "a DeepSpeed config is compared at one size; give one --nodes or --gpus");
  }
  std::optional<planner::DeepSpeedImport> ds;
  if (!a.deepspeed.empty()) ds = planner::load_deepspeed(a.deepspeed, sizes.front().second, m.layers, hf_args(m), c.gpus_per_node);
  if (a.training.empty() && !ds) throw spec::SpecError("--training", "", "expected a training file or bundled name (or --deepspeed)");
  spec::Training t = with_training_args(
      a.training.empty() ? spec::with_overrides(ds->training, overrides)
                         : spec::load_training(spec::resolve_config(ConfigKind::kTraining, a.training), overrides),
      a.training_args);
  warn_training_length(m, &t);
  if (ds && ds->training.global_batch != t.global_batch) {
    throw spec::SpecError(a.deepspeed, "/train_batch_size",
                          "expected the global batch of " + t.label() + " (" + std::to_string(t.global_batch) + "), got " +
                              std::to_string(ds->training.global_batch));
  }
  const std::optional<double> budget = token_budget(a.cost_args);
  if (*objective == planner::Objective::kGoodput && (!budget || !c.reliability.known())) {
    throw spec::SpecError("--objective", "", std::string("goodput needs ") +
                                                 (!budget ? "a token budget (--tokens 15T)"
                                                          : "a cluster profile with a \"reliability\" section (" + c.name +
                                                                " has none; h100-roce-400g-16k has one)"));
  }

  std::vector<SizeRun> runs(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    runs[i].cluster = c;
    runs[i].cluster.nodes = sizes[i].first;
    runs[i].gpus = sizes[i].second;
    runs[i].space.emplace(m, runs[i].cluster, t, runs[i].gpus, limits_of(a));
  }
  const double tokens_per_step =
      static_cast<double>(runs.front().space->model().seq_len) * static_cast<double>(t.global_batch);

  std::optional<planner::Baseline> baseline;
  if (ds) {
    const planner::Space& space = *runs.front().space;
    spec::validate_plan(ds->plan, m, t, runs.front().gpus);
    baseline = planner::Baseline{"DeepSpeed config " + a.deepspeed, ds->plan, planner::simulate_plan(space, ds->plan)};
    if (root && !a.json) {
      for (const std::string& d : ds->defaults) std::cerr << "stagecraft: " << a.deepspeed << ": " << d << "\n";
    }
    if (root) {
      for (const std::string& w : ds->warnings) std::cerr << "stagecraft: warning: " << a.deepspeed << ": " << w << "\n";
    }
  }

  planner::SearchOptions o;
  o.top_k = a.top;
  o.threads = a.threads > 0 ? a.threads : default_threads();
  o.pareto_window = a.pareto_window;
  o.db = a.db;
  o.resume = a.resume;
  o.version = STAGECRAFT_VERSION;
  o.shard = shard.get();
  install_interrupt_handler();
  o.cancel = &interrupted();
  const bool bar = root && !a.no_progress && isatty(STDERR_FILENO);
  if (bar) o.on_progress = [](const planner::Progress& p) { std::cerr << progress_line(p) << std::flush; };
  bool any_plan = false;
  for (SizeRun& s : runs) s.result.reason = "not searched: interrupted before this size";
  for (SizeRun& s : runs) {
    if (bar && runs.size() > 1) std::cerr << "search on " << s.gpus << " GPUs\n";
    s.result = planner::search(*s.space, o);
    if (bar) std::cerr << "\n";
    if (!root) continue;
    for (const std::string& w : s.result.warnings) std::cerr << "stagecraft: warning: " << w << "\n";
    if (s.result.interrupted) std::cerr << "stagecraft: interrupted; reporting the plans found so far (exit status 128 + the signal)\n";
    if (a.resume && !s.result.resumed) {
      std::cerr << "stagecraft: --resume: " << a.db << " holds no earlier search with these inputs on " << s.gpus
                << " GPUs; this was a new one\n";
    }
    s.bars = a.no_error_bars ? std::vector<planner::RowErrorBars>{} : planner::top_error_bars(*s.space, s.result.top, 5);
    if (!s.result.top.empty()) {
      any_plan = true;
      const double checkpoint = sim::checkpoint_bytes(s.space->model(), s.space->training().dtype);
      s.cost = sim::run_cost(s.cluster, s.gpus, tokens_per_step, s.result.top.front().metrics.step_time_s, budget, checkpoint);
      if (budget && !s.bars.empty() && !s.bars.front().bars.empty() && s.bars.front().index == 0) {
        s.low = sim::run_cost(s.cluster, s.gpus, tokens_per_step, s.bars.front().bars.step_low_s, budget, checkpoint);
        s.high = sim::run_cost(s.cluster, s.gpus, tokens_per_step, s.bars.front().bars.step_high_s, budget, checkpoint);
      }
    }
    if (s.result.interrupted) break;
  }
  // Every rank exits as rank 0 does: its answer decides (the others hold no results), and an
  // interrupted search exits 128 + the signal on every rank, whichever rank the signal reached.
  const bool found = shard->any(any_plan);
  const bool cut = std::any_of(runs.begin(), runs.end(), [](const SizeRun& s) { return s.result.interrupted; });
  int cut_code = 0;
  if (cut) {
    for (const std::string& code : shard->allgather(std::to_string(interrupted_exit_code()))) {
      cut_code = std::max(cut_code, std::stoi(code));
    }
    if (cut_code == 0) cut_code = 128 + SIGINT;  // stopped by a peer's signal before this rank's arrived
  }
  if (!root) return cut ? cut_code : found ? kOk : kImpossible;
  std::vector<planner::SizeCost> costs;
  for (const SizeRun& s : runs) costs.push_back(s.cost);
  const std::vector<bool> front = planner::time_cost_front(costs);
  const std::size_t chosen = planner::choose_size(costs, *objective).value_or(0);
  const SizeRun& pick = runs[chosen];
  if (a.json) {
    if (runs.size() == 1) {
      nlohmann::json j = search_json(pick, baseline, tokens_per_step, budget);
      j["objective"] = planner::to_string(*objective);
      std::cout << j.dump(2) << "\n";
    } else {
      nlohmann::json j = {{"objective", planner::to_string(*objective)}, {"sizes", nlohmann::json::array()}};
      for (std::size_t i = 0; i < runs.size(); ++i) {
        nlohmann::json size = search_json(runs[i], baseline, tokens_per_step, budget);
        size["gpus"] = runs[i].gpus;
        size["nodes"] = runs[i].cluster.nodes;
        size["on_time_cost_front"] = static_cast<bool>(front[i]);
        j["sizes"].push_back(size);
      }
      j["chosen"] = any_plan ? nlohmann::json(runs[chosen].gpus) : nlohmann::json(nullptr);
      std::cout << j.dump(2) << "\n";
    }
  } else {
    if (runs.size() > 1) print_sizes(runs, front, chosen, *objective);
    print_answer(pick.result, *pick.space, baseline, pick.bars);
    if (pick.cost) {
      std::printf("\n%s", sim::run_cost_text(*pick.cost, pick.low ? &*pick.low : nullptr, pick.high ? &*pick.high : nullptr).c_str());
    }
  }
  if (!any_plan) {
    for (const SizeRun& s : runs) {
      std::cerr << "stagecraft: no plan" << (runs.size() > 1 ? " on " + std::to_string(s.gpus) + " GPUs" : std::string())
                << ": " << s.result.reason << "\n";
    }
    return cut ? cut_code : kImpossible;
  }
  if (!a.db.empty() && !a.json) {
    std::printf("\nResults store: %s (search %lld%s)\n", a.db.c_str(), static_cast<long long>(pick.result.search_id),
                pick.result.resumed ? ", resumed" : "");
  }
  return cut ? cut_code : kOk;
}

}  // namespace

Subcommand add_search(CLI::App& root) {
  auto a = std::make_shared<SearchArgs>();
  CLI::App* app = root.add_subcommand("search", "Find the fastest plans that fit, and say why the best one wins");
  app->add_option("--model", a->model, "model file or bundled name")->required();
  app->add_option("--cluster", a->cluster, "cluster file or bundled name")->required();
  app->add_option("--training", a->training, "training file or bundled name (default with --deepspeed: its batch and precision)");
  add_training_options(app, a->training_args);
  add_set_option(app, a->set);
  app->add_option("--nodes", a->nodes,
                  "number of nodes (default: the cluster file's); several, e.g. 4,8,16, search each size and compare "
                  "their time and cost")
      ->delimiter(',')
      ->check(positive_int(spec::limits::kGpus));
  app->add_option("--gpus", a->gpus,
                  "GPUs in use, filling nodes in order (default: all of the cluster's); several, e.g. 32,64, search each")
      ->delimiter(',')
      ->check(positive_int(spec::limits::kGpus));
  app->add_option("--objective", a->objective,
                  "with several sizes, the one to report in full: time (fastest), cost (fewest GPU-hours per token) or "
                  "goodput (least time to train with failures, checkpoints and restarts; needs --tokens and a cluster "
                  "with a reliability section)")
      ->check(CLI::IsMember({"time", "cost", "goodput"}));
  add_cost_options(app, a->cost_args);
  app->add_option("--top", a->top, "how many plans to report (default 10)")->check(positive_int(int64_t{1} << 20));
  app->add_flag("--no-error-bars", a->no_error_bars,
                "skip the step-time ranges of the top 5 plans from the cluster profile's parameter uncertainties");
  CLI::Option* db = app->add_option("--db", a->db, "record the search and every simulated plan in this SQLite file")
                        ->check(writable_file());
  app->add_flag("--resume", a->resume, "with --db: continue the latest search with the same inputs, reusing its plans")
      ->needs(db);
  app->add_option("--deepspeed", a->deepspeed, "a DeepSpeed ds_config.json to compare the best plan with");
  app->add_option("--threads", a->threads, "worker threads (default: all cores)")->check(positive_int(spec::limits::kThreads));
  app->add_flag("--json", a->json, "print one JSON document (SCHEMAS.md search --json)");
  app->add_flag("--no-progress", a->no_progress, "no progress bar on stderr");
  app->add_option("--pareto-window", a->pareto_window,
                  "the Pareto front is exact up to (1 + W) x the best step time (default 0.1)")
      ->check(non_negative_finite());
  CLI::App* lim = app;
  lim->add_option("--tp", a->tp, "tensor-parallel sizes to consider, e.g. 8 or 4,8")->delimiter(',')->check(positive_int(spec::limits::kGpus));
  lim->add_option("--pp", a->pp, "pipeline sizes to consider")->delimiter(',')->check(positive_int(spec::limits::kGpus));
  lim->add_option("--micro-batch", a->micro_batch, "micro-batch sizes to consider")->delimiter(',')->check(positive_int(spec::limits::kGlobalBatch));
  lim->add_option("--max-micro-batch", a->max_micro_batch, "largest micro-batch size to consider")->check(positive_int(spec::limits::kGlobalBatch));
  lim->add_option("--virtual-stages", a->virtual_stages, "virtual stages (interleaved chunks) to consider; 1 = not interleaved")
      ->delimiter(',')
      ->check(positive_int(spec::limits::kLayers));
  lim->add_option("--cp", a->cp,
                  "context-parallel sizes to consider (default: those whose causal chunks, seq_len / 2cp, hold at least " +
                      std::to_string(planner::kMinCpChunk) + " tokens, where the framework runs context parallelism)")
      ->delimiter(',')
      ->check(positive_int(spec::limits::kGpus));
  lim->add_option("--cp-comm", a->cp_comm, "context-parallel comm types: p2p, all_gather, a2a")->delimiter(',');
  lim->add_option("--ep", a->ep,
                  "expert-parallel sizes to consider for a mixture-of-experts model (default: every divisor of the experts "
                  "that divides tp × cp × dp)")
      ->delimiter(',')
      ->check(positive_int(spec::limits::kGpus));
  lim->add_option("--etp", a->etp,
                  "expert tensor-parallel sizes to consider for a mixture-of-experts model (default: 1 and each divisor "
                  "of tp that divides the experts' width, Megatron-Core only)")
      ->delimiter(',')
      ->check(positive_int(spec::limits::kGpus));
  lim->add_option("--moe-dispatcher", a->moe_dispatcher,
                  "token dispatchers to consider for a mixture-of-experts model: alltoall, allgather (default: both where "
                  "etp x ep > 1, Megatron-Core only)")
      ->delimiter(',');
  lim->add_option("--zero", a->zero, "ZeRO stages to consider, e.g. 1 or 1,3")->delimiter(',');
  lim->add_option("--schedule", a->schedule, "gpipe, 1f1b, interleaved, zb-h1")->delimiter(',');
  lim->add_option("--recompute", a->recompute, "none, selective, full")->delimiter(',');
  lim->add_option("--sequence-parallel", a->sequence_parallel, "off, on")->delimiter(',');
  lim->add_option("--offload", a->offload, "optimizer offload: none, cpu")->delimiter(',');
  lim->add_option("--zero-variant", a->zero_variant,
                  "ZeRO across nodes: plain, hpz, zeropp (hpZ + qwZ + qgZ), shard (MiCS, hybrid sharding, optimizer "
                  "instances), where the framework runs it")
      ->delimiter(',');
  lim->add_option("--split", a->split, "stage split: balanced, uniform")->delimiter(',');
  lim->add_option("--overlap-comm", a->overlap_comm, "ZeRO overlap_comm: true, false (default true)")->delimiter(',');
  lim->add_option("--reduce-bucket", a->reduce_bucket, "reduce_bucket_size grid in elements (default 1e6,1e7,1e8,1e9)")
      ->delimiter(',');
  lim->add_option("--prefetch-bucket", a->prefetch_bucket, "stage3_prefetch_bucket_size grid (default 1e6,1e7,1e8,1e9)")
      ->delimiter(',');
  lim->add_option("--max-live-parameters", a->max_live, "stage3_max_live_parameters grid (default 1e6,1e7,1e8,1e9)")
      ->delimiter(',');
  return {app, [a]() { return run_search(*a); }};
}

}  // namespace stagecraft::cli
