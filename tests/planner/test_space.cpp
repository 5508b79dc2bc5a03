// The plan space: candidate counts derived by hand, limits, keys, and the messages of an empty space.
#include "planner/space.hpp"

#include <gtest/gtest.h>

#include <set>

#include "fixtures.hpp"
#include "support.hpp"

namespace stagecraft::planner {
namespace {

// tiny (4 layers, 4 heads) on cpu-local (1 node × 2 GPUs), global batch 4, with recompute,
// sequence parallelism, split and offload pinned, ZeRO 0 and 1, one reduce-bucket value:
//   tp 1, pp 1, dp 2:  mb ∈ divisors(4/2) = {1, 2}; one schedule (pp = 1); ZeRO 0, 1    -> 2·2     =  4
//   tp 1, pp 2, dp 1:  mb ∈ {1, 2, 4} (m = 4, 2, 1); gpipe, 1f1b, zb-h1, and interleaved v = 2
//                      (pp·v divides 4 layers) when pp | m, i.e. for m = 4 and 2;
//                      ZeRO 0, 1                                                          -> (4+4+3)·2 = 22
//   tp 2, pp 1, dp 1:  mb ∈ {1, 2, 4}; one schedule; ZeRO 0, 1                            -> 3·2     =  6
// 32 candidates. With dp = 1, ZeRO 1 shards nothing: the same Program as ZeRO 0, so the 11 + 3
// such candidates are dominated.
SpaceLimits tiny_limits() {
  SpaceLimits l;
  l.recompute = {spec::Recompute::kNone};
  l.sequence_parallel = {0};
  l.split = {Split::kBalanced};
  l.offload = {spec::Offload::kNone};
  l.zero = {0, 1};
  l.reduce_bucket = {500'000'000};
  return l;
}

Space tiny_space(SpaceLimits limits) {
  return Space(test::bundled_model("tiny"), test::bundled_cluster("cpu-local", 1), test::training(4, spec::Dtype::kFp32), 2,
               std::move(limits));
}

TEST(Space, CandidateCountDerivedByHand) {
  const Space space = tiny_space(tiny_limits());
  const auto all = test::enumerate(space);
  EXPECT_EQ(all.size(), 32u);
  int dominated = 0;
  for (const auto& s : all) dominated += s.verdict == Verdict::kDominated;
  EXPECT_EQ(dominated, 14);
}

TEST(Space, EveryCandidateIsAValidPlanWithAUniqueKey) {
  const Space space = tiny_space(tiny_limits());
  std::set<std::string> keys;
  for (const auto& s : test::enumerate(space)) {
    const spec::Plan p = space.plan(s.candidate);
    EXPECT_NO_THROW(spec::validate_plan(p, space.model(), space.training(), space.gpus())) << plan_key(p);
    EXPECT_EQ(p.micro_batch * p.micro_batches * p.dp, space.training().global_batch);
    keys.insert(plan_key(p));
  }
  EXPECT_EQ(keys.size(), 32u);
}

TEST(Space, PinnedAxesOnlyKeepTheirValues) {
  SpaceLimits l = tiny_limits();
  l.tp = {1};
  l.pp = {2};
  l.schedules = {spec::Schedule::kInterleaved};
  const auto all = test::enumerate(tiny_space(l));
  // tp 1, pp 2: interleaved v = 2 for mb 1 and 2, ZeRO 0 and 1
  ASSERT_EQ(all.size(), 4u);
  for (const auto& s : all) {
    EXPECT_EQ(s.candidate.tp, 1);
    EXPECT_EQ(s.candidate.pp, 2);
    EXPECT_EQ(s.candidate.schedule, spec::Schedule::kInterleaved);
    EXPECT_EQ(s.candidate.virtual_stages, 2);
  }
}

TEST(Space, Fp8SearchesZeroStagesUpToTwo) {
  // Transformer Engine's FP8 weight caches assume whole parameters: ZeRO-3 is not modelled for fp8,
  // so the space keeps stages 0, 1 and 2 (and a bf16 training all four).
  const spec::Cluster c = test::bundled_cluster("dgx-h100-ndr", 1);
  const spec::Model m = test::bundled_model("tiny");
  EXPECT_EQ(Space(m, c, test::training(64, spec::Dtype::kFp8), 8, {}).zero_values(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(Space(m, c, test::training(64), 8, {}).zero_values(), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Space, BucketGridMultipliesOnlyTheStagesThatUseIt) {
  // dp = 2 only: ZeRO 0 and 1 each take every reduce-bucket value; prefetch and max-live
  // grids belong to ZeRO 3 alone.
  SpaceLimits l = tiny_limits();
  l.tp = {1};
  l.pp = {1};
  l.reduce_bucket = {1'000'000, 10'000'000, 100'000'000};
  l.prefetch_bucket = {1'000, 1'000'000};
  l.max_live_parameters = {1'000, 1'000'000};
  const auto without_3 = test::enumerate(tiny_space(l));
  EXPECT_EQ(without_3.size(), 2u * (3 + 3));   // mb 1, 2 × (ZeRO 0 + ZeRO 1) × 3 reduce values
  l.zero = {3};
  const auto with_3 = test::enumerate(tiny_space(l));
  EXPECT_EQ(with_3.size(), 2u * 3 * 2 * 2);    // mb × reduce × prefetch × max-live
}

TEST(Space, BadLimitsNameTheOption) {
  SpaceLimits l = tiny_limits();
  l.tp = {3};
  test::expect_spec_error([&] { tiny_space(l); }, "", "expected a divisor of gpus_per_node");
  try {
    tiny_space(l);
  } catch (const spec::SpecError& e) {
    EXPECT_EQ(e.file(), "--tp");
  }
  test::expect_spec_error([&] { Space(test::bundled_model("tiny"), test::bundled_cluster("cpu-local", 1), test::training(4), 0, {}); },
                          "", "expected at least one GPU");
}

TEST(Space, EmptySpaceSaysWhichAxisEmptiedIt) {
  // tiny has 4 layers and cpu-local 2 GPUs per node: on 16 GPUs (8 nodes) tp·pp <= 8, so dp >= 2,
  // and an odd global batch divides by no data-parallel size.
  const Space space(test::bundled_model("tiny"), test::bundled_cluster("cpu-local", 8), test::training(3), 16, {});
  EXPECT_TRUE(groups(space).empty());
  const std::string why = space.why_empty();
  EXPECT_NE(why.find("global_batch 3"), std::string::npos) << why;
  EXPECT_NE(why.find("is not divisible"), std::string::npos) << why;
  EXPECT_EQ(tiny_space(tiny_limits()).why_empty(), "");
}

TEST(Space, PlanKeysNameEveryChoice) {
  spec::Plan p;
  p.tp = 8;
  p.pp = 4;
  p.dp = 2;
  p.micro_batch = 2;
  p.micro_batches = 8;
  p.schedule = spec::Schedule::kInterleaved;
  p.virtual_stages = 3;
  p.sequence_parallel = true;
  p.recompute = spec::Recompute::kSelective;
  p.zero.stage = 3;
  p.zero.reduce_bucket = 10'000'000;
  p.zero.prefetch_bucket = 1'000'000;
  p.zero.max_live_parameters = 1'000'000'000;
  p.zero.overlap_comm = false;
  p.stage_layers = {3, 3, 3, 3};
  EXPECT_EQ(plan_key(p), "tp8 pp4 dp2 mb2x8 interleaved v3 zero3 sp recompute=selective split=uniform rb=1e7 pf=1e6 live=1e9 no-overlap");
  EXPECT_EQ(short_elems(500'000'000), "5e8");
  EXPECT_EQ(short_elems(12345), "12345");
}

}  // namespace
}  // namespace stagecraft::planner
