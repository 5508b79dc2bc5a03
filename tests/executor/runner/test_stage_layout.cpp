// StageLayout: the Program's chunk and bucket sizes must agree with the model's layouts for
// every plan the executor runs, and ZeRO's shards must tile the stage buffer.
#include <gtest/gtest.h>

#include "core/count/tensors.hpp"
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

// Tensor parallelism: every tp rank's layout agrees with the Program (its shards), the ranks'
// layouts have one shape, and the global norm leaves out, on tp ranks other than 0, exactly the
// tensors every rank holds whole. Summed over the tp ranks (replicated tensors once, the vocab
// tables' padding rows dropped) a stage's parameters are the unsharded stage's.
TEST(StageLayout, EveryTensorParallelRankAgreesWithTheProgram) {
  for (const test::PlanSpec& spec : test::tensor_parallel_matrix()) {
    const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), test::make_plan(spec));
    for (int64_t s = 0; s < prog.plan.pp; ++s) {
      int64_t unique = 0;
      for (int64_t t = 0; t < prog.plan.tp; ++t) {
        const StageLayout l(prog, s, 0, t);  // throws on any disagreement
        EXPECT_EQ(l.elems(), StageLayout(prog, s, 0, 0).elems()) << spec.name();
        int64_t replicated = 0, padding = 0;
        for (int64_t c = 0; c < l.chunk_count(); ++c) {
          for (const TensorSlot& slot : l.chunk(c).tensors()) {
            replicated += slot.replicated ? slot.size() : 0;
            for (int64_t k = 0; k < slot.size(); ++k) padding += slot.map.global_index(slot.spec, k / slot.cols, k % slot.cols) < 0;
          }
        }
        int64_t excluded = 0;
        for (const Range& r : l.norm_excluded()) excluded += r.size();
        const bool copy = prog.plan.pp > 1 && s == prog.plan.pp - 1;
        const int64_t copy_elems = copy ? count::vocab_per_rank(prog.model, prog.plan.tp) * prog.model.hidden : 0;
        EXPECT_EQ(excluded, (t > 0 ? replicated : 0) + copy_elems) << spec.name() << " tp " << t;
        unique += l.elems() - padding - (t > 0 ? replicated : 0) - copy_elems;
      }
      // the unsharded stage (tp = 1), without its tied copy
      const program::ChunkInfo& first = prog.chunk(s, 0);
      const program::ChunkInfo& last = prog.chunk(s, prog.plan.virtual_stages - 1);
      if (prog.plan.virtual_stages == 1) {
        const ParamLayout whole(prog.model, first.unit_begin, last.unit_end);
        const int64_t copy = whole.head_has_wte_copy() ? whole.find("embedding.wte").size() : 0;
        EXPECT_EQ(unique, whole.size() - copy) << spec.name() << " stage " << s;
      }
    }
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

// A shard group of 2 over dp 4 (MiCS, hybrid sharding): the buffer is cut in 2 shards, dp ranks d
// and d + 2 hold the same one (d mod 2), and a bucket's counts are the group's 2.
TEST(StageLayout, ShardGroupsPartitionOverTheirRanksAndReplicasHoldTheSameShard) {
  const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(),
                                               test::make_plan({.dp = 4, .micro_batches = 2, .zero = 3, .shard_group = 2}));
  for (int64_t d = 0; d < 4; ++d) {
    const StageLayout l(prog, 0, d, 0);
    EXPECT_EQ(l.partition(), 2);
    EXPECT_EQ(l.partition_index(), d % 2);
    EXPECT_EQ(l.replica_index(), d / 2);
    EXPECT_EQ(l.shard_elems(), (l.elems() + 1) / 2);
    EXPECT_EQ(l.own_shard().begin, (d % 2) * l.shard_elems());
    EXPECT_EQ(l.padded_elems(), 2 * l.shard_elems());
    for (const program::Bucket& b : prog.grad_buckets) {
      const Range r = l.units(b.chunk, b.unit_begin, b.unit_end);
      const std::vector<int64_t> counts = l.shard_counts(r);
      ASSERT_EQ(counts.size(), 2u);
      EXPECT_EQ(counts[0] + counts[1], r.size());
    }
  }
}

// hpZ over 2 of dp 4: the primary partition stays over 4; a bucket's secondary slices are its 2
// halves (the first ⌈n/2⌉), rank d keeping slice d mod 2, and they tile any piece of it.
TEST(StageLayout, HpzSlicesABucketInHalvesForItsSecondaryGroup) {
  const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(),
                                               test::make_plan({.dp = 4, .micro_batches = 2, .zero = 3, .hpz_group = 2}));
  const StageLayout l(prog, 0, 3, 0);
  EXPECT_EQ(l.partition(), 4);
  EXPECT_EQ(l.hpz_group(), 2);
  const Range r = l.param_bucket(1);
  const int64_t half = (r.size() + 1) / 2;
  EXPECT_EQ(l.secondary_slice(r, 0).begin, r.begin);
  EXPECT_EQ(l.secondary_slice(r, 0).end, r.begin + half);
  EXPECT_EQ(l.secondary_slice(r, 1).end, r.end);
  EXPECT_EQ(l.own_secondary(r).begin, r.begin + half);  // d = 3: slice 1
  EXPECT_EQ(l.secondary_counts(r, r), (std::vector<int64_t>{half, r.size() - half}));
  EXPECT_EQ(l.secondary_counts(r, {r.begin + 1, r.begin + 3}), (std::vector<int64_t>{2, 0}));
}

// qgZ over dp 4: each gradient bucket splits into the matrices whose elements divide by 8 (each
// partitioned by the shards: part d = tensor ∩ shard d) and the other tensors; together they are
// the bucket. (The constructor checks the counts against the Program's.)
TEST(StageLayout, QgzSplitsABucketIntoPartitionedMatricesAndFallbacks) {
  const program::Program prog = program::lower(
      test::tiny_model(), test::tiny_training(),
      test::make_plan({.dp = 4, .micro_batches = 2, .zero = 3, .local_group = 2, .qgz = true}));
  const StageLayout l(prog, 0, 1, 0);
  int64_t matrices = 0;
  for (int32_t b = 0; b < static_cast<int32_t>(prog.grad_buckets.size()); ++b) {
    ASSERT_TRUE(l.qgz(b));
    const QgzSplit& split = l.qgz_split(b);
    int64_t covered = 0;
    for (const QgzMatrix& m : split.matrices) {
      EXPECT_EQ(m.range().size() % 8, 0);
      EXPECT_EQ(m.local(), 2);
      for (int64_t d = 0; d < 4; ++d) {
        const Range want = intersect(m.range(), l.shard(d));
        EXPECT_EQ(m.part(d).size(), want.size());
        if (want.size() > 0) {
          EXPECT_EQ(m.part(d).begin, want.begin);
        }
      }
      covered += m.range().size();
      ++matrices;
    }
    for (const Range& f : split.fallbacks) covered += f.size();
    EXPECT_EQ(covered, l.grad_bucket(b).size());
  }
  EXPECT_GT(matrices, 0);
}

}  // namespace
}  // namespace stagecraft::executor
