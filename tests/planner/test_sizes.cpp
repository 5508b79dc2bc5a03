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
