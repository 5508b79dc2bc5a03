// Planner benchmarks: the acceptance numbers of the plan search (docs/planner.md).
//   * Search175B_1024GPU: GPT-3 175B on 128 DGX A100 nodes (1024 GPUs, HDR), global batch 1536, the
//     full space (~3.9 M candidates, the ZeRO variants across nodes included) on 2 threads.
//     Targets: <= 3 s (frontier scale; 24.8-34.6 s measured, docs/planner.md says why), peak memory <= 2 GiB.
//   * Demo13B_64GPU: `stagecraft demo`'s search (GPT-3 13B on 8 DGX H100 nodes, batch 1024).
//   * Search405B_16kGPU: Llama 3.1 405B on 2048 DGX H100 nodes (16,384 GPUs, NDR), every axis with
//     context parallelism, on 2 threads: /0 2048 sequences of 8192 tokens (Llama 3's pre-training),
//     /1 128 of 131072. Target (frontier scale): <= 5 s.
//   * Table1/<row>: Narayanan et al. SC'21 Table 1 (REFERENCE.md): each row's GPU count and batch,
//     fp16, searched twice — tp and pp free, and pinned to the row's published tp and pp (the rest
//     free: "the best micro-batching the planner finds for it"). Quality target: free <= pinned.
// Counters: candidates, evaluated (simulated), pruned, seconds (enumerate_s of them before any
// lowering), peak_rss_MiB (the process's
// high-water mark), step times; the label names the best plan. Run with bench/run.sh, or
//   build/bench/stagecraft_bench_planner --benchmark_filter=Table1
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

#include "bench/peak_rss.hpp"
#include "core/spec/bundled.hpp"
#include "planner/search.hpp"

namespace {

using namespace stagecraft;

using bench::peak_rss_mib;

spec::Cluster cluster(const std::string& name, int64_t nodes) {
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, name));
  c.nodes = nodes;
  return c;
}

planner::SearchResult run_search(benchmark::State& state, const planner::Space& space, int threads) {
  planner::SearchOptions o;
  o.threads = threads;
  planner::SearchResult r;
  for (auto _ : state) {
    r = planner::search(space, o);
    benchmark::DoNotOptimize(r);
  }
  state.counters["candidates"] = static_cast<double>(r.counts.candidates);
  state.counters["evaluated"] = static_cast<double>(r.counts.evaluated);
  state.counters["pruned"] = static_cast<double>(r.counts.pruned());
  state.counters["seconds"] = r.seconds;
  state.counters["enumerate_s"] = r.enumerate_seconds;   // enumeration and the bounds, before any lowering
  state.counters["peak_rss_MiB"] = peak_rss_mib();
  if (!r.top.empty()) {
    state.counters["best_step_s"] = r.top.front().metrics.step_time_s;
    state.SetLabel(r.top.front().key);
  }
  return r;
}

void BM_Search175B_1024GPU(benchmark::State& state) {
  const planner::Space space(spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "gpt3-175b")),
                             cluster("dgx-a100-80g-hdr", 128),
                             spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, "gpt3-175b-1536")), 1024,
                             {});
  run_search(state, space, 2);
}

void BM_Demo13B_64GPU(benchmark::State& state) {
  const planner::Space space(spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "gpt3-13b")),
                             cluster("dgx-h100-ndr", 8),
                             spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, "demo-13b-1024")), 64, {});
  run_search(state, space, 2);
}

// Llama 3.1 405B on 16,384 H100s with every axis, context parallelism and its three comm types
// included (Megatron-Core): 8K tokens (range 0) and 128K (range 1), 16M-token batches.
void BM_Search405B_16kGPU(benchmark::State& state) {
  const char* training = state.range(0) == 0 ? "llama3.1-405b-8k" : "llama3.1-405b-128k";
  const planner::Space space(spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "llama3.1-405b")),
                             cluster("dgx-h100-ndr-16k", 2048),
                             spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, training)), 16384, {});
  const planner::SearchResult r = run_search(state, space, 2);
  state.SetLabel(std::string(training) + ": " + (r.top.empty() ? std::string("none") : r.top.front().key));
}

// Narayanan et al. SC'21 Table 1: params (B), heads, hidden, layers, tp, pp, GPUs, batch.
struct Row {
  double params;
  int64_t heads, hidden, layers, tp, pp, gpus, batch;
};
constexpr Row kTable1[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512},        {3.6, 32, 3072, 30, 2, 1, 64, 512},
    {7.5, 32, 4096, 36, 4, 1, 128, 512},       {18.4, 48, 6144, 40, 8, 1, 256, 1024},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536},     {76.1, 80, 10240, 60, 8, 4, 1024, 1792},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304},  {310.1, 128, 16384, 96, 8, 16, 1920, 2160},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520}, {1008.0, 160, 25600, 128, 8, 64, 3072, 3072},
};

void BM_Table1(benchmark::State& state) {
  const Row& row = kTable1[state.range(0)];
  const spec::Model m = spec::model_from_json({{"name", "gpt-" + std::to_string(row.params) + "b"},
                                               {"layers", row.layers},
                                               {"hidden", row.hidden},
                                               {"heads", row.heads},
                                               {"vocab", 51200},
                                               {"seq_len", 2048}},
                                              "table1");
  const spec::Training t = spec::training_from_json({{"global_batch", row.batch}, {"dtype", "fp16"}}, "table1");
  const spec::Cluster c = cluster("dgx-a100-80g-hdr", row.gpus / 8);
  planner::SpaceLimits pinned;
  pinned.tp = {row.tp};
  pinned.pp = {row.pp};
  const planner::Space free_space(m, c, t, row.gpus, {});
  const planner::Space pinned_space(m, c, t, row.gpus, pinned);
  planner::SearchOptions o;
  o.threads = 2;
  o.top_k = 1;
  double free_s = 0, pinned_s = 0, seconds = 0;
  std::string label;
  for (auto _ : state) {
    const planner::SearchResult a = planner::search(free_space, o);
    const planner::SearchResult b = planner::search(pinned_space, o);
    free_s = a.top.empty() ? 0 : a.top.front().metrics.step_time_s;
    pinned_s = b.top.empty() ? 0 : b.top.front().metrics.step_time_s;
    seconds = a.seconds + b.seconds;
    label = (a.top.empty() ? "none" : a.top.front().key) + "  vs pinned  " + (b.top.empty() ? "none" : b.top.front().key);
  }
  state.counters["free_step_s"] = free_s;
  state.counters["pinned_step_s"] = pinned_s;
  state.counters["pinned_over_free"] = free_s > 0 ? pinned_s / free_s : 0;
  state.counters["free_le_pinned"] = free_s > 0 && pinned_s > 0 && free_s <= pinned_s ? 1 : 0;
  state.counters["search_seconds"] = seconds;
  state.SetLabel(label);
}

}  // namespace

BENCHMARK(BM_Search175B_1024GPU)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();
BENCHMARK(BM_Demo13B_64GPU)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();
BENCHMARK(BM_Search405B_16kGPU)->DenseRange(0, 1)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();
BENCHMARK(BM_Table1)->DenseRange(0, 9)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();
