// The simulator on systems small enough to reason about by hand.
#include "sim/simulator.hpp"

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "core/count/count.hpp"
#include "core/program/lower.hpp"

namespace stagecraft::sim {
namespace {

// A GPU whose GEMMs all run at exactly peak and whose memory-bound work is free, so compute time
// is FLOPs / peak and stages are equal when they hold equal blocks.
spec::Cluster ideal_cluster(int64_t nodes, int64_t gpus_per_node) {
  test::ClusterShape shape;
  shape.nodes = nodes;
  shape.gpus_per_node = gpus_per_node;
  shape.nics_per_node = gpus_per_node;
  spec::Cluster c = test::make_cluster(shape);
  c.gpu.peak_flops[spec::Dtype::kBf16] = 1e14;
  c.gpu.matmul_efficiency = {{1.0, 1.0}};
  c.gpu.hbm_Bps = 1e30;
  c.host.pcie_Bps = 25e9;
  c.host.adam_params_per_s = 1e9;
  c.host.memory_bytes = int64_t{1} << 40;
  return c;
}

// Blocks dominate: vocabulary 2 makes the head's 2hV FLOPs per token 1/10^4 of a block's.
spec::Model blocks_model(int64_t layers) {
  return spec::model_from_json({{"name", "blocks"}, {"layers", layers}, {"hidden", 512}, {"heads", 8}, {"vocab", 2},
                                {"seq_len", 128}, {"tied_embeddings", false}},
                               "blocks.json");
}

program::Program lower(const spec::Model& m, const nlohmann::json& plan) {
  spec::Plan p = spec::plan_from_json(plan, "plan.json");
  spec::Training t = spec::training_from_json(
      {{"global_batch", p.micro_batch * p.micro_batches * p.dp}, {"dtype", "bf16"}}, "training.json");
  return program::lower(m, t, p);
}

SimResult free_comm(const program::Program& prog, int64_t gpus) {
  SimOptions o;
  o.free_communication = true;
  return simulate(prog, ideal_cluster(1, gpus), o);
}

TEST(Simulator, BubbleOfGpipeAnd1F1BIsPMinusOneOverMPlusPMinusOne) {
  const int64_t p = 4;
  for (const char* schedule : {"gpipe", "1f1b"}) {
    for (int64_t m : {4, 8, 16}) {
      SCOPED_TRACE(std::string(schedule) + " m=" + std::to_string(m));
      const SimResult r = free_comm(lower(blocks_model(8), {{"pp", p}, {"micro_batches", m}, {"schedule", schedule}}), p);
      const double expected = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
      EXPECT_NEAR(r.metrics.bubble_fraction, expected, 0.003);
      EXPECT_DOUBLE_EQ(r.metrics.time.exposed_comm_s, 0.0);
    }
  }
}

TEST(Simulator, InterleavingDividesTheBubbleByV) {
  const int64_t p = 4, m = 8, v = 2;
  const SimResult r = free_comm(
      lower(blocks_model(16), {{"pp", p}, {"micro_batches", m}, {"schedule", "interleaved"}, {"virtual_stages", v}}), p);
  // Chunk passes take 1/v of a stage pass: (p-1) idle chunk-pass pairs against m v busy ones.
  const double expected = static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
  EXPECT_NEAR(r.metrics.bubble_fraction, expected, 0.003);
}

TEST(Simulator, ZeroBubbleH1BeatsOneFOneB) {
  const int64_t p = 4, m = 8;
  const SimResult one = free_comm(lower(blocks_model(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "1f1b"}}), p);
  const SimResult zb = free_comm(lower(blocks_model(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "zb-h1"}}), p);
  EXPECT_LT(zb.metrics.bubble_fraction, one.metrics.bubble_fraction);
  EXPECT_LT(zb.metrics.step_time_s, one.metrics.step_time_s);
  // Same work: only the idle time changes.
  EXPECT_NEAR(zb.metrics.time.compute_s, one.metrics.time.compute_s, 1e-9);
}

TEST(Simulator, ComputeTimeIsFlopsOverPeak) {
  // One GPU, one micro-batch: the step is forward + backward of every unit plus Adam.
  const spec::Model m = blocks_model(2);
  const program::Program prog = lower(m, {{"micro_batches", 1}});
  const SimResult r = free_comm(prog, 1);
  const double tokens = 128;
  const double flops = tokens * count::model_flops_per_token_train(m);
  // Adam over P parameters moves (2*12 + 2) bytes each at hbm 1e30 B/s: nothing.
  EXPECT_NEAR(r.metrics.step_time_s, flops / 1e14, 2e-9);
  EXPECT_NEAR(r.metrics.model_tflops_per_gpu, flops / r.metrics.step_time_s / 1e12, 1e-9);
  EXPECT_NEAR(r.metrics.mfu, r.metrics.model_tflops_per_gpu * 1e12 / 1e14, 1e-12);
}

TEST(Simulator, PipelineSendTakesLatencyPlusBytesOverLink) {
  // pp = 2 on two GPUs of one node: each activation message crosses NVLink (100 GB/s, 1 us).
  const spec::Model m = blocks_model(2);
  const program::Program prog = lower(m, {{"pp", 2}, {"micro_batches", 1}});
  SimOptions o;
  o.record_trace = true;
  const SimResult r = simulate(prog, ideal_cluster(1, 2), o);
  const int64_t bytes = 128 * 512 * 2;  // s b h, bf16
  const int64_t expected_ns = 1000 + (bytes * 1'000'000'000 + 100'000'000'000 - 1) / 100'000'000'000;
  bool seen = false;
  for (const trace::Event& e : r.trace.events) {
    if (e.op == program::Op::kSendActivation) {
      EXPECT_EQ(e.end_ns - e.start_ns, expected_ns);
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

TEST(Simulator, FullAndReplicaAgreeOnSymmetricPlans) {
  const spec::Model m = blocks_model(4);
  for (int zero : {1, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const program::Program prog = lower(m, {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 4},
                                            {"zero", {{"stage", zero}, {"prefetch_bucket", 300000}}}});
    const spec::Cluster c = ideal_cluster(2, 4);
    SimOptions full;
    full.full = true;
    const SimResult a = simulate(prog, c), b = simulate(prog, c, full);
    EXPECT_EQ(a.metrics.simulated_ranks, 2);
    EXPECT_EQ(b.metrics.simulated_ranks, 8);
    EXPECT_NEAR(a.metrics.step_time_s, b.metrics.step_time_s, 1e-9 * b.metrics.step_time_s);
    EXPECT_EQ(a.metrics.peak_memory_bytes, b.metrics.peak_memory_bytes);
  }
}

TEST(Simulator, SameInputGivesByteIdenticalTrace) {
  const program::Program prog = lower(blocks_model(4), {{"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"zero", {{"stage", 2}}}});
  SimOptions o;
  o.record_trace = true;
  const spec::Cluster c = ideal_cluster(2, 2);
  const std::string a = trace::to_chrome_json(simulate(prog, c, o).trace).dump();
  const std::string b = trace::to_chrome_json(simulate(prog, c, o).trace).dump();
  EXPECT_EQ(a, b);
  EXPECT_GT(a.size(), 1000u);
}

TEST(Simulator, PeakMemoryAddsStatesActivationsAndReserve) {
  // One GPU, one micro-batch, no recompute: peak = model states + one micro-batch's activations.
  const spec::Model m = blocks_model(2);
  const program::Program prog = lower(m, {{"micro_batches", 1}});
  spec::Cluster c = ideal_cluster(1, 1);
  c.gpu.reserved_bytes = 1 << 20;
  const SimResult r = simulate(prog, c);
  const int64_t P = count::parameters(m);
  EXPECT_EQ(r.metrics.memory[trace::MemoryKind::kParams], 2 * P);
  EXPECT_EQ(r.metrics.memory[trace::MemoryKind::kGrads], 2 * P);
  EXPECT_EQ(r.metrics.memory[trace::MemoryKind::kOptimizer], 12 * P);
  EXPECT_EQ(r.metrics.memory[trace::MemoryKind::kReserved], 1 << 20);
  // Activations: per layer s b h (34 + 5 a s / h), plus the head's 2h + 4V per token.
  const double s = 128, h = 512, a = 8, V = 2;
  const double expected = 2 * s * h * (34 + 5 * a * s / h) + s * (2 * h + 4 * V);
  EXPECT_NEAR(static_cast<double>(r.metrics.memory[trace::MemoryKind::kActivations]), expected, 2.0);
  EXPECT_EQ(r.metrics.peak_memory_bytes, r.metrics.memory.total());
  EXPECT_TRUE(r.metrics.fits);
}

TEST(Simulator, PlanThatDoesNotFitSaysWhy) {
  const program::Program prog = lower(blocks_model(2), {{"micro_batches", 1}});
  spec::Cluster c = ideal_cluster(1, 1);
  c.gpu.memory_bytes = 64 << 20;  // 64 MiB: the 6.3M parameters' 16 bytes each do not fit
  const SimResult r = simulate(prog, c);
  EXPECT_FALSE(r.metrics.fits);
  EXPECT_NE(fit_reason(r.metrics).find("optimizer"), std::string::npos) << fit_reason(r.metrics);
  EXPECT_NE(fit_reason(r.metrics).find("exceeds"), std::string::npos) << fit_reason(r.metrics);
}

TEST(Simulator, CommunicationOnTheCriticalPathIsExposed) {
  // dp = 2 across two nodes, ZeRO-0 without overlap: the all-reduce runs after the backward.
  const program::Program prog = lower(blocks_model(2), {{"dp", 2}, {"micro_batches", 1}});
  const SimResult r = simulate(prog, ideal_cluster(2, 1));
  EXPECT_GT(r.metrics.time.exposed_comm_s, 0.0);
  EXPECT_GT(r.metrics.time.dp_s, 0.0);
  EXPECT_NEAR(r.metrics.time.compute_s + r.metrics.time.exposed_comm_s + r.metrics.time.bubble_s, r.metrics.step_time_s, 1e-12);
}

TEST(Simulator, TooSmallClusterIsRejected) {
  const program::Program prog = lower(blocks_model(2), {{"dp", 4}, {"micro_batches", 1}});
  EXPECT_THROW(simulate(prog, ideal_cluster(1, 2)), std::invalid_argument);
}

}  // namespace
}  // namespace stagecraft::sim
