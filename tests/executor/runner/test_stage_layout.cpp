// StageLayout: the Program's chunk and bucket sizes must agree with the model's layouts for
// every plan the executor runs, and ZeRO's shards must tile the stage buffer.
#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/zero/ranges.hpp"
#include "executor/zero/stage_layout.hpp"
#include "plans.hpp"

namespace stagecraft::executor {
namespace {

TEST(Ranges, SubtractAndClip) {
  const std::vector<Range> holes = {{2, 4}, {6, 7}, {9, 20}};
  const std::vector<Range> left = subtract(Range{0, 10}, holes);
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0].begin, 0);
  EXPECT_EQ(left[0].end, 2);
  EXPECT_EQ(left[1].begin, 4);
  EXPECT_EQ(left[1].end, 6);
  EXPECT_EQ(left[2].begin, 7);
  EXPECT_EQ(left[2].end, 9);
  EXPECT_EQ(total(clip(holes, {3, 10})), 1 + 1 + 1);
  EXPECT_EQ(intersect({0, 3}, {5, 9}).size(), 0);
}

TEST(StageLayout, AgreesWithTheProgramForEveryTestPlan) {
  std::vector<test::PlanSpec> plans = test::equivalence_matrix();
  plans.push_back(test::reference_plan());
  for (const test::PlanSpec& spec : plans) {
    const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), test::make_plan(spec));
    int64_t stage_total = 0;
    for (int64_t s = 0; s < prog.plan.pp; ++s) {
      for (int64_t d = 0; d < prog.plan.dp; ++d) {
        const StageLayout l(prog, s, d, 0);  // throws on any disagreement
        EXPECT_EQ(l.padded_elems() % prog.plan.dp, 0) << spec.name();
        EXPECT_GE(l.padded_elems(), l.elems()) << spec.name();
        EXPECT_LT(l.padded_elems() - l.elems(), prog.plan.dp) << spec.name();
        for (const program::Bucket& b : prog.grad_buckets) {
          if (b.stage != s) continue;
          const Range r = l.units(b.chunk, b.unit_begin, b.unit_end);
          const std::vector<int64_t> counts = l.shard_counts(r);
          int64_t sum = 0;
          for (int64_t c : counts) sum += c;
          EXPECT_EQ(sum, r.size()) << spec.name() << ": shards tile the bucket";
        }
        const bool last_with_copy = prog.plan.pp > 1 && s == prog.plan.pp - 1;
        EXPECT_EQ(l.norm_excluded().size(), last_with_copy ? 1u : 0u) << spec.name();
        if (d == 0) stage_total += l.elems();
      }
    }
    const int64_t full = ParamLayout(prog.model).size();
    const int64_t copies = prog.plan.pp > 1 ? prog.model.vocab * prog.model.hidden : 0;
    EXPECT_EQ(stage_total, full + copies) << spec.name() << ": every parameter on one stage (+ the tied copy)";
  }
}

TEST(StageLayout, Zero3KeepsSmallTensorsWhole) {
  const program::Program prog =
      program::lower(test::tiny_model(), test::tiny_training(), test::make_plan({.dp = 4, .micro_batches = 2, .zero = 3}));
  const StageLayout l(prog, 0, 1, 0);
  ASSERT_TRUE(l.zero3_gathers());
  EXPECT_EQ(l.own_shard().begin, l.shard_elems());
  // Tiny: norms and biases of 64 elements are persistent; qkv biases (192) and MLP up biases (256) are not.
  const ParamLayout& chunk = l.chunk(0);
  int64_t expected = 0;
  for (const TensorSlot& t : chunk.tensors()) expected += t.size() < 100 ? t.size() : 0;
  EXPECT_EQ(l.persistent_elems(), expected);
  EXPECT_EQ(l.persistent_index(l.persistent().front().begin), 0);
  const Range qkv_b = l.tensor(0, "block.0.attn.qkv.b");
  EXPECT_TRUE(clip(l.persistent(), qkv_b).empty());
}

}  // namespace
}  // namespace stagecraft::executor
