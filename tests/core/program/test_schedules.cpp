// Schedules: activation sets in flight per stage and bubble-free orderings, derived by hand.
#include <algorithm>

#include <gtest/gtest.h>

#include "core/program/analysis.hpp"
#include "core/program/check.hpp"
#include "core/program/schedules/schedules.hpp"
#include "program_fixtures.hpp"

namespace stagecraft::program {
namespace {

using test::gpt;
using test::lower_json;

TEST(Schedules, OneFOneBHoldsMinOfRemainingStagesAndMicroBatches) {
  for (int64_t m : {2, 4, 8}) {
    const int64_t p = 4;
    Program prog = lower_json(gpt(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "1f1b"}});
    check(prog);
    for (int64_t i = 0; i < p; ++i) {
      SCOPED_TRACE("m=" + std::to_string(m) + " stage " + std::to_string(i));
      EXPECT_EQ(peak_activation_sets(prog.roles[i]), std::min(p - i, m));
    }
  }
}

TEST(Schedules, GpipeHoldsEveryMicroBatch) {
  const int64_t p = 4, m = 6;
  Program prog = lower_json(gpt(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "gpipe"}});
  check(prog);
  for (int64_t i = 0; i < p; ++i) EXPECT_EQ(peak_activation_sets(prog.roles[i]), m);
}

TEST(Schedules, InterleavedHoldsMegatronsWarmupPlusOne) {
  const int64_t p = 4, m = 8, v = 2;
  Program prog = lower_json(gpt(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "interleaved"}, {"virtual_stages", v}});
  check(prog);
  for (int64_t i = 0; i < p; ++i) {
    // Megatron: warm-up = min(2(p-i-1) + (v-1)p, m v) chunk passes, then one more forward before
    // the first backward.
    const int64_t warmup = std::min(2 * (p - i - 1) + (v - 1) * p, m * v);
    EXPECT_EQ(peak_activation_sets(prog.roles[i]), warmup + 1) << "stage " << i;
  }
  // Stage 0 in micro-batch equivalents (each chunk holds 1/v of the stage's layers):
  // (pv + p - 1)/v = p (1 + (p-1)/(p v)), the REFERENCE.md factor.
  EXPECT_EQ(peak_activation_sets(prog.roles[0]), p * v + p - 1);
}

TEST(Schedules, InterleavedOrderFollowsMegatron) {
  // p = 2, m = 4, v = 2, stage 0: warm-up 2(2-0-1) + (2-1)2 = 4 forwards: (chunk, mb) =
  // (0,0) (0,1) (1,0) (1,1); then F(0,2) B(1,0), F(0,3) B(1,1), F(1,2) B(0,0), F(1,3) B(0,1);
  // cool-down B(1,2) B(1,3) B(0,2) B(0,3).
  std::vector<Step> s = interleaved_steps(2, 4, 2, 0);
  const std::vector<std::tuple<Pass, int, int>> expected = {
      {Pass::kForward, 0, 0},  {Pass::kForward, 0, 1},  {Pass::kForward, 1, 0},  {Pass::kForward, 1, 1},
      {Pass::kForward, 0, 2},  {Pass::kBackward, 1, 0}, {Pass::kForward, 0, 3},  {Pass::kBackward, 1, 1},
      {Pass::kForward, 1, 2},  {Pass::kBackward, 0, 0}, {Pass::kForward, 1, 3},  {Pass::kBackward, 0, 1},
      {Pass::kBackward, 1, 2}, {Pass::kBackward, 1, 3}, {Pass::kBackward, 0, 2}, {Pass::kBackward, 0, 3}};
  ASSERT_EQ(s.size(), expected.size());
  for (std::size_t k = 0; k < s.size(); ++k) {
    EXPECT_EQ(s[k].pass, std::get<0>(expected[k])) << k;
    EXPECT_EQ(s[k].chunk, std::get<1>(expected[k])) << k;
    EXPECT_EQ(s[k].mb, std::get<2>(expected[k])) << k;
  }
}

TEST(Schedules, ZbH1HoldsNoMoreThanOneFOneBAndSplitsBackward) {
  const int64_t p = 4, m = 8;
  Program zb = lower_json(gpt(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "zb-h1"}});
  check(zb);
  for (int64_t i = 0; i < p; ++i) {
    EXPECT_LE(peak_activation_sets(zb.roles[i]), std::min(p - i, m)) << "stage " << i;
    const auto counts = op_counts(zb.roles[i]);
    EXPECT_EQ(counts[static_cast<int>(Op::kBackward)], 0);
    EXPECT_EQ(counts[static_cast<int>(Op::kBackwardInput)], m);
    EXPECT_EQ(counts[static_cast<int>(Op::kBackwardWeight)], m);
  }
}

TEST(Schedules, ZbH1DefersWeightGradientsIntoTheCooldown) {
  // With unit-time passes, stage 0 of 1F1B idles between its last backwards while later stages
  // drain; ZB-H1 fills that time with deferred W passes, so stage 0's last passes are W, not B.
  std::vector<std::vector<Step>> s = zb_h1_steps(4, 8);
  ASSERT_EQ(s[0].size(), 3u * 8);
  EXPECT_EQ(s[0].back().pass, Pass::kBackwardWeight);
  const auto first_w = std::find_if(s[0].begin(), s[0].end(), [](const Step& x) { return x.pass == Pass::kBackwardWeight; });
  const auto first_b = std::find_if(s[0].begin(), s[0].end(), [](const Step& x) { return x.pass == Pass::kBackwardInput; });
  EXPECT_GT(first_w - s[0].begin(), first_b - s[0].begin());
}

}  // namespace
}  // namespace stagecraft::program
