// sim/goodput.hpp: the time to train with failures and checkpoints, derived by hand here.
#include <cmath>

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "core/count/count.hpp"
#include "core/spec/model.hpp"
#include "sim/goodput.hpp"
#include "sim/run_cost.hpp"

namespace stagecraft::sim {
namespace {

spec::Reliability llama3() {
  spec::Reliability r;
  r.failures_per_gpu_hour = 1.973e-5;   // 419 / (54 × 24 × 16,384)
  r.restart_s = 600;
  r.checkpoint_Bps = 2e12;
  return r;
}

// Llama 3.1 405B on 16,384 GPUs for 100 failure-free days: the Llama 3 paper's rate and store.
TEST(Goodput, AWorkedCaseAt16kGpus) {
  const double C = 405'853'388'800.0 * 14;   // bf16 weights 2 + fp32 master, Adam m, v 12 bytes a parameter
  const double Ts = 100 * 86400.0;
  const Goodput g = goodput(llama3(), 16384, 8, C, Ts);
  // λ = 16,384 × 1.973e-5 = 0.32326 an hour; M = 3600 / λ = 11,136.6 s
  const double lambda = 16384 * 1.973e-5, M = 3600 / lambda;
  EXPECT_DOUBLE_EQ(g.failures_per_hour, lambda);
  EXPECT_NEAR(g.mtbf_s, 11136.6, 0.1);
  // δ = 5.6819e12 B / 2e12 B/s = 2.8410 s; R = 600 + δ
  const double delta = C / 2e12;
  EXPECT_NEAR(g.checkpoint_s, 2.8410, 1e-4);
  EXPECT_DOUBLE_EQ(g.restart_s, 600 + delta);
  // Daly: √(2δM) = √(2 × 2.8410 × 11,136.6) = 251.55; x = δ/2M = 1.2755e-4;
  // τ = 251.55 × (1 + √x / 3 + x / 9) − δ = 251.55 × 1.0037788 − 2.8410 = 249.66 s
  const double x = delta / (2 * M);
  const double tau = std::sqrt(2 * delta * M) * (1 + std::sqrt(x) / 3 + x / 9) - delta;
  EXPECT_NEAR(tau, 249.66, 0.01);
  EXPECT_DOUBLE_EQ(g.interval_s, tau);
  // T_w = M e^{R/M} (e^{(τ+δ)/M} − 1) T_s/τ: e^{602.84/11136.6} = 1.05562, e^{252.50/11136.6} − 1 = 0.022933,
  // so T_w / T_s = 11136.6 × 1.05562 × 0.022933 / 249.66 = 1.07987: goodput 92.6%, more than 90% as
  // the paper measured
  const double ratio = M * std::exp((600 + delta) / M) * std::expm1((tau + delta) / M) / tau;
  EXPECT_NEAR(ratio, 1.0799, 1e-4);
  EXPECT_NEAR(g.wall_s, ratio * Ts, 1e-6 * Ts);
  EXPECT_NEAR(g.goodput, 1 / ratio, 1e-12);
  EXPECT_GT(g.goodput, 0.90);
  EXPECT_NEAR(g.failures, g.wall_s / M, 1e-9);
}

// A failure rate per node-hour: 64 GPUs on 8-GPU nodes are 8 nodes, λ = 8 × 1e-3 = 0.008 an hour.
TEST(Goodput, PerNodeRate) {
  spec::Reliability r = llama3();
  r.failures_per_gpu_hour = 0;
  r.failures_per_node_hour = 1e-3;
  const Goodput g = goodput(r, 64, 8, 1e12, 86400);
  EXPECT_DOUBLE_EQ(g.failures_per_hour, 8 * 1e-3);
  EXPECT_DOUBLE_EQ(g.mtbf_s, 3600 / 0.008);
}

// A checkpoint slower than two MTBFs: Daly's interval is M itself, and the job still advances.
TEST(Goodput, ACheckpointLongerThanTwoMtbfs) {
  spec::Reliability r = llama3();
  r.failures_per_gpu_hour = 1e-2;     // 1000 GPUs: 10 failures an hour, M = 360 s
  r.checkpoint_Bps = 1e9;
  const Goodput g = goodput(r, 1000, 8, 1e12, 3600);   // δ = 1000 s > 2M = 720 s
  EXPECT_DOUBLE_EQ(g.interval_s, 360);
  EXPECT_GT(g.wall_s, 3600);
  EXPECT_LT(g.goodput, 0.01);
}

// The checkpoint of a model: its weights in the training dtype and the optimizer state, as
// sim::model_states counts them for one unsharded replica (gradients are not saved).
TEST(Goodput, CheckpointBytes) {
  spec::Model m;
  m.layers = 2, m.hidden = 64, m.heads = 4, m.kv_heads = 4, m.ffn_hidden = 256, m.vocab = 1000, m.seq_len = 128;
  const double P = static_cast<double>(count::parameters(m));
  EXPECT_DOUBLE_EQ(checkpoint_bytes(m, spec::Dtype::kBf16), P * (2 + 12));
  EXPECT_DOUBLE_EQ(checkpoint_bytes(m, spec::Dtype::kFp32), P * (4 + 8));
}

// run_cost adds it with a budget, a reliability section and the checkpoint's bytes, and not otherwise.
TEST(Goodput, InTheRunCost) {
  spec::Cluster c = test::make_cluster();   // 2 nodes × 4 GPUs
  const RunCost none = run_cost(c, 8, 1e6, 10, 1e12, 1e12);
  EXPECT_FALSE(none.goodput.has_value());   // no reliability section
  c.reliability = llama3();
  EXPECT_FALSE(run_cost(c, 8, 1e6, 10, std::nullopt, 1e12).goodput.has_value());   // no budget
  const RunCost r = run_cost(c, 8, 1e6, 10, 1e12, 1e12);
  ASSERT_TRUE(r.goodput.has_value());
  // 1e12 tokens of 1e6 a step: 1e6 steps of 10 s = 1e7 s failure-free
  EXPECT_DOUBLE_EQ(r.goodput->train_s, 1e7);
  EXPECT_EQ(to_json(r)["train"]["goodput"]["goodput"].get<double>(), r.goodput->goodput);
  EXPECT_NE(run_cost_text(r).find("goodput"), std::string::npos);
}

}  // namespace
}  // namespace stagecraft::sim
