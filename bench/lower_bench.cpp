// Lowering speed: GPT-3 175B with tp 8, pp 16, dp 8 (1024 GPUs), 64 micro-batches, interleaved
// with v = 3 — the size the planner lowers for every candidate. Target: under 50 ms.
#include <benchmark/benchmark.h>

#include "core/program/check.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"

namespace {

using namespace stagecraft;

struct Case {
  spec::Model model;
  spec::Training training;
  spec::Plan plan;
};

Case gpt3_175b(const char* schedule, int64_t v, int zero, const char* recompute) {
  Case c;
  c.model = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "gpt3-175b"));
  c.plan = spec::plan_from_json({{"tp", 8}, {"pp", 16}, {"dp", 8}, {"micro_batch", 1}, {"micro_batches", 64},
                                 {"schedule", schedule}, {"virtual_stages", v}, {"sequence_parallel", true},
                                 {"recompute", recompute}, {"zero", {{"stage", zero}}}},
                                "bench");
  c.training = spec::training_from_json({{"global_batch", 1 * 64 * 8}, {"dtype", "fp16"}}, "bench");
  return c;
}

void run(benchmark::State& state, const Case& c) {
  std::size_t instructions = 0;
  for (auto _ : state) {
    program::Program prog = program::lower(c.model, c.training, c.plan);
    instructions = prog.instruction_count();
    benchmark::DoNotOptimize(prog);
  }
  state.counters["instructions"] = static_cast<double>(instructions);
}

void BM_Lower175B_Interleaved_Zero1(benchmark::State& state) { run(state, gpt3_175b("interleaved", 3, 1, "selective")); }
void BM_Lower175B_Interleaved_Zero3_Full(benchmark::State& state) { run(state, gpt3_175b("interleaved", 3, 3, "full")); }
void BM_Lower175B_ZbH1_Zero1(benchmark::State& state) { run(state, gpt3_175b("zb-h1", 1, 1, "none")); }

void BM_Check175B_Interleaved_Zero1(benchmark::State& state) {
  const Case c = gpt3_175b("interleaved", 3, 1, "selective");
  const program::Program prog = program::lower(c.model, c.training, c.plan);
  for (auto _ : state) program::check(prog);
}

}  // namespace

BENCHMARK(BM_Lower175B_Interleaved_Zero1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Lower175B_Interleaved_Zero3_Full)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Lower175B_ZbH1_Zero1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Check175B_Interleaved_Zero1)->Unit(benchmark::kMillisecond);
