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

// The distributed optimizer with experts (header, "split"): ep 2 over dp 4, ZeRO-1. The dense
// positions (N_d = N - N_e) are partitioned over the 4 dp ranks, S_d = ceil(N_d / 4); the routed
// experts' (N_e, this rank's 2 of 4 experts) over their group of tp·dp/ep = 2 ranks, S_e =
// ceil(N_e / 2); each set is padded to its group (padded = N + 4·S_d - N_d + 2·S_e - N_e), a rank
// owns S_d + S_e positions (its dense shard packed first), and over the ranks holding the same
// experts the owned ranges tile each set once.
TEST(StageLayout, TheDistributedOptimizerPartitionsTheExpertsOverTheirOwnGroup) {
  spec::Model m = test::tiny_llama_model();
  m.moe.experts = 4, m.moe.top_k = 2, m.moe.ffn_hidden = 64;
  const program::Program prog =
      program::lower(m, test::tiny_training(), test::make_plan({.dp = 4, .micro_batches = 2, .zero = 1, .ep = 2}));
  ASSERT_TRUE(prog.placement.experts_apart);
  std::vector<int64_t> dense_hits, expert_hits[2];  // by position: how many ranks own it (by ep index)
  for (int64_t d = 0; d < 4; ++d) {
    const StageLayout l(prog, 0, d, 0);
    ASSERT_TRUE(l.split());
    const int64_t ne = total(l.expert_ranges()), nd = l.elems() - ne;
    EXPECT_GT(ne, 0);
    const int64_t sd = (nd + 3) / 4, se = (ne + 1) / 2;
    EXPECT_EQ(l.owned_elems(), sd + se);
    EXPECT_EQ(l.padded_elems(), l.elems() + (4 * sd - nd) + (2 * se - ne));
    ASSERT_EQ(l.partition_sets().size(), 2u);
    const StageLayout::PartitionSet& dense = l.set_of(false);
    const StageLayout::PartitionSet& ex = l.set_of(true);
    EXPECT_EQ(dense.group, 4);
    EXPECT_EQ(dense.index, d);
    EXPECT_EQ(dense.shard, sd);
    EXPECT_EQ(ex.group, 2);
    EXPECT_EQ(ex.index, d / 2);  // l = d·tp + t = d; the experts' group is l mod ep, its place l / ep
    EXPECT_EQ(ex.shard, se);
    EXPECT_EQ(ex.packed, sd);
    // the coordinates run over the sets' positions in flat order: the first expert position is
    // coordinate 0 of the experts' set, the position after it coordinate 1
    EXPECT_EQ(l.coordinate(ex, l.expert_ranges().front().begin), 0);
    EXPECT_EQ(l.coordinate(ex, l.expert_ranges().front().begin + 1), 1);
    EXPECT_EQ(total(l.positions(ex, {0, 2 * se})), 2 * se);
    EXPECT_EQ(total(l.positions(dense, {0, 4 * sd})), 4 * sd);
    if (d == 0) dense_hits.assign(static_cast<std::size_t>(l.padded_elems()), 0);
    if (d < 2) expert_hits[d % 2].assign(static_cast<std::size_t>(l.padded_elems()), 0);
    for (const StageLayout::Owned& o : l.owned()) {
      EXPECT_TRUE(o.reduced);
      const bool in_experts = !clip(ex.positions, o.flat).empty();
      for (int64_t p = o.flat.begin; p < o.flat.end; ++p) {
        ++(in_experts ? expert_hits[d % 2] : dense_hits)[static_cast<std::size_t>(p)];
      }
    }
    // every gradient bucket's positions are consecutive coordinates of one set
    for (std::size_t b = 0; b < prog.grad_buckets.size(); ++b) {
      const std::vector<Range> parts = l.grad_bucket_parts(static_cast<int32_t>(b));
      if (parts.empty()) continue;
      const StageLayout::PartitionSet& set = l.set_of(prog.grad_buckets[b].experts);
      EXPECT_EQ(l.coordinate(set, parts.back().end - 1) + 1 - l.coordinate(set, parts.front().begin), total(parts));
    }
  }
  // dense: each position once over the 4 ranks; experts: once over each ep index's 2 ranks
  // (ranks 0 and 2 hold experts 0-1, ranks 1 and 3 experts 2-3)
  int64_t dense_once = 0, expert_once[2] = {0, 0};
  for (int64_t h : dense_hits) dense_once += h == 1;
  for (int e = 0; e < 2; ++e) {
    for (int64_t h : expert_hits[e]) expert_once[e] += h == 1;
  }
  const StageLayout l0(prog, 0, 0, 0);
  const int64_t ne = total(l0.expert_ranges()), nd = l0.elems() - ne;
  EXPECT_EQ(dense_once, 4 * ((nd + 3) / 4));
  EXPECT_EQ(expert_once[0], 2 * ((ne + 1) / 2));
  EXPECT_EQ(expert_once[1], 2 * ((ne + 1) / 2));
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
