// sim/run_cost.hpp: GPU-hours, money and energy of a plan, each derived by hand here.
#include <cmath>

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"
#include "sim/run_cost.hpp"

namespace stagecraft::sim {
namespace {

spec::Cluster priced_cluster() {
  spec::Cluster c = test::make_cluster();   // 2 nodes × 4 GPUs
  c.price.per_gpu_hour = 2.5;
  c.price.currency = "EUR";
  c.price.source = "test contract";
  c.power.gpu_watts = 700;
  c.power.node_watts = 10200;
  return c;
}

TEST(RunCost, PerStepAndPerMillionTokens) {
  // 8 GPUs, a 9 s step, a global batch of 512 sequences of 2048 tokens = 1,048,576 tokens a step.
  const spec::Cluster c = priced_cluster();
  const double tokens = 512.0 * 2048.0;
  const RunCost r = run_cost(c, 8, tokens, 9.0, std::nullopt);
  // GPU-hours a step: 8 × 9 / 3600 = 0.02; per million tokens: 0.02 × 1e6 / 1,048,576.
  EXPECT_DOUBLE_EQ(r.gpu_hours_per_step, 8 * 9.0 / 3600);
  EXPECT_DOUBLE_EQ(r.gpu_hours_per_million_tokens, 0.02 * 1e6 / 1048576.0);
  // Cost: 0.02 GPU-hours × 2.5 EUR = 0.05 EUR a step.
  ASSERT_TRUE(r.cost_per_step);
  EXPECT_DOUBLE_EQ(*r.cost_per_step, 0.05);
  EXPECT_DOUBLE_EQ(*r.cost_per_million_tokens, 0.05 * 1e6 / 1048576.0);
  EXPECT_EQ(r.currency, "EUR");
  EXPECT_FALSE(r.tokens);
  EXPECT_FALSE(r.train_energy_kwh);
}

TEST(RunCost, TokenBudget) {
  // 1e12 tokens at 1,048,576 a step: ⌈953,674.3⌉ = 953,675 steps; at 9 s a step that is
  // 8,583,075 s (99.3 days), 953,675 × 0.02 = 19,073.5 GPU-hours, × 2.5 EUR = 47,683.75 EUR.
  const spec::Cluster c = priced_cluster();
  const RunCost r = run_cost(c, 8, 1048576.0, 9.0, 1e12);
  EXPECT_EQ(r.steps, 953675);
  EXPECT_DOUBLE_EQ(r.train_seconds, 953675 * 9.0);
  EXPECT_NEAR(r.train_gpu_hours, 19073.5, 1e-6);
  ASSERT_TRUE(r.train_cost);
  EXPECT_NEAR(*r.train_cost, 47683.75, 1e-6);
  // Energy at most: 8 of the nodes' 4 GPUs = 2 nodes' share × 10.2 kW = 20.4 kW, for 8,583,075 s:
  // 20,400 W × 8,583,075 s / 3.6e6 J/kWh = 48,637.425 kWh.
  EXPECT_EQ(r.energy_basis, "node");
  EXPECT_DOUBLE_EQ(r.power_watts, 20400);
  ASSERT_TRUE(r.train_energy_kwh);
  EXPECT_NEAR(*r.train_energy_kwh, 20400.0 * 953675 * 9.0 / 3.6e6, 1e-6);
}

TEST(RunCost, PartOfANodeAndGpuPowerOnly) {
  spec::Cluster c = priced_cluster();
  // 2 of a node's 4 GPUs: half of 10.2 kW.
  EXPECT_DOUBLE_EQ(run_cost(c, 2, 1000, 1, 1e6).power_watts, 5100);
  // Without node power, the GPU boards alone: 2 × 700 W.
  c.power.node_watts = 0;
  const RunCost r = run_cost(c, 2, 1000, 1, 1e6);
  EXPECT_EQ(r.energy_basis, "gpu");
  EXPECT_DOUBLE_EQ(r.power_watts, 1400);
  // 1e6 tokens at 1000 a step: 1000 steps of 1 s, 1400 W × 1000 s = 1.4e6 J = 0.3889 kWh.
  EXPECT_NEAR(*r.train_energy_kwh, 1400.0 * 1000 / 3.6e6, 1e-12);
}

TEST(RunCost, NoPriceNoMoney) {
  spec::Cluster c = test::make_cluster();
  const RunCost r = run_cost(c, 4, 4096, 2.0, 1e9);
  EXPECT_FALSE(r.cost_per_step);
  EXPECT_FALSE(r.train_cost);
  EXPECT_FALSE(r.train_energy_kwh);
  // GPU-hours still: ⌈1e9 / 4096⌉ = 244,141 steps × 4 × 2 / 3600.
  EXPECT_EQ(r.steps, 244141);
  EXPECT_NEAR(r.train_gpu_hours, 244141 * 8.0 / 3600, 1e-9);
  const nlohmann::json j = to_json(r);
  EXPECT_TRUE(j["price"].is_null());
  EXPECT_TRUE(j["cost_per_step"].is_null());
  EXPECT_TRUE(j["train"]["cost"].is_null());
  EXPECT_EQ(j["train"]["steps"], 244141);
  EXPECT_NE(run_cost_text(r).find("no price"), std::string::npos);
}

TEST(RunCost, TokenCounts) {
  EXPECT_EQ(parse_token_count("1T"), 1e12);
  EXPECT_EQ(parse_token_count("300B"), 3e11);
  EXPECT_EQ(parse_token_count("1.5T"), 1.5e12);
  EXPECT_EQ(parse_token_count("2e12"), 2e12);
  EXPECT_EQ(parse_token_count("500M"), 5e8);
  EXPECT_EQ(parse_token_count("10K"), 1e4);
  EXPECT_FALSE(parse_token_count(""));
  EXPECT_FALSE(parse_token_count("T"));
  EXPECT_FALSE(parse_token_count("-1T"));
  EXPECT_FALSE(parse_token_count("0"));
  EXPECT_FALSE(parse_token_count("1X"));
  EXPECT_FALSE(parse_token_count("nan"));
  EXPECT_FALSE(parse_token_count("1e30"));
  EXPECT_EQ(token_count_text(1e12), "1T");
  EXPECT_EQ(token_count_text(3e11), "300B");
  EXPECT_EQ(token_count_text(1048576), "1.049M");
  EXPECT_EQ(duration_text(86400.0 * 99.34), "99.34 days");
  EXPECT_EQ(duration_text(30), "30 s");
  EXPECT_EQ(money_text(47683.75, "EUR"), "47,684 EUR");
  EXPECT_EQ(money_text(0.05, "USD"), "0.05 USD");
}

}  // namespace
}  // namespace stagecraft::sim
