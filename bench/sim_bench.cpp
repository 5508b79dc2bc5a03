// Simulation speed: GPT-3 175B on 1024 A100s (tp 8, pp 8, dp 16), 64 micro-batches, 1F1B —
// one simulation as the planner runs it (Program already lowered), and the contention-free bound
// the planner computes before it. Targets: ZeRO-1 <= 5 ms,
// ZeRO-3 with per-layer buckets <= 20 ms (per-sublayer buckets shown too), memory <= 64 MiB
// (peak_rss_MiB: the process's high-water mark, which includes the Program and the benchmark).
#include <benchmark/benchmark.h>

#include <string>

#include "core/program/lower.hpp"
#include "bench/peak_rss.hpp"
#include "core/spec/bundled.hpp"
#include "core/thread/allocator.hpp"
#include "sim/chains.hpp"
#include "sim/simulator.hpp"
#include "sim/uncertainty.hpp"

namespace {

using namespace stagecraft;

using bench::peak_rss_mib;

void run(benchmark::State& state, nlohmann::json zero, bool contention_free = false) {
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "gpt3-175b"));
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "dgx-a100-80g-hdr"));
  c.nodes = 128;
  const spec::Plan p = spec::plan_from_json({{"tp", 8}, {"pp", 8}, {"dp", 16}, {"micro_batch", 1}, {"micro_batches", 64},
                                             {"schedule", "1f1b"}, {"sequence_parallel", true},
                                             {"recompute", "selective"}, {"zero", zero}},
                                            "bench");
  const spec::Training t = spec::training_from_json({{"global_batch", 64 * 16}, {"dtype", "fp16"}}, "bench");
  const program::Program prog = program::lower(m, t, p);
  sim::SimResult r;
  double bound = 0;
  for (auto _ : state) {
    if (contention_free) {
      bound = sim::contention_free_step_s(prog, c);
      benchmark::DoNotOptimize(bound);
    } else {
      r = sim::simulate(prog, c);
      benchmark::DoNotOptimize(r);
    }
  }
  state.counters["instructions"] = static_cast<double>(prog.instruction_count());
  if (!contention_free) state.counters["events"] = static_cast<double>(r.metrics.events);
  state.counters["step_s"] = contention_free ? bound : r.metrics.step_time_s;
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

void BM_Simulate175B_1F1B_Zero1(benchmark::State& state) { run(state, {{"stage", 1}}); }
// Per-layer buckets: a 175B layer holds 4h² = 604M attention and 8h² = 1.21B MLP parameters
// (h = 12288), 75.5M + 151M = 226.5M per tp rank, so buckets of 2.5e8 elements take one whole
// layer each (12 per stage).
void BM_Simulate175B_1F1B_Zero3_PerLayer(benchmark::State& state) {
  run(state, {{"stage", 3}, {"prefetch_bucket", 250'000'000}, {"reduce_bucket", 250'000'000}});
}
// Per-sublayer buckets, twice as many: with DeepSpeed's default bucket sizes (5e7 elements) the
// attention (75.5M per tp rank) and the MLP (151M) are each a bucket of their own (24 per stage).
void BM_Simulate175B_1F1B_Zero3_PerSublayer(benchmark::State& state) {
  run(state, {{"stage", 3}, {"prefetch_bucket", 50'000'000}, {"reduce_bucket", 50'000'000}});
}

// The planner's bound after lowering: the same Programs on a contention-free network, step time
// only (sim::contention_free_step_s).
void BM_ContentionFree175B_1F1B_Zero1(benchmark::State& state) { run(state, {{"stage", 1}}, true); }
void BM_ContentionFree175B_1F1B_Zero3_PerSublayer(benchmark::State& state) {
  run(state, {{"stage", 3}, {"prefetch_bucket", 50'000'000}, {"reduce_bucket", 50'000'000}}, true);
}


// One evaluation of the 175B/1024 search (planner/search.cpp lower_and_simulate) piece by piece,
// on its best plan (tp4 pp4 dp64 mb3x8 interleaved v12, ZeRO-3 with hpZ over 2 GPUs, qwZ, qgZ,
// rb=1e9 pf=1e6 live=1e9, global batch 1536) and on its plain ZeRO-3 twin, the kind the search
// lowers most and rules out by the contention-free time: state.range(0) 0 lowers, 1 computes the
// contention-free step time, 2 simulates, 3 lowers the last stage's list alone and computes its
// bound (sim::contention_free_stage_s, the search's first check); state.range(1) 1 is the ZeRO++
// plan, 0 the plain one.
void BM_SearchPlan175B(benchmark::State& state) {
  thread::keep_freed_memory();   // as planner::search sets it
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "gpt3-175b"));
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "dgx-a100-80g-hdr"));
  c.nodes = 128;
  nlohmann::json zero = {{"stage", 3}, {"reduce_bucket", 1'000'000'000}, {"prefetch_bucket", 1'000'000},
                         {"max_live_parameters", 1'000'000'000}};
  if (state.range(1) == 1) {
    zero["hpz_group"] = 2;
    zero["local_group"] = 2;
    zero["quantized_weights"] = {{"bits", 8}, {"block", 8000}};
    zero["quantized_gradients"] = {{"bits", 4}};
  }
  const spec::Plan p = spec::plan_from_json({{"tp", 4}, {"pp", 4}, {"dp", 64}, {"micro_batch", 3}, {"micro_batches", 8},
                                             {"schedule", "interleaved"}, {"virtual_stages", 12}, {"stage_layers", {24, 24, 24, 24}},
                                             {"sequence_parallel", true}, {"zero", zero}},
                                            "bench");
  const spec::Training t = spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, "gpt3-175b-1536"));
  const program::Program prog = program::lower(m, t, p);
  double step = 0;
  for (auto _ : state) {
    if (state.range(0) == 0) {
      program::Program lowered = program::lower(m, t, p);
      benchmark::DoNotOptimize(lowered);
    } else if (state.range(0) == 3) {
      program::LowerOptions lo;
      lo.only_stage = static_cast<int32_t>(p.pp - 1);
      const program::Program one = program::lower(m, t, p, lo);
      step = sim::contention_free_stage_s(one, c, INFINITY);
    } else if (state.range(0) == 1) {
      step = sim::contention_free_step_s(prog, c);
    } else {
      step = sim::simulate(prog, c).metrics.step_time_s;
    }
    benchmark::DoNotOptimize(step);
  }
  state.counters["instructions"] = static_cast<double>(prog.instruction_count());
  if (state.range(0) > 0) state.counters["step_s"] = step;
}

// The command line's `simulate` of configs/plans/gpt3-175b-1024gpu (96 micro-batches) piece by
// piece: lowering, the central simulation, one step-time-only simulation as error_bars runs each
// perturbed one, and the error bars (two such simulations per uncertain parameter that can move
// this plan, over the cores). The whole command, with its start-up and output, is timed by
// `stagecraft_bench_startup --simulate` (bench/startup_bench.cpp): its goal is 50 ms.
struct Cli175B {
  spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "gpt3-175b"));
  spec::Cluster c = [] {
    spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "dgx-a100-80g-hdr"));
    c.nodes = 128;
    return c;
  }();
  spec::Training t = spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, "gpt3-175b-1536"));
  spec::Plan p = spec::load_plan(spec::resolve_config(spec::ConfigKind::kPlan, "gpt3-175b-1024gpu"));
};

// argument: LowerOptions::threads (the command line uses the machine's cores)
void BM_Cli175B_Lower(benchmark::State& state) {
  const Cli175B x;
  program::LowerOptions o;
  o.threads = static_cast<int>(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(program::lower(x.m, x.t, x.p, o));
}
void BM_Cli175B_Simulate(benchmark::State& state) {
  const Cli175B x;
  const program::Program prog = program::lower(x.m, x.t, x.p);
  for (auto _ : state) benchmark::DoNotOptimize(sim::simulate(prog, x.c));
}
void BM_Cli175B_SimulateStepTimeOnly(benchmark::State& state) {
  const Cli175B x;
  const program::Program prog = program::lower(x.m, x.t, x.p);
  sim::SimOptions o;
  o.step_time_only = true;
  for (auto _ : state) benchmark::DoNotOptimize(sim::simulate(prog, x.c, o));
}
// the same with the Program's chains given (found once, as the error bars do), and finding them
void BM_Cli175B_SimulateStepTimeOnlyChained(benchmark::State& state) {
  const Cli175B x;
  const program::Program prog = program::lower(x.m, x.t, x.p);
  const std::vector<sim::Chains> chains = sim::find_chains(prog, true);
  sim::SimOptions o;
  o.step_time_only = true;
  o.chains = &chains;
  for (auto _ : state) benchmark::DoNotOptimize(sim::simulate(prog, x.c, o));
}
void BM_Cli175B_FindChains(benchmark::State& state) {
  const Cli175B x;
  const program::Program prog = program::lower(x.m, x.t, x.p);
  for (auto _ : state) benchmark::DoNotOptimize(sim::find_chains(prog, true));
}
void BM_Cli175B_ErrorBars(benchmark::State& state) {
  const Cli175B x;
  const program::Program prog = program::lower(x.m, x.t, x.p);
  const sim::SimResult central = sim::simulate(prog, x.c);
  for (auto _ : state) benchmark::DoNotOptimize(sim::error_bars(prog, x.c, sim::SimOptions{}, central.metrics));
}

}  // namespace

BENCHMARK(BM_SearchPlan175B)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate175B_1F1B_Zero1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate175B_1F1B_Zero3_PerLayer)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate175B_1F1B_Zero3_PerSublayer)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ContentionFree175B_1F1B_Zero1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ContentionFree175B_1F1B_Zero3_PerSublayer)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cli175B_Lower)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Cli175B_Simulate)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cli175B_SimulateStepTimeOnly)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cli175B_SimulateStepTimeOnlyChained)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cli175B_FindChains)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cli175B_ErrorBars)->Unit(benchmark::kMillisecond)->UseRealTime();
