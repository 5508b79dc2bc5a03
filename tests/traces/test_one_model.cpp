// One cost model: change one rate of a cluster profile and the simulator's step time, the
// planner's step-time bound and calibration's prediction of the same Program all move by the
// amount derived here by hand — they time compute with the same Work (sim/models/work.hpp).
#include <gtest/gtest.h>

#include "core/count/count.hpp"
#include "fixtures.hpp"
#include "planner/prune.hpp"
#include "sim/cluster_fixture.hpp"
#include "traces/calibrate.hpp"

namespace stagecraft::traces {
namespace {

// Every GEMM at 80% of 1 PFLOP/s; the memory-bound bytes at hbm_Bps · 0.5.
spec::Cluster cluster_with_memory(double hbm_Bps) {
  spec::Cluster c = test::make_cluster();
  c.nodes = 1;
  c.gpus_per_node = 1;
  c.gpu.peak_flops = {{spec::Dtype::kBf16, 1e15}};
  c.gpu.matmul_efficiency = {{1.0, 0.8}};
  c.gpu.hbm_Bps = hbm_Bps;
  c.gpu.memory_efficiency = 0.5;
  c.host.pcie_Bps = 25e9;
  c.host.adam_params_per_s = 1e9;
  c.host.memory_bytes = int64_t{1} << 40;
  return c;
}

struct Timed {
  double simulated_s = 0, bound_s = 0, calibration_s = 0;
};

Timed time_it(const test::Scenario& s, const spec::Cluster& c) {
  Timed out;
  const sim::SimResult r = test::simulate(s, c);
  out.simulated_s = r.metrics.step_time_s;
  const planner::Space space(s.model, c, s.training, 1, {});
  planner::Candidate cand;
  cand.micro_batch = static_cast<int32_t>(s.plan.micro_batch);
  cand.micro_batches = static_cast<int32_t>(s.plan.micro_batches);
  planner::Pruner pruner(space);
  out.bound_s = pruner.estimate(cand).step_time_lb_s;
  Samples samples;
  add_trace_samples(test::as_trace(r.trace, "sim.json"), c, s.training, samples);
  for (const ComputeSample& cs : samples.compute) out.calibration_s += model_seconds(cs, c.gpu);
  return out;
}

TEST(OneModel, DoublingTheMemoryRateMovesSimulatorBoundAndCalibrationAlike) {
  // 2 layers, h 64, 4 heads, f 256, V 128, s 32, GELU, LayerNorm with biases, learned positions;
  // one GPU, one micro-batch of 1 sequence (T = 32 tokens), bf16 (1-byte width factor), Adam.
  const spec::Model m = spec::model_from_json({{"name", "small"}, {"layers", 2}, {"hidden", 64}, {"heads", 4},
                                               {"ffn_hidden", 256}, {"vocab", 128}, {"seq_len", 32}},
                                              "small.json");
  const spec::Training t = spec::training_from_json({{"attention", "unfused"}, {"global_batch", 1}, {"dtype", "bf16"}}, "t.json");
  const spec::Plan p = spec::plan_from_json({{"micro_batch", 1}, {"micro_batches", 1}}, "p.json");
  const test::Scenario s = test::lowered(m, t, p);
  // Memory-bound bytes of the step (work.hpp), by hand:
  //   forward per token: embedding 4h, per layer attention 11h + 9·a·s and MLP 11h + 4f, head 4h,
  //   and Megatron-LM's cross-entropy over the V logits, 38 bytes each forward and 14 backward;
  //   backward input: twice the forward (the loss: its 14); weight gradients: no gradient pass (the
  //   default framework, DeepSpeed, at ZeRO 0 leaves the one micro-batch's gradient in param.grad as
  //   autograd produced it: 3·2·(m − 1)/m = 0 bytes per parameter, spec::grad_pass_bytes);
  //   Adam: (4 + 4 + 4)·2 + 2 = 26 bytes per parameter.
  const double h = 64, a = 4, f = 256, V = 128, seq = 32, T = 32, L = 2;
  const double forward_per_token = 4 * h + L * ((11 * h + 9 * a * seq) + (11 * h + 4 * f)) + 4 * h;
  const double P = static_cast<double>(count::parameters(m));
  const double bytes = 3 * T * forward_per_token + T * (38 + 14) * V + 0 * P + 26 * P;
  // hbm 1e12 -> 2e12 at memory_efficiency 0.5: each byte takes 1/(0.5e12) − 1/(1e12) = 1e-12 s less.
  const double expected = bytes * (1 / (1e12 * 0.5) - 1 / (2e12 * 0.5));
  const Timed slow = time_it(s, cluster_with_memory(1e12)), fast = time_it(s, cluster_with_memory(2e12));
  // The simulator rounds each of its 3 instructions (Forward, Backward, OptimizerStep) to 1 ns.
  EXPECT_NEAR(slow.simulated_s - fast.simulated_s, expected, 3e-9);
  // The bound is the same sum of the same durations, less its 1e-5 relative margin.
  EXPECT_NEAR(slow.bound_s - fast.bound_s, expected * (1 - 1e-5), 1e-5 * slow.bound_s + 3e-9);
  EXPECT_NEAR(slow.calibration_s - fast.calibration_s, expected, 1e-12 * slow.calibration_s);
  // and all three time the same step
  EXPECT_NEAR(slow.calibration_s, slow.simulated_s, 3e-9);
  EXPECT_LE(slow.bound_s, slow.simulated_s + 3e-9);  // up to the simulator's 3 roundings
}

}  // namespace
}  // namespace stagecraft::traces
