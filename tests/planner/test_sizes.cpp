// planner/sizes.hpp: the time-cost front across GPU counts and the size an objective picks.
#include <gtest/gtest.h>

#include "planner/sizes.hpp"

namespace stagecraft::planner {
namespace {

// A size's best plan: `gpus` GPUs, a step of `step_s` seconds, 1e6 tokens a step.
sim::RunCost size_cost(int64_t gpus, double step_s) {
  spec::Cluster c;
  c.gpus_per_node = 8;
  return sim::run_cost(c, gpus, 1e6, step_s, std::nullopt);
}

TEST(Sizes, FrontAndObjectives) {
  // GPU-hours per million tokens = gpus × step / 3600 (1e6 tokens a step):
  //   32 GPUs, 10 s:  time 10 s, cost 32·10/3600 = 0.0889
  //   64 GPUs, 5.5 s: time 5.5 s, cost 64·5.5/3600 = 0.0978 (faster, dearer: on the front)
  //  128 GPUs, 6 s:   slower than 64 and dearer (0.213): dominated by 64
  //  256 GPUs, 2 s:   the fastest, cost 0.142: on the front
  const std::vector<SizeCost> sizes = {size_cost(32, 10), size_cost(64, 5.5), size_cost(128, 6), size_cost(256, 2),
                                       std::nullopt};
  const std::vector<bool> front = time_cost_front(sizes);
  EXPECT_EQ(front, (std::vector<bool>{true, true, false, true, false}));
  EXPECT_EQ(choose_size(sizes, Objective::kTime), 3u);
  EXPECT_EQ(choose_size(sizes, Objective::kCost), 0u);
}

TEST(Sizes, SuperlinearSizeDominatesTheSmallerOne) {
  // 16 GPUs at 20 s (cost 16·20 = 320 GPU-s) against 32 GPUs at 9 s (288 GPU-s): the larger one is
  // both faster and cheaper (memory lets it skip recompute), so the smaller is off the front and
  // both objectives pick the larger.
  const std::vector<SizeCost> sizes = {size_cost(16, 20), size_cost(32, 9)};
  EXPECT_EQ(time_cost_front(sizes), (std::vector<bool>{false, true}));
  EXPECT_EQ(choose_size(sizes, Objective::kTime), 1u);
  EXPECT_EQ(choose_size(sizes, Objective::kCost), 1u);
}

// Failures that grow with the job make the smaller, slower size the better one. 1000 GPUs at 2 s a
// step against 2000 at 1 s (perfect scaling), 1e6 tokens a step, a budget of 1e10 tokens (1e4 steps),
// 1e-3 failures a GPU-hour, a 2-hour restart, 1e12 checkpoint bytes on a 1e10 B/s store (δ = 100 s):
//   1000 GPUs: T_s = 2e4 s, M = 3600/(1000·1e-3) = 3600 s, R = 7200 + 100 = 7300 s,
//              τ = √(2·100·3600)·(1 + √(100/7200)/3 + (100/7200)/9) − 100 = 848.53·1.040827 − 100 = 783.17 s,
//              T_w = 3600·e^{7300/3600}·(e^{883.17/3600} − 1)·2e4/783.17 = 194,192 s (2.2 days)
//   2000 GPUs: T_s = 1e4 s, M = 1800 s, R = 7300 s, τ = 535.19 s,
//              T_w = 1800·e^{7300/1800}·(e^{635.19/1800} − 1)·1e4/535.19 = 821,447 s (9.5 days)
// "time" picks 2000 GPUs (half the step); "goodput" picks 1000 (a quarter of the wall time).
TEST(Sizes, GoodputPicksTheSmallerJobWhenFailuresDominate) {
  spec::Cluster c;
  c.gpus_per_node = 8;
  c.reliability.failures_per_gpu_hour = 1e-3;
  c.reliability.restart_s = 7200;
  c.reliability.checkpoint_Bps = 1e10;
  const std::vector<SizeCost> sizes = {sim::run_cost(c, 1000, 1e6, 2.0, 1e10, 1e12), sim::run_cost(c, 2000, 1e6, 1.0, 1e10, 1e12)};
  ASSERT_TRUE(sizes[0]->goodput && sizes[1]->goodput);
  EXPECT_NEAR(sizes[0]->goodput->interval_s, 783.17, 0.01);
  EXPECT_NEAR(sizes[0]->goodput->wall_s, 194192, 1);
  EXPECT_NEAR(sizes[1]->goodput->interval_s, 535.19, 0.01);
  EXPECT_NEAR(sizes[1]->goodput->wall_s, 821447, 1);
  EXPECT_EQ(choose_size(sizes, Objective::kTime), 1u);
  EXPECT_EQ(choose_size(sizes, Objective::kGoodput), 0u);
  // without the figure (no budget), goodput chooses nothing
  const std::vector<SizeCost> plain = {size_cost(1000, 2.0)};
  EXPECT_FALSE(choose_size(plain, Objective::kGoodput));
  EXPECT_EQ(parse_objective("goodput"), Objective::kGoodput);
}

TEST(Sizes, TiesAndEmpty) {
  // Equal cost per token (8·10 = 16·5): cost picks the faster, 16 GPUs, which dominates (as cheap,
  // faster); equal time and cost: fewer GPUs first, and neither dominates the other.
  const std::vector<SizeCost> tie = {size_cost(8, 10), size_cost(16, 5)};
  EXPECT_EQ(choose_size(tie, Objective::kCost), 1u);
  EXPECT_EQ(time_cost_front(tie), (std::vector<bool>{false, true}));
  const std::vector<SizeCost> same = {size_cost(16, 5), size_cost(16, 5)};
  EXPECT_EQ(time_cost_front(same), (std::vector<bool>{true, true}));
  EXPECT_EQ(choose_size(same, Objective::kCost), 0u);
  EXPECT_FALSE(choose_size({std::nullopt, std::nullopt}, Objective::kTime));
  EXPECT_EQ(parse_objective("cost"), Objective::kCost);
  EXPECT_FALSE(parse_objective("money"));
}

}  // namespace
}  // namespace stagecraft::planner
