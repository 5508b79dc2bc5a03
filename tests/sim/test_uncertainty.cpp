// Error bars from the cluster profile's parameter uncertainties (sim/uncertainty.hpp), derived by
// hand on a plan whose step time is pure GEMM work at one efficiency.
#include "sim/uncertainty.hpp"

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "core/program/lower.hpp"

namespace stagecraft::sim {
namespace {

// One GPU, GEMMs at 1e14 FLOP/s × 0.5 whatever their size, memory free: T = FLOPs / 5e13, so
// T ∝ 1/e for the matmul efficiency e.
spec::Cluster gemm_only(double sigma) {
  spec::Cluster c = test::ideal_cluster(1, 1);
  c.gpu.matmul_efficiency = {{1.0, 0.5}};
  c.uncertainty = {{"gpu.matmul_efficiency", sigma, "test"}, {"inter_node.nic_bandwidth_Bps", sigma, "test"}};
  return c;
}

program::Program lowered(int64_t layers) {
  const spec::Model m = spec::model_from_json({{"name", "m"}, {"layers", layers}, {"hidden", 512}, {"heads", 8},
                                               {"vocab", 2}, {"seq_len", 128}, {"tied_embeddings", false}},
                                              "m.json");
  const spec::Plan p = spec::plan_from_json({{"micro_batches", 2}}, "plan.json");
  const spec::Training t = spec::training_from_json({{"attention", "unfused"}, {"global_batch", 2}, {"dtype", "bf16"}}, "t.json");
  return program::lower(m, t, p);
}

TEST(Uncertainty, StepTimeInverseToEfficiencyGivesItsHandDerivedInterval) {
  const double sigma = 0.1;
  const spec::Cluster c = gemm_only(sigma);
  const program::Program prog = lowered(2);
  const Metrics central = simulate(prog, c).metrics;
  const ErrorBars e = error_bars(prog, c, {}, central);
  const double T = central.step_time_s;
  // each instruction's time is rounded to whole ns: up to 1 ns apiece
  const double tol = 1e-9 * static_cast<double>(prog.instruction_count());
  const double mtol = central.mfu * tol / T * 2;
  ASSERT_EQ(e.terms.size(), 2u);
  // e·(1 ∓ σ): T⁻ = T/(1 − σ), T⁺ = T/(1 + σ)
  EXPECT_EQ(e.terms[0].parameter, "gpu.matmul_efficiency");
  EXPECT_NEAR(e.terms[0].step_minus_s, T / (1 - sigma), tol);
  EXPECT_NEAR(e.terms[0].step_plus_s, T / (1 + sigma), tol);
  // one GPU: no network, so the NIC bandwidth moves nothing
  EXPECT_DOUBLE_EQ(e.terms[1].half_spread_s(), 0.0);
  // σ_T = |T⁺ − T⁻|/2 = T·σ/(1 − σ²); the interval T/(1 + σ) .. T/(1 − σ)
  EXPECT_NEAR(e.sigma_s, T * sigma / (1 - sigma * sigma), tol);
  EXPECT_NEAR(e.step_low_s, T / (1 + sigma), tol);
  EXPECT_NEAR(e.step_high_s, T / (1 - sigma), tol);
  // MFU ∝ 1/T: MFU·(1 − σ) .. MFU·(1 + σ)
  EXPECT_NEAR(e.mfu_low, central.mfu * (1 - sigma), mtol);
  EXPECT_NEAR(e.mfu_high, central.mfu * (1 + sigma), mtol);
}

// simulate_with_error_bars runs the central simulation beside the perturbed ones: the same
// result and error bars as simulate() and then error_bars(), here on a plan with a pipeline
// (sends across nodes) and ZeRO-3 so that several parameters move it.
TEST(Uncertainty, CentralSimulationBesideThePerturbedOnesChangesNothing) {
  spec::Cluster c = test::ideal_cluster(2, 2);
  c.uncertainty = {{"gpu.matmul_efficiency", 0.05, "test"},
                   {"inter_node.nic_bandwidth_Bps", 0.1, "test"},
                   {"intra_node.bandwidth_Bps", 0.1, "test"},
                   {"host.pcie_Bps", 0.1, "test"}};   // no offload: cannot matter
  const spec::Model m = spec::model_from_json({{"name", "m"}, {"layers", 4}, {"hidden", 512}, {"heads", 8},
                                               {"vocab", 2}, {"seq_len", 128}, {"tied_embeddings", false}},
                                              "m.json");
  const spec::Plan p = spec::plan_from_json({{"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"zero", {{"stage", 3}}}}, "plan.json");
  const spec::Training t = spec::training_from_json({{"attention", "unfused"}, {"global_batch", 8}, {"dtype", "bf16"}}, "t.json");
  const program::Program prog = program::lower(m, t, p);
  SimOptions o;
  o.record_trace = true;
  const SimResult alone = simulate(prog, c, o);
  const ErrorBars after = error_bars(prog, c, o, alone.metrics);
  const SimWithErrorBars both = simulate_with_error_bars(prog, c, o);
  EXPECT_EQ(both.result.metrics.step_time_s, alone.metrics.step_time_s);
  EXPECT_EQ(both.result.metrics.peak_memory_bytes, alone.metrics.peak_memory_bytes);
  EXPECT_EQ(both.result.trace.events.size(), alone.trace.events.size());
  ASSERT_EQ(both.bars.terms.size(), after.terms.size());
  for (std::size_t i = 0; i < after.terms.size(); ++i) {
    EXPECT_EQ(both.bars.terms[i].parameter, after.terms[i].parameter);
    EXPECT_EQ(both.bars.terms[i].step_minus_s, after.terms[i].step_minus_s);
    EXPECT_EQ(both.bars.terms[i].step_plus_s, after.terms[i].step_plus_s);
  }
  EXPECT_EQ(both.bars.step_low_s, after.step_low_s);
  EXPECT_EQ(both.bars.step_high_s, after.step_high_s);
  // the premises: the GEMM rate and the NICs move this plan, the PCIe link does not
  const auto spread = [&](const char* name) {
    for (const Sensitivity& s : after.terms) {
      if (s.parameter == name) return s.half_spread_s();
    }
    return 0.0;
  };
  EXPECT_LT(spread("gpu.matmul_efficiency"), 0);
  EXPECT_LT(spread("inter_node.nic_bandwidth_Bps"), 0);
  EXPECT_EQ(spread("host.pcie_Bps"), 0);
  // no uncertainty: the simulation alone, no error bars
  c.uncertainty.clear();
  const SimWithErrorBars plain = simulate_with_error_bars(prog, c, o);
  EXPECT_TRUE(plain.bars.empty());
  EXPECT_EQ(plain.result.metrics.step_time_s, alone.metrics.step_time_s);
}

TEST(Uncertainty, SharedErrorsMakeTwoPlansDistinguishableUnlessTheSpreadIsWide) {
  // Both plans are pure GEMM work: S = T·r for a fixed r, so every perturbation moves them by the
  // same factor and their difference D = S − T has the spread σ_Δ = D·σ/(1 − σ²). Distinguishable
  // means D > 2σ_Δ, i.e. 2σ/(1 − σ²) < 1: true at σ = 0.1 (0.20), false at σ = 0.5 (1.33).
  for (const double sigma : {0.1, 0.5}) {
    SCOPED_TRACE(sigma);
    const spec::Cluster c = gemm_only(sigma);
    const program::Program a = lowered(2), b = lowered(4);
    const ErrorBars ea = error_bars(a, c, {}, simulate(a, c).metrics);
    const ErrorBars eb = error_bars(b, c, {}, simulate(b, c).metrics);
    const double D = eb.step_time_s - ea.step_time_s;
    ASSERT_GT(D, 0);
    EXPECT_NEAR(difference_sigma(ea, eb), D * sigma / (1 - sigma * sigma), 1e-5 * eb.step_time_s);
    EXPECT_EQ(distinguishable(ea, eb), sigma < 0.2);
  }
}

TEST(Uncertainty, NoUncertaintyNoErrorBars) {
  spec::Cluster c = gemm_only(0.1);
  c.uncertainty.clear();
  const program::Program prog = lowered(2);
  const Metrics m = simulate(prog, c).metrics;
  const ErrorBars e = error_bars(prog, c, {}, m);
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.step_low_s, m.step_time_s);
  EXPECT_THROW(perturbed(c, "gpu.name", 1.1), std::invalid_argument);
}

TEST(Uncertainty, MemoryKernelsMoveTogetherAndStayFractions) {
  // gpu.memory_kernels scales every kind's fraction of hbm_Bps by the factor, capped at 1; an
  // absent kind (0) stays absent, and memory_efficiency is another parameter's.
  spec::Cluster c = gemm_only(0.1);
  c.gpu.memory_efficiency = 0.8;
  c.gpu.memory_kernels.strided = 0.3;
  c.gpu.memory_kernels.softmax = {{512, 0.6}, {2048, 0.95}};
  const spec::Cluster up = perturbed(c, "gpu.memory_kernels", 1.1);
  EXPECT_DOUBLE_EQ(up.gpu.memory_kernels.strided, 0.3 * 1.1);
  EXPECT_DOUBLE_EQ(up.gpu.memory_kernels.softmax[0].second, 0.6 * 1.1);
  EXPECT_DOUBLE_EQ(up.gpu.memory_kernels.softmax[1].second, 1.0);  // 1.045, capped
  EXPECT_EQ(up.gpu.memory_kernels.dropout, 0.0);
  EXPECT_EQ(up.gpu.memory_efficiency, 0.8);
}

}  // namespace
}  // namespace stagecraft::sim
