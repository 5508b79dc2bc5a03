// ZeRO across nodes in the lowering: the data-parallel subgroups, and which collective each
// hierarchical variant (MiCS, hybrid sharding, hpZ, Megatron-LM's optimizer instances) issues over
// which of them, counted by hand (docs/program.md, "Hierarchical and quantized ZeRO").
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "core/count/tensors.hpp"
#include "core/program/check.hpp"
#include "core/program/zero.hpp"
#include "core/spec/error.hpp"
#include "program_fixtures.hpp"
#include "support.hpp"

namespace stagecraft::program {
namespace zero_hierarchy_test {

using test::gpt;
using test::lower_json;
using nlohmann::json;

std::vector<const Instr*> all(const Program& prog, Op op, Group group) {
  std::vector<const Instr*> out;
  for (const Instr& in : prog.rank(0)) {
    if (in.op == op && in.group == group) out.push_back(&in);
  }
  return out;
}

// The index of `in` in rank 0's list.
int32_t index_of(const Program& prog, const Instr* in) { return static_cast<int32_t>(in - prog.rank(0).data()); }

TEST(ZeroHierarchy, SubgroupsTakeTheDataParallelRanksInDpIndexOrder) {
  // rank = (stage · dp + d) · tp + t; tp 2, pp 2, dp 8, shard group 4, 2 dp ranks a node.
  // Rank 27 is stage 1, d = (27 / 2) mod 8 = 5, t = 1; a rank of dp index i is (8 + i)·2 + 1.
  const Placement pl{2, 2, 8, 4, 2};
  const auto at = [](std::initializer_list<int64_t> ds) {
    std::vector<int64_t> out;
    for (int64_t d : ds) out.push_back((8 + d) * 2 + 1);
    return out;
  };
  EXPECT_EQ(pl.group_members(Group::kDp, 27), at({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(pl.group_members(Group::kDpShard, 27), at({4, 5, 6, 7}));        // 5 - 5 mod 4 = 4 .. 7
  EXPECT_EQ(pl.group_members(Group::kDpReplica, 27), at({1, 5}));            // 5 mod 4 = 1, step 4
  EXPECT_EQ(pl.group_members(Group::kDpLocal, 27), at({4, 5}));              // 5 - 5 mod 2 = 4 .. 5
  EXPECT_EQ(pl.group_members(Group::kDpCross, 27), at({1, 3, 5, 7}));        // 5 mod 2 = 1, step 2
  EXPECT_EQ(pl.group_members(Group::kDpShardCross, 27), at({5, 7}));         // in 4 .. 7, ≡ 1 mod 2
  // unset sizes are the whole dp group (inner, local) — every subgroup of a plain plan is dp or one rank
  const Placement plain{2, 2, 8};
  EXPECT_EQ(plain.group_members(Group::kDpShard, 27), at({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(plain.group_members(Group::kDpReplica, 27), at({5}));
}

// Two blocks, untied, 2 micro-batches per step, 4 data-parallel ranks in shard groups of 2.
json mics(json extra = json::object()) {
  json z = {{"stage", 3}, {"prefetch_bucket", 20000}, {"param_persistence_threshold", 1000}, {"shard_group", 2}};
  z.update(extra);
  return {{"dp", 4}, {"micro_batch", 1}, {"micro_batches", 2}, {"zero", z}};
}

TEST(ZeroHierarchy, MicsGathersAndReducesInItsShardGroupAndAllReducesReplicasOnceAStep) {
  const Program prog = lower_json(gpt(2, false), mics(), "deepspeed");
  check(prog);
  // every gather and reduce-scatter inside the shard group, none over the whole dp group
  EXPECT_TRUE(all(prog, Op::kGatherParams, Group::kDp).empty());
  EXPECT_TRUE(all(prog, Op::kReduceScatterGrads, Group::kDp).empty());
  const auto rs = all(prog, Op::kReduceScatterGrads, Group::kDpShard);
  const auto ar = all(prog, Op::kAllReduceGrads, Group::kDpReplica);
  const std::size_t buckets = prog.grad_buckets.size();
  EXPECT_EQ(rs.size(), 2 * buckets);  // every micro-batch (ZeRO-3)
  ASSERT_EQ(ar.size(), buckets);      // once a step (MiCS: at the accumulation boundary)
  int32_t last_compute = -1;
  for (const Instr& in : prog.rank(0)) {
    if (is_compute(in.op)) last_compute = static_cast<int32_t>(&in - prog.rank(0).data());
  }
  for (const Instr* a : ar) {
    const Bucket& b = prog.grad_buckets[static_cast<std::size_t>(a->bucket)];
    // the shard of the bucket: ⌈elems / 2⌉ elements of 2 bytes (bf16), on DeepSpeed's reduce stream
    EXPECT_EQ(a->elems, (b.elems + 1) / 2);
    EXPECT_EQ(a->bytes, a->elems * 2);
    EXPECT_EQ(a->lane, Lane::kDpReduce);
    EXPECT_GT(index_of(prog, a), last_compute);
    // after the bucket's last reduce-scatter (the second micro-batch's)
    const auto deps = prog.role_of(0).deps_of(*a);
    const Instr& before = prog.rank(0)[static_cast<std::size_t>(deps.front())];
    EXPECT_EQ(before.op, Op::kReduceScatterGrads);
    EXPECT_EQ(before.bucket, a->bucket);
    EXPECT_EQ(before.mb, 1);
  }
  // the optimizer steps the shard of 1/2 of the stage's parameters
  int64_t params = 0;
  for (const ChunkInfo& c : prog.chunks) params += c.params;
  for (const Instr& in : prog.rank(0)) {
    if (in.op == Op::kOptimizerStep) {
      EXPECT_EQ(in.elems, (params + 1) / 2);
    }
  }
  // MiCS's hierarchical gather: over the same local rank of the shard group's nodes (1/l of the
  // bucket, l = 1 dp rank a node here), then inside the node (the whole bucket)
  const Program hier = lower_json(gpt(2, false), mics({{"shard_group", 4}, {"hierarchical_gather", true}, {"local_group", 1}}), "deepspeed");
  check(hier);
  const auto cross = all(hier, Op::kGatherParams, Group::kDpShardCross);
  const auto local = all(hier, Op::kGatherParams, Group::kDpLocal);
  ASSERT_EQ(cross.size(), local.size());
  for (std::size_t i = 0; i < cross.size(); ++i) {
    const Bucket& b = hier.param_buckets[static_cast<std::size_t>(cross[i]->bucket)];
    EXPECT_EQ(cross[i]->bytes, b.elems * 2 / 1);
    EXPECT_EQ(local[i]->bytes, b.elems * 2);
    EXPECT_EQ(index_of(hier, local[i]), index_of(hier, cross[i]) + 1);
  }
}

TEST(ZeroHierarchy, HybridShardingAllReducesEachShardAfterEveryReduceScatterOnItsOwnStream) {
  const Program prog = lower_json(gpt(2, false), mics(), "fsdp");
  check(prog);
  const auto rs = all(prog, Op::kReduceScatterGrads, Group::kDpShard);
  const auto ar = all(prog, Op::kAllReduceGrads, Group::kDpReplica);
  ASSERT_EQ(ar.size(), rs.size());  // every backward (HYBRID_SHARD), one block each
  ASSERT_EQ(rs.size(), 2 * prog.grad_buckets.size());
  for (std::size_t i = 0; i < ar.size(); ++i) {
    EXPECT_EQ(ar[i]->lane, Lane::kDpReplica);   // FSDP's _all_reduce_stream
    EXPECT_EQ(ar[i]->bucket, rs[i]->bucket);
    EXPECT_EQ(ar[i]->mb, rs[i]->mb);
    EXPECT_EQ(prog.rank(0)[static_cast<std::size_t>(prog.role_of(0).deps_of(*ar[i]).front())].op, Op::kReduceScatterGrads);
  }
  // FSDP1 has no deferred all-reduce; FSDP2's set_requires_all_reduce(False) all-reduces once a step
  stagecraft::test::expect_spec_error([&] { lower_json(gpt(2, false), mics({{"replica_sync", "step"}}), "fsdp"); },
                          "/zero/replica_sync", "FSDP's HYBRID_SHARD all-reduces every backward");
  const Program fsdp2 = lower_json(gpt(2, false), mics({{"replica_sync", "step"}}), "fsdp2");
  check(fsdp2);
  EXPECT_EQ(all(fsdp2, Op::kAllReduceGrads, Group::kDpReplica).size(), fsdp2.grad_buckets.size());
  // _HYBRID_SHARD_ZERO2: ZeRO-2 inside the shard group — no gathers before use, one all-gather of the
  // updated parameters inside the group after the step
  json z2 = mics();
  z2["zero"]["stage"] = 2;
  const Program zero2 = lower_json(gpt(2, false), z2, "fsdp");
  check(zero2);
  EXPECT_TRUE(all(zero2, Op::kGatherParams, Group::kDpShard).empty());
  EXPECT_FALSE(all(zero2, Op::kAllGatherParams, Group::kDpShard).empty());
  EXPECT_TRUE(all(zero2, Op::kAllGatherParams, Group::kDp).empty());
}

TEST(ZeroHierarchy, HpzGathersABucketGloballyOnceAStepThenFromItsSecondaryPartition) {
  json plan = {{"dp", 4}, {"micro_batch", 1}, {"micro_batches", 2},
               {"zero", {{"stage", 3}, {"prefetch_bucket", 20000}, {"param_persistence_threshold", 1000}, {"hpz_group", 2},
                         {"max_reuse_distance", 0}}}};
  const Program prog = lower_json(gpt(2, false), plan, "deepspeed");
  check(prog);
  std::map<int32_t, int> global, secondary;
  for (const Instr& in : prog.rank(0)) {
    if (in.op != Op::kGatherParams) continue;
    ASSERT_TRUE(in.group == Group::kDp || in.group == Group::kDpShard);
    // the first gather of each bucket is global, every later one from the secondary copy
    if (in.group == Group::kDp) {
      EXPECT_EQ(secondary[in.bucket], 0) << "bucket " << in.bucket;
    }
    (in.group == Group::kDp ? global : secondary)[in.bucket]++;
  }
  for (const Bucket& b : prog.param_buckets) {
    const int32_t i = static_cast<int32_t>(&b - prog.param_buckets.data());
    if (b.elems == 0) continue;
    EXPECT_EQ(global[i], 1);
    // reuse distance 0: regathered for every pass: forward and backward of 2 micro-batches, 4 in all
    EXPECT_EQ(secondary[i], 3);
  }
  // gradients stay partitioned over the whole group
  EXPECT_EQ(all(prog, Op::kReduceScatterGrads, Group::kDp).size(), 2 * prog.grad_buckets.size());
  EXPECT_TRUE(all(prog, Op::kAllReduceGrads, Group::kDpReplica).empty());
  // FSDP2's reshard_after_forward=2: every forward gathers globally, every backward inside the group
  const Program fsdp2 = lower_json(gpt(2, false), plan, "fsdp2");
  check(fsdp2);
  for (std::size_t k = 0; k < fsdp2.rank(0).size(); ++k) {
    const Instr& in = fsdp2.rank(0)[k];
    if (in.op != Op::kGatherParams) continue;
    // the compute it serves comes next on the compute lane
    const auto next = std::find_if(fsdp2.rank(0).begin() + static_cast<std::ptrdiff_t>(k), fsdp2.rank(0).end(), [&](const Instr& c) {
      return is_compute(c.op) && c.bucket == in.bucket;
    });
    ASSERT_NE(next, fsdp2.rank(0).end());
    EXPECT_EQ(in.group, next->op == Op::kForward ? Group::kDp : Group::kDpShard) << to_string(next->op);
  }
}

TEST(ZeroHierarchy, MegatronInstancesReduceInTheirGroupAndAllReduceAcrossInstancesOnce) {
  // --num-distributed-optimizer-instances 2 over dp 4: the distributed optimizer over 2 ranks
  json plan = {{"dp", 4}, {"micro_batch", 1}, {"micro_batches", 2}, {"zero", {{"stage", 1}, {"shard_group", 2}}}};
  const Program prog = lower_json(gpt(2, false), plan, "megatron");
  check(prog);
  const auto rs = all(prog, Op::kReduceScatterGrads, Group::kDpShard);
  const auto ar = all(prog, Op::kAllReduceGrads, Group::kDpReplica);
  EXPECT_EQ(rs.size(), prog.grad_buckets.size());  // once a step (ZeRO-1)
  EXPECT_EQ(ar.size(), rs.size());
  EXPECT_FALSE(all(prog, Op::kAllGatherParams, Group::kDpShard).empty());
  EXPECT_TRUE(all(prog, Op::kAllGatherParams, Group::kDp).empty());
  // a communicator per group: a replica all-reduce waits for its own reduce-scatter and the replica
  // all-reduce before it, not for other reduce-scatters
  for (const Instr* a : ar) {
    for (int32_t d : prog.role_of(0).deps_of(*a)) {
      const Instr& dep = prog.rank(0)[static_cast<std::size_t>(d)];
      EXPECT_TRUE((dep.op == Op::kReduceScatterGrads && dep.bucket == a->bucket) || dep.group == Group::kDpReplica);
    }
  }
}

TEST(ZeroHierarchy, RefusesWhatTheFrameworksDoNotRun) {
  const auto refuse = [](json plan, const json& framework, const std::string& pointer, const std::string& why) {
    stagecraft::test::expect_spec_error([&] { lower_json(gpt(2, false), plan, framework); }, pointer, why);
  };
  refuse(mics({{"shard_group", 3}}), "deepspeed", "/zero/shard_group", "a divisor of dp (4)");
  json z2 = mics();
  z2["zero"]["stage"] = 2;
  refuse(z2, "deepspeed", "/zero/shard_group", "MiCS is a ZeRO-3 engine");
  refuse(mics(), "deepspeed-0.5", "/zero/shard_group", "not in deepspeed-0.5");
  refuse(mics({{"replica_sync", "micro_batch"}}), "deepspeed", "/zero/replica_sync", "accumulation boundary");
  refuse(mics({{"hierarchical_gather", true}}), "deepspeed", "/zero/hierarchical_gather", "local_group");
  json hpz = {{"dp", 4}, {"zero", {{"stage", 3}, {"hpz_group", 2}}}};
  refuse(hpz, "fsdp", "/zero/hpz_group", "reshard_after_forward");
  hpz["zero"]["hpz_group"] = 3;
  refuse(hpz, "deepspeed", "/zero/hpz_group", "a divisor of dp (4)");
  refuse({{"dp", 4}, {"zero", {{"stage", 3}, {"quantized_gradients", true}}}}, "deepspeed", "/zero/quantized_gradients",
         "local_group");
  stagecraft::test::expect_spec_error([] { spec::plan_from_json({{"dp", 4}, {"zero", {{"stage", 2}, {"hpz_group", 2}}}}, "plan.json"); },
                          "/zero/hpz_group", "ZeRO stage is 3");
  stagecraft::test::expect_spec_error(
      [] { spec::plan_from_json({{"dp", 4}, {"zero", {{"stage", 3}, {"hpz_group", 2}, {"shard_group", 2}}}}, "plan.json"); },
      "/zero/hpz_group", "primary partition");
}

TEST(ZeroHierarchy, QuantizerGroupsFollowDeepSpeedsRule) {
  // CUDAQuantizer.quantize, target 8000: g = ⌈n/8000⌉, raised until 8g | n, doubled while 16g | n and n/g > 8000
  EXPECT_EQ(qwz_groups(8192, 8000), 2);       // ⌈8192/8000⌉ = 2, 16 | 8192: 8192/2 = 4096 ≤ 8000, keep
  EXPECT_EQ(qwz_groups(4096, 8000), 1);       // 1 group of 4096
  EXPECT_EQ(qwz_groups(24000, 8000), 3);      // 3: 24 | 24000; 48 | 24000 but 24000/3 = 8000 is not > 8000
  EXPECT_EQ(qwz_groups(8008, 8000), 7);       // 2 .. 6 leave 8g ∤ 8008 (8008 = 8·7·11·13): 7 groups of 1144
  EXPECT_EQ(qwz_groups(100, 8000), 0);        // 8g never divides 100 below g = 100: DeepSpeed's assert fails
  // the divisor search equals DeepSpeed's loop, written out literally, on every multiple of 8 up to 80000
  const auto literal = [](int64_t n) -> int64_t {
    int64_t g = (n + 7999) / 8000;
    while (g < n) {
      if (n % (8 * g) == 0) break;
      ++g;
    }
    while (n % (8 * g * 2) == 0 && n / g > 8000) g *= 2;
    if (n % (8 * g) != 0 || n / g >= 16000 || n <= g) return 0;
    return g;
  };
  for (int64_t n = 8; n <= 80000; n += 8) ASSERT_EQ(qwz_groups(n, 8000), literal(n)) << n;
}

TEST(ZeroHierarchy, QuantizedGathersMoveInt8ValuesAndScalesInTwoCollectivesEach) {
  // dp 4, qwZ: the attention bucket (threshold 1000: qkv 12288 and out 4096 gathered, one collective
  // with prefetch 20000) moves 12288 + 4096 = 16384 int8 values; its shard ⌈12288/4⌉ + ⌈4096/4⌉ = 4096
  // takes qwz_groups(4096) = 1 scale per rank: 4 · 1 · 4 = 16 bytes of scales.
  json plan = {{"dp", 4},
               {"zero", {{"stage", 3}, {"prefetch_bucket", 20000}, {"param_persistence_threshold", 1000}, {"quantized_weights", true}}}};
  const Program prog = lower_json(gpt(2, false), plan, "deepspeed");
  check(prog);
  bool seen = false;
  for (const Instr& in : prog.rank(0)) {
    if (in.op != Op::kGatherParams || in.unit_begin != 1) continue;
    seen = true;
    EXPECT_EQ(in.flags & kFlagQuantized, kFlagQuantized);
    EXPECT_EQ(in.elems, 12288 + 4096);
    EXPECT_EQ(in.bytes, 16384 + 16);
    EXPECT_EQ(prog.collectives_of(in), 2);  // the values and the scales
  }
  EXPECT_TRUE(seen);
}

TEST(ZeroHierarchy, QgzAllToAllsMatricesInsideThenAcrossNodesAndReduceScattersTheRest) {
  // dp 4 on 2 nodes (local_group 2), ZeRO-3, qgZ. A whole-block gradient bucket (reduce_bucket large)
  // of gpt(1): every matrix's n divides by 2·4 = 8 — embedding wte [128 x 64] 8192 and wpe [16 x 64]
  // 1024, qkv [64 x 192] 12288, out 4096, fc1 16384, fc2 16384, lm head 8192 — all-to-all'd; the
  // vectors (norm weights and biases, linear biases) are reduce-scattered one by one.
  json plan = {{"dp", 4}, {"micro_batch", 1}, {"micro_batches", 1},
               {"zero", {{"stage", 3}, {"reduce_bucket", 1000000}, {"local_group", 2}, {"quantized_gradients", true}}}};
  const Program prog = lower_json(gpt(1, false), plan, "deepspeed");
  check(prog);
  ASSERT_EQ(prog.grad_buckets.size(), 1u);
  const Bucket& b = prog.grad_buckets[0];
  const int64_t matrices = 8192 + 1024 + 12288 + 4096 + 16384 + 16384 + 8192;
  // groups max(d, 4): wte 128, wpe 64, qkv 192, out 64, fc1 256, fc2 256, lm head 128
  const int64_t groups = 128 + 64 + 192 + 64 + 256 + 256 + 128;
  EXPECT_EQ(b.qgz_matrices, 7);
  EXPECT_EQ(b.qgz_elems, matrices);
  EXPECT_EQ(b.qgz_groups, groups);
  // the rest are the vectors (rows == 1 in the tensor table): norm1 and norm2 weights and biases,
  // the qkv, out, fc1 and fc2 biases, the final norm's weight and bias (and an LM-head bias if any)
  int32_t vectors = 0;
  int64_t vector_elems = 0;
  for (int32_t u = 0; u < unit_count(gpt(1, false)); ++u) {
    for (const count::TensorSpec& t : count::unit_tensors(gpt(1, false), u, 1)) {
      if (t.rows != 1) continue;
      ++vectors;
      vector_elems += t.elems();
    }
  }
  EXPECT_GE(vectors, 10);
  EXPECT_EQ(b.elems, matrices + vector_elems);
  EXPECT_EQ(b.qgz_fallbacks, vectors);
  const auto local = all(prog, Op::kAllToAll, Group::kDpLocal);
  const auto cross = all(prog, Op::kAllToAll, Group::kDpCross);
  const auto rs = all(prog, Op::kReduceScatterGrads, Group::kDp);
  ASSERT_EQ(local.size(), 1u);
  ASSERT_EQ(cross.size(), 1u);
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(local[0]->bytes, matrices / 2 + 4 * groups);            // int4 values, fp32 scales
  EXPECT_EQ(cross[0]->bytes, matrices / (2 * 2) + 4 * (groups / 2)); // reduced over the node's 2 ranks
  EXPECT_EQ(prog.collectives_of(*local[0]), 2 * 7);                 // values and scales per matrix
  EXPECT_EQ(rs[0]->elems, b.elems - matrices);
  EXPECT_EQ(rs[0]->bytes, (b.elems - matrices) * 2);
  EXPECT_EQ(prog.collectives_of(*rs[0]), b.qgz_fallbacks);
  // one node (local_group 4 = dp): DeepSpeed's qgZ is off, a plain reduce-scatter
  plan["zero"]["local_group"] = 4;
  const Program one = lower_json(gpt(1, false), plan, "deepspeed");
  EXPECT_TRUE(all(one, Op::kAllToAll, Group::kDpLocal).empty());
  EXPECT_EQ(all(one, Op::kReduceScatterGrads, Group::kDp).size(), 1u);
}

// Every variant × framework that runs it × tp 1-2 × pp 1-2 × schedule lowers to a Program the
// checks pass (matching, order, no deadlock), tied and untied.
TEST(ZeroHierarchy, EveryVariantLowersWithoutADeadlock) {
  struct Variant {
    const char* framework;
    int stage;
    json zero;
  };
  const std::vector<Variant> variants = {
      {"deepspeed", 3, {{"shard_group", 2}}},
      {"deepspeed", 3, {{"shard_group", 4}, {"hierarchical_gather", true}, {"local_group", 2}}},
      {"deepspeed", 3, {{"hpz_group", 2}}},
      {"deepspeed", 3, {{"hpz_group", 2}, {"quantized_weights", true}, {"quantized_gradients", true}, {"local_group", 2}}},
      {"fsdp", 3, {{"shard_group", 2}}},
      {"fsdp", 2, {{"shard_group", 2}}},
      {"fsdp2", 3, {{"shard_group", 2}, {"replica_sync", "step"}}},
      {"fsdp2", 3, {{"hpz_group", 2}}},
      {"megatron", 1, {{"shard_group", 2}}},
  };
  int lowered = 0;
  for (const Variant& v : variants) {
    for (bool tied : {true, false}) {
      for (int64_t tp : {1, 2}) {
        for (int64_t pp : {1, 2}) {
          for (const char* schedule : {"1f1b", "gpipe", "interleaved"}) {
            if (std::string(schedule) == "interleaved" && pp < 2) continue;
            json z = v.zero;
            z["stage"] = v.stage;
            z["overlap_comm"] = true;
            json plan = {{"tp", tp}, {"pp", pp}, {"dp", 4}, {"micro_batch", 1}, {"micro_batches", 2}, {"schedule", schedule}, {"zero", z}};
            if (std::string(schedule) == "interleaved") plan["virtual_stages"] = 2;
            const Program prog = lower_json(gpt(4, tied), plan, v.framework);
            EXPECT_NO_THROW(check(prog)) << v.framework << " " << z.dump() << " tp" << tp << " pp" << pp << " " << schedule;
            ++lowered;
          }
        }
      }
    }
  }
  EXPECT_EQ(lowered, 9 * 2 * 2 * (2 + 3));  // variants × tied × tp × (pp 1: two schedules, pp 2: three)
}

}  // namespace zero_hierarchy_test
}  // namespace stagecraft::program
