// Framework profiles in the lowering: how many collectives a bucket takes, when a gather is
// issued, what a gradient reduction moves — each against a hand count (spec/framework.hpp).
#include <algorithm>
#include <map>
#include <tuple>

#include <gtest/gtest.h>

#include "core/program/check.hpp"
#include "core/spec/error.hpp"
#include "program_fixtures.hpp"

namespace stagecraft::program {
namespace {

using test::gpt;
using test::lower_json;

// gpt(): h = 64, ffn 256, vocab 128, seq 16, biases and LayerNorm biases. Per block:
//   attention: norm1 64 + 64, qkv 64·192 = 12288 (+ bias 192), out 64·64 = 4096 (+ 64)
//   MLP:       norm2 64 + 64, fc1 64·256 = 16384 (+ 256), fc2 16384 (+ 64)
// embedding wte 128·64 = 8192, wpe 16·64 = 1024; head: final norm (64 + 64), lm head 8192 untied.
nlohmann::json zero3(int64_t prefetch_bucket, int64_t threshold, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json z = {{"stage", 3}, {"prefetch_bucket", prefetch_bucket}, {"param_persistence_threshold", threshold}};
  z.update(extra);
  return z;
}

std::vector<const Bucket*> unit_buckets(const Program& prog) {
  std::vector<const Bucket*> out;
  for (const Bucket& b : prog.param_buckets) out.push_back(&b);
  return out;
}

TEST(Framework, DeepSpeedGathersOneCollectivePerLinearOnceLinearsFillThePrefetchBucket) {
  // prefetch_bucket 1: every tensor closes its collective; threshold 1000 keeps biases and norms
  // whole. Each unit is its own bucket (any two exceed 1 element).
  Program prog = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(1, 1000)}}, "deepspeed");
  check(prog);
  const auto b = unit_buckets(prog);
  ASSERT_EQ(b.size(), 6u);  // embedding, attn0, mlp0, attn1, mlp1, head
  EXPECT_EQ(b[0]->collectives, 2);  // wte 8192, wpe 1024
  EXPECT_EQ(b[0]->elems, 8192 + 1024);
  EXPECT_EQ(b[1]->collectives, 2);  // qkv, out (their biases persist)
  EXPECT_EQ(b[1]->elems, 12288 + 4096);
  EXPECT_EQ(b[2]->collectives, 2);  // fc1, fc2
  EXPECT_EQ(b[2]->elems, 16384 + 16384);
  EXPECT_EQ(b[5]->collectives, 1);  // lm head (the final norm persists)
  // prefetch_bucket 20000: units pack while they fit (embedding 9216 + attention 16384 > 20000:
  // apart), and inside a bucket the coordinator adds whole tensors while fewer than 20000 are
  // prefetching: attention 12288 then 12288 + 4096 = 16384 < 20000, one collective; MLP 16384,
  // then 32768 >= 20000 closes it, one collective.
  Program packed = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(20000, 1000)}}, "deepspeed");
  const auto p = unit_buckets(packed);
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[1]->collectives, 1);
  EXPECT_EQ(p[2]->collectives, 1);
}

TEST(Framework, DeepSpeedCopiesACoalescedGatherOutBeforeItsFirstUse) {
  // prefetch_bucket 20000: attention's qkv 12288 and out 4096 go in one collective (16384 <
  // 20000 when out is added): 16384 coalesced elements; MLP's fc1 16384 then fc2 (32768 >= 20000
  // closes it): 32768 coalesced. The first compute after each gather copies them out: 2 bytes
  // moved per coalesced byte, bf16: attention 2·16384·2 = 65536 bytes, MLP 131072, the
  // embedding's wte 8192 + wpe 1024 in one collective 2·9216·2 = 36864, the head's lone lm head
  // none. The default reuse distance keeps them for the backward, which copies nothing.
  Program prog = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(20000, 1000)}}, "deepspeed");
  check(prog);
  EXPECT_EQ(prog.param_buckets[1].coalesced_elems, 16384);
  EXPECT_EQ(prog.param_buckets[2].coalesced_elems, 32768);
  const RoleProgram& r = prog.roles[0];
  for (const Instr& in : r.instrs) {
    if (!is_compute(in.op)) continue;
    const bool forward = in.op == Op::kForward;
    const int32_t u = in.unit_begin;
    const int64_t expected = !forward ? 0 : u == 0 ? 36864 : u == 1 || u == 3 ? 65536 : u == 2 || u == 4 ? 131072 : 0;
    EXPECT_EQ(in.bytes, expected) << to_string(in.op) << " unit " << in.unit_begin;
  }
  // one tensor per collective (prefetch_bucket 1) or FSDP's flat parameter: no copy
  for (const auto& [framework, prefetch] : {std::pair{"deepspeed", 1}, std::pair{"fsdp", 20000}}) {
    Program lone = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(prefetch, 1000)}}, framework);
    for (const Instr& in : lone.roles[0].instrs) {
      if (is_compute(in.op)) {
        EXPECT_EQ(in.bytes, 0) << framework;
      }
    }
  }
}

TEST(Framework, DeepSpeedFlushesItsGradientBucketWhenTheNextTensorWouldOverflowIt) {
  // reduce_bucket 20000. Units pack while they fit: the head (8320) and MLP 1 (33216) apart, MLP 1
  // alone, attention 1 (16768) alone (+ MLP 0 would overflow). Inside MLP 1, backward order:
  // fc2 bias 64, fc2 16384 (16448), fc1 bias 256 (16704); fc1 16384 would overflow: flush 1;
  // then 16384 + 64 + 64 = 16512, flush 2. Attention 1: 64 + 4096 + 192 + 12288 + 64 + 64 = 16768
  // fits: one reduce-scatter.
  Program prog = lower_json(gpt(2, false), {{"dp", 2}, {"zero", {{"stage", 2}, {"reduce_bucket", 20000}}}}, "deepspeed");
  check(prog);
  ASSERT_GE(prog.grad_buckets.size(), 3u);
  EXPECT_EQ(prog.grad_buckets[0].unit_begin, 5);   // head
  EXPECT_EQ(prog.grad_buckets[1].unit_begin, 4);   // MLP 1
  EXPECT_EQ(prog.grad_buckets[1].unit_end, 5);
  EXPECT_EQ(prog.grad_buckets[1].collectives, 2);
  EXPECT_EQ(prog.grad_buckets[2].unit_begin, 3);   // attention 1
  EXPECT_EQ(prog.grad_buckets[2].unit_end, 4);
  EXPECT_EQ(prog.grad_buckets[2].collectives, 1);
  // FSDP and Megatron reduce a bucket in one collective
  Program megatron = lower_json(gpt(2, false), {{"dp", 2}, {"zero", {{"stage", 1}, {"reduce_bucket", 20000}}}}, "megatron");
  for (const Bucket& b : megatron.grad_buckets) EXPECT_EQ(b.collectives, 1);
}

TEST(Framework, DeepSpeed05GathersAndReducesEveryTensorOnItsOwn) {
  // threshold 0: nothing persists. Attention: norm1 w, b, qkv w, b, out w, b = 6 tensors.
  Program prog = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(1, 0, {{"reduce_bucket", 1}})}}, "deepspeed-0.5");
  check(prog);
  const auto b = unit_buckets(prog);
  ASSERT_EQ(b.size(), 6u);
  EXPECT_EQ(b[1]->collectives, 6);
  EXPECT_EQ(b[2]->collectives, 6);
  EXPECT_EQ(b[5]->collectives, 3);  // final norm w, b, lm head
  // reduce_bucket 1: one gradient bucket per unit, each reduced tensor by tensor
  for (const Bucket& g : prog.grad_buckets) {
    const int32_t u = g.unit_begin;
    const int32_t tensors = u == 0 ? 2 : (u == 5 ? 3 : 6);
    EXPECT_EQ(g.collectives, tensors) << "unit " << u;
  }
}

TEST(Framework, FsdpGathersAndReducesOneFlatParameterPerBlock) {
  // Per block one bucket of attention + MLP, whatever prefetch_bucket says, and nothing persists
  // (the norms and biases are in the FlatParameter): 64·2 + 12288 + 192 + 4096 + 64 (attention) +
  // 64·2 + 16384 + 256 + 16384 + 64 (MLP) = 16768 + 33216 = 49984.
  Program prog = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(1, 1000, {{"reduce_bucket", 1}})}}, "fsdp");
  check(prog);
  const auto b = unit_buckets(prog);
  ASSERT_EQ(b.size(), 4u);  // embedding, block 0, block 1, head
  EXPECT_EQ(b[1]->unit_begin, 1);
  EXPECT_EQ(b[1]->unit_end, 3);
  EXPECT_EQ(b[1]->elems, 49984);
  EXPECT_EQ(b[1]->persistent_elems, 0);
  EXPECT_EQ(b[1]->collectives, 1);
  ASSERT_EQ(prog.grad_buckets.size(), 4u);  // head, block 1, block 0, embedding
  EXPECT_EQ(prog.grad_buckets[1].elems, 49984);
  // Full recompute, 1F1B on one stage: forward gathers each block once, recompute and backward
  // share one gather (resharded after use unless used again at once): 2 per block and
  // micro-batch. The head's forward and backward are neighbours: 1 per micro-batch. The
  // embedding is gathered for its forward and again for its backward, which the next
  // micro-batch's forward follows at once: 1 + m in all. Total m·(2·2 + 1) + 1 + m.
  const int64_t m = 3;
  Program ac = lower_json(gpt(2, false), {{"dp", 2}, {"micro_batches", m}, {"recompute", "full"}, {"zero", zero3(1, 0)}}, "fsdp");
  check(ac);
  int64_t gathers = 0;
  for (const Instr& in : ac.roles[0].instrs) gathers += in.op == Op::kGatherParams;
  EXPECT_EQ(gathers, m * (2 * 2 + 1) + 1 + m);
}

TEST(Framework, Fsdp2CopiesEachGatheredBlockOutBeforeItsFirstUse) {
  // FSDP2 gathers a block as FSDP does (one bucket and one collective per block, 49984 elements,
  // nothing persistent), then copies the gathered buffer out into its per-parameter tensors when
  // the compute waits for it: 2 bytes moved per gathered byte, bf16: block 0's attention forward
  // (its first use) carries 2·49984·2 = 199936 bytes, its MLP forward (same gather) none. Every
  // gather is copied out once: the compute instructions' bytes sum to 2·2·(elements gathered).
  Program prog = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(1, 1000)}}, "fsdp2");
  check(prog);
  const auto b = unit_buckets(prog);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[1]->elems, 49984);
  EXPECT_EQ(b[1]->persistent_elems, 0);
  EXPECT_EQ(b[1]->collectives, 1);
  EXPECT_EQ(b[1]->coalesced_elems, 49984);
  const RoleProgram& r = prog.roles[0];
  int64_t gathered = 0, copied = 0;
  for (const Instr& in : r.instrs) {
    if (in.op == Op::kGatherParams) gathered += in.bytes;   // elements x 2 bytes
    if (!is_compute(in.op)) continue;
    copied += in.bytes;
    if (in.op == Op::kForward && in.unit_begin == 1) {
      EXPECT_EQ(in.bytes, 199936);
    }
    if (in.op == Op::kForward && in.unit_begin == 2) {
      EXPECT_EQ(in.bytes, 0);
    }
  }
  EXPECT_GT(gathered, 0);
  EXPECT_EQ(copied, 2 * gathered);
  // FSDP's flat parameter is the gathered buffer: nothing copied
  EXPECT_EQ(unit_buckets(lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(1, 1000)}}, "fsdp"))[1]->coalesced_elems, 0);
}

// Index of the first instruction of `op` covering unit `unit`.
std::size_t first_at(const RoleProgram& r, Op op, int32_t unit) {
  for (std::size_t i = 0; i < r.instrs.size(); ++i) {
    if (r.instrs[i].op == op && r.instrs[i].unit_begin <= unit && unit < r.instrs[i].unit_end) return i;
  }
  return r.instrs.size();
}

// A bucket's k collectives are consecutive pieces, the longer first: 10 elements in 4 pieces are
// 3, 3, 2, 2 (10 = 4·2 + 2: the first two get one more), the largest ⌈10/4⌉ = 3, what the
// simulator times; 3 elements in 5 collectives are 3 pieces of 1; k = 1 (or 0, nothing counted)
// is the whole bucket.
TEST(Framework, ABucketsCollectivesAreConsecutivePiecesTheLargestTimedByTheSimulator) {
  EXPECT_EQ(collective_piece_count(10, 4), 4);
  const std::pair<int64_t, int64_t> want[] = {{0, 3}, {3, 6}, {6, 8}, {8, 10}};
  for (int32_t i = 0; i < 4; ++i) EXPECT_EQ(collective_piece_range(10, 4, i), want[i]) << "piece " << i;
  EXPECT_EQ(collective_piece(10, 4), 3);
  EXPECT_EQ(collective_piece_count(3, 5), 3);
  EXPECT_EQ(collective_piece_range(3, 5, 2), (std::pair<int64_t, int64_t>{2, 3}));
  EXPECT_EQ(collective_piece(3, 5), 1);
  for (const int32_t k : {0, 1}) {
    EXPECT_EQ(collective_piece_count(7, k), 1);
    EXPECT_EQ(collective_piece_range(7, k, 0), (std::pair<int64_t, int64_t>{0, 7}));
    EXPECT_EQ(collective_piece(7, k), 7);
  }
  EXPECT_EQ(collective_piece_range(0, 3, 0), (std::pair<int64_t, int64_t>{0, 0}));
}

TEST(Framework, DeepSpeedLookAheadPrefetchesWhileLiveIsBelowMaxLive) {
  // Untied, prefetch_bucket 1: buckets are units (embedding 9216 gathered elements, attention
  // 16384, MLP 32768, head 8192). Before the embedding's forward, 9216 elements are live.
  // DeepSpeed's budget min(max_live − live, prefetch_bucket) is checked before adding a whole
  // parameter: with max_live 17000 it is positive (17000 − 9216), so attention block 0 is
  // prefetched although 9216 + 16384 = 25600 exceeds max_live; with max_live 9216 it is 0 and
  // the attention bucket is gathered only when its own forward comes.
  auto lowered = [](int64_t max_live) {
    return lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(1, 1000, {{"max_live_parameters", max_live},
                                                                          {"max_reuse_distance", 0}})}});
  };
  for (int64_t max_live : {17000, 9216}) {
    SCOPED_TRACE("max_live " + std::to_string(max_live));
    Program prog = lowered(max_live);
    check(prog);
    const RoleProgram& r = prog.roles[0];
    const std::size_t gather_attn = first_at(r, Op::kGatherParams, 1), forward_emb = first_at(r, Op::kForward, 0);
    ASSERT_LT(gather_attn, r.instrs.size());
    if (max_live == 17000) {
      EXPECT_LT(gather_attn, forward_emb);  // prefetched ahead of the embedding's forward
    } else {
      EXPECT_GT(gather_attn, forward_emb);  // gathered on demand
    }
  }
  // With 17000: the MLP (32768) is prefetched behind attention (16384 live < 17000), but not the
  // next attention behind the MLP (16384 + 32768 live); so block 1's attention is gathered
  // after block 0's MLP forward is issued.
  Program prog = lowered(17000);
  const RoleProgram& r = prog.roles[0];
  EXPECT_LT(first_at(r, Op::kGatherParams, 2), first_at(r, Op::kForward, 1));
  EXPECT_GT(first_at(r, Op::kGatherParams, 3), first_at(r, Op::kForward, 2));
}

TEST(Framework, DeepSpeed05GathersOnlyAfterEveryEarlierComputeAndNeverAhead) {
  // torch.cuda.synchronize() in every fetch: each gather depends on the compute instruction
  // issued just before it, and none is prefetched (it comes after the previous compute in the
  // instruction order, never before).
  Program prog = lower_json(gpt(2, false), {{"dp", 2}, {"micro_batches", 2}, {"zero", zero3(1, 0)}}, "deepspeed-0.5");
  check(prog);
  const RoleProgram& r = prog.roles[0];
  int32_t last_compute = -1, gathers = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(r.instrs.size()); ++i) {
    const Instr& in = r.instrs[i];
    if (is_compute(in.op)) last_compute = i;
    if (in.op != Op::kGatherParams) continue;
    ++gathers;
    const auto deps = r.deps_of(in);
    if (last_compute >= 0) {
      EXPECT_NE(std::find(deps.begin(), deps.end(), last_compute), deps.end()) << "gather " << i;
    }
    // the compute that uses it is the next compute instruction
    int32_t next = i + 1;
    while (next < static_cast<int32_t>(r.instrs.size()) && !is_compute(r.instrs[next].op)) ++next;
    ASSERT_LT(next, static_cast<int32_t>(r.instrs.size()));
    EXPECT_TRUE(r.instrs[next].unit_begin <= in.unit_begin && in.unit_begin < r.instrs[next].unit_end) << "gather " << i;
  }
  // max_reuse_distance 1e9 (the default) spans this small model's whole step: each of the 6
  // unit buckets is gathered once
  EXPECT_EQ(gathers, 6);
}

TEST(Framework, ReduceDtypeSetsTheGradientCollectivesBytes) {
  // fsdp with reduce_dtype fp32 over bf16 training: reduce-scatters move 4 bytes per element.
  Program prog = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(1, 0)}}, {{"name", "fsdp"}, {"reduce_dtype", "fp32"}});
  int64_t seen = 0;
  for (const Instr& in : prog.roles[0].instrs) {
    if (in.op != Op::kReduceScatterGrads) continue;
    EXPECT_EQ(in.bytes, in.elems * 4);
    ++seen;
  }
  EXPECT_EQ(seen, 4);  // head, block 1, block 0, embedding
  Program plain = lower_json(gpt(2, false), {{"dp", 2}, {"zero", zero3(1, 0)}}, "fsdp");
  for (const Instr& in : plain.roles[0].instrs) {
    if (in.op == Op::kReduceScatterGrads) {
      EXPECT_EQ(in.bytes, in.elems * 2);
    }
  }
}

// One NCCL communicator for gathers and reductions (framework.hpp, Communicators): each
// data-parallel collective of a rank waits for the one issued before it, whichever lane.
std::vector<int32_t> dp_collectives(const RoleProgram& r) {
  std::vector<int32_t> out;
  for (int32_t k = 0; k < static_cast<int32_t>(r.instrs.size()); ++k) {
    const Instr& in = r.instrs[static_cast<std::size_t>(k)];
    if (in.group == Group::kDp && is_collective(in.op)) out.push_back(k);
  }
  return out;
}
bool depends_on(const RoleProgram& r, int32_t k, int32_t d) {
  const auto deps = r.deps_of(r.instrs[static_cast<std::size_t>(k)]);
  return std::find(deps.begin(), deps.end(), d) != deps.end();
}

TEST(Framework, OneCommunicatorOrdersEveryDataParallelCollectiveAfterThePreviousOne) {
  const nlohmann::json plan = {{"dp", 2}, {"micro_batches", 2}, {"recompute", "full"}, {"zero", zero3(1, 0, {{"overlap_comm", true}})}};
  // fsdp shares one (its default): each collective after the previous one, gathers after
  // reductions too
  Program fsdp = lower_json(gpt(2, false), plan, "fsdp");
  check(fsdp);
  const RoleProgram& r = fsdp.roles[0];
  const std::vector<int32_t> dp = dp_collectives(r);
  ASSERT_GT(dp.size(), 4u);
  int64_t across = 0;   // orderings between a gather and a reduction, which the lanes alone lack
  for (std::size_t i = 1; i < dp.size(); ++i) {
    EXPECT_TRUE(depends_on(r, dp[i], dp[i - 1])) << "#" << dp[i] << " after #" << dp[i - 1];
    across += r.instrs[static_cast<std::size_t>(dp[i])].lane != r.instrs[static_cast<std::size_t>(dp[i - 1])].lane;
  }
  EXPECT_GT(across, 0);
  // deepspeed by default: a communicator each (zero.Init's world group, the engine's own): a
  // gather never waits for a reduction
  Program ds = lower_json(gpt(2, false), plan, "deepspeed");
  check(ds);
  const RoleProgram& d = ds.roles[0];
  const std::vector<int32_t> ddp = dp_collectives(d);
  int64_t switches = 0;   // a gather issued after a reduction or the other way round
  for (std::size_t i = 1; i < ddp.size(); ++i) {
    const Instr& in = d.instrs[static_cast<std::size_t>(ddp[i])];
    if (in.lane == d.instrs[static_cast<std::size_t>(ddp[i - 1])].lane) continue;
    ++switches;
    EXPECT_FALSE(depends_on(d, ddp[i], ddp[i - 1])) << "#" << ddp[i];
  }
  EXPECT_GT(switches, 0);
  // ... and one when the training says so (Megatron-DeepSpeed hands one group to both)
  Program shared = lower_json(gpt(2, false), plan, {{"name", "deepspeed"}, {"reduce_communicator", "shared"}});
  check(shared);
  const std::vector<int32_t> sdp = dp_collectives(shared.roles[0]);
  for (std::size_t i = 1; i < sdp.size(); ++i) EXPECT_TRUE(depends_on(shared.roles[0], sdp[i], sdp[i - 1]));
  EXPECT_TRUE(shared.training.framework_profile().one_dp_communicator);
  EXPECT_FALSE(ds.training.framework_profile().one_dp_communicator);
}

TEST(Framework, DeepSpeedZero3WithTensorParallelismSharesOneCommunicator) {
  // DeepSpeed trains tensor parallelism itself (AutoTP) with ZeRO 0-2 only, so a ZeRO-3 plan with
  // tp > 1 is Megatron-DeepSpeed's code, which hands one data-parallel group to zero.Init and the
  // engine: unless the training file says otherwise, its collectives take turns.
  using spec::dp_communicator;
  using spec::Framework;
  EXPECT_TRUE(dp_communicator(Framework::kDeepSpeed, std::nullopt, 2, 3).shared);
  EXPECT_TRUE(dp_communicator(Framework::kDeepSpeed05, std::nullopt, 8, 3).shared);
  EXPECT_FALSE(dp_communicator(Framework::kDeepSpeed, std::nullopt, 1, 3).shared);  // zero.Init's world group
  EXPECT_FALSE(dp_communicator(Framework::kDeepSpeed, std::nullopt, 2, 2).shared);  // AutoTP with ZeRO-2
  EXPECT_FALSE(dp_communicator(Framework::kDeepSpeed, false, 2, 3).shared);         // the file's word wins
  EXPECT_TRUE(dp_communicator(Framework::kDeepSpeed, true, 1, 3).shared);
  EXPECT_TRUE(dp_communicator(Framework::kFsdp, std::nullopt, 1, 3).shared);
  EXPECT_NE(dp_communicator(Framework::kDeepSpeed, std::nullopt, 2, 3).why.find("Megatron-DeepSpeed"), std::string::npos);
  EXPECT_NE(dp_communicator(Framework::kDeepSpeed, false, 2, 3).why.find("reduce_communicator"), std::string::npos);

  // In the lowering: tp 2 x dp 2, ZeRO-3 under plain "deepspeed" orders every data-parallel
  // collective after the previous one, gathers after reductions included ...
  const nlohmann::json plan = {{"tp", 2}, {"dp", 2}, {"micro_batches", 2}, {"recompute", "full"},
                               {"zero", zero3(1, 0, {{"overlap_comm", true}})}};
  Program tp2 = lower_json(gpt(2, false), plan, "deepspeed");
  check(tp2);
  const std::vector<int32_t> dp = dp_collectives(tp2.roles[0]);
  ASSERT_GT(dp.size(), 4u);
  int64_t across = 0;
  for (std::size_t i = 1; i < dp.size(); ++i) {
    EXPECT_TRUE(depends_on(tp2.roles[0], dp[i], dp[i - 1])) << "#" << dp[i] << " after #" << dp[i - 1];
    across += tp2.roles[0].instrs[static_cast<std::size_t>(dp[i])].lane != tp2.roles[0].instrs[static_cast<std::size_t>(dp[i - 1])].lane;
  }
  EXPECT_GT(across, 0);
  // ... and "separate" in the training file keeps a communicator each: some gather issued after a
  // reduction does not wait for it
  Program sep = lower_json(gpt(2, false), plan, {{"name", "deepspeed"}, {"reduce_communicator", "separate"}});
  check(sep);
  const RoleProgram& r = sep.roles[0];
  const std::vector<int32_t> sdp = dp_collectives(r);
  int64_t unordered = 0;
  for (std::size_t i = 1; i < sdp.size(); ++i) {
    const bool switched = r.instrs[static_cast<std::size_t>(sdp[i])].lane != r.instrs[static_cast<std::size_t>(sdp[i - 1])].lane;
    unordered += switched && !depends_on(r, sdp[i], sdp[i - 1]);
  }
  EXPECT_GT(unordered, 0);
}

TEST(Framework, ATableTiedOverStagesIsReducedOnceAStepWhereOthersAreReducedEveryMicroBatch) {
  // gpt(4) tied over pp 2: stage 0 holds the table (bucket of unit 0), stage 1 the head's copy.
  // ZeRO-3 reduce-scatters every micro-batch (4 here), but summing the tied copies needs the other
  // stage's gradient of the same micro-batch; under one communicator (fsdp) every later collective
  // of the stage would wait for it, its own gathers too. So the tied buckets are summed and reduced
  // once, after the stage's last compute; every other bucket 4 times.
  for (const char* schedule : {"1f1b", "gpipe", "interleaved"}) {
    const nlohmann::json plan = {{"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"schedule", schedule},
                                 {"virtual_stages", std::string(schedule) == "interleaved" ? 2 : 1}, {"recompute", "full"},
                                 {"zero", zero3(1, 0, {{"overlap_comm", true}})}};
    for (const char* framework : {"fsdp", "deepspeed"}) {
      SCOPED_TRACE(std::string(schedule) + " " + framework);
      Program prog = lower_json(gpt(4), plan, framework);
      check(prog);  // matching and deadlock checks: it deadlocked before, under fsdp
      for (const RoleProgram& r : prog.roles) {
        std::map<int32_t, int64_t> reductions;  // grad bucket -> reduce-scatters
        int32_t last_compute = -1, tied = -1, tied_bucket_reduce = -1;
        for (int32_t k = 0; k < static_cast<int32_t>(r.instrs.size()); ++k) {
          const Instr& in = r.instrs[static_cast<std::size_t>(k)];
          if (in.lane == Lane::kCompute && in.op != Op::kOptimizerStep) last_compute = k;
          if (in.op == Op::kReduceScatterGrads) ++reductions[in.bucket];
          if (in.op == Op::kAllReduceGrads && in.group == Group::kEmbedding) {
            EXPECT_EQ(tied, -1) << "one tied all-reduce a step";
            tied = k;
          }
          if (in.op == Op::kReduceScatterGrads && tied >= 0 && depends_on(r, k, tied)) tied_bucket_reduce = k;
        }
        ASSERT_GE(tied, 0);
        EXPECT_GT(tied, last_compute) << "the tied sum waits for the stage's last compute";
        ASSERT_GE(tied_bucket_reduce, 0);
        const int32_t tied_bucket = r.instrs[static_cast<std::size_t>(tied_bucket_reduce)].bucket;
        for (const auto& [bucket, n] : reductions) EXPECT_EQ(n, bucket == tied_bucket ? 1 : 4) << "bucket " << bucket;
      }
    }
  }
  // ZeRO 0-1 reduce once, at the last micro-batch, beside its backward with overlap_comm; the tied
  // table too waits for the stage's last compute: where the host waits for each reduction before
  // more compute (deepspeed-0.5) the last stage's backward would otherwise wait for stage 0's.
  for (const char* framework : {"deepspeed-0.5", "megatron"}) {
    SCOPED_TRACE(framework);
    Program prog = lower_json(gpt(4), {{"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"recompute", "full"},
                                       {"zero", {{"stage", 1}, {"overlap_comm", true}, {"reduce_bucket", 20000}}}},
                              framework);
    check(prog);
    for (const RoleProgram& r : prog.roles) {
      int32_t last_compute = -1, tied = -1;
      for (int32_t k = 0; k < static_cast<int32_t>(r.instrs.size()); ++k) {
        const Instr& in = r.instrs[static_cast<std::size_t>(k)];
        if (in.lane == Lane::kCompute && in.op != Op::kOptimizerStep) last_compute = k;
        if (in.op == Op::kAllReduceGrads && in.group == Group::kEmbedding) tied = k;
      }
      ASSERT_GE(tied, 0);
      EXPECT_GT(tied, last_compute);
    }
  }
}

TEST(Framework, EveryFrameworkScheduleAndZeroStageLowersWithoutADeadlock) {
  // The orderings the frameworks add (one communicator, the host waiting for each reduction, the
  // tied table's sum) against every schedule and ZeRO stage: each lowering passes check(), whose
  // deadlock search replays the ranks' lanes and messages. Tied and untied, tp 1-2, pp 1-4.
  const std::vector<nlohmann::json> frameworks = {"deepspeed", "deepspeed-0.5", "fsdp", "fsdp2", "megatron",
                                                  {{"name", "deepspeed"}, {"reduce_communicator", "shared"}}};
  int64_t lowered = 0;
  for (bool tied : {true, false}) {
    for (const nlohmann::json& framework : frameworks) {
      const int max_zero = framework == "megatron" ? 1 : 3;
      for (const auto& [tp, pp, dp] : {std::tuple{1, 2, 2}, std::tuple{2, 2, 2}, std::tuple{1, 4, 2}, std::tuple{2, 1, 4}}) {
        for (const auto& [schedule, v] : {std::pair{"1f1b", 1}, std::pair{"gpipe", 1}, std::pair{"zb-h1", 1}, std::pair{"interleaved", 2}}) {
          if (pp == 1 && v > 1) continue;
          for (int zero = 0; zero <= max_zero; ++zero) {
            for (bool overlap : {false, true}) {
              SCOPED_TRACE(framework.dump() + " tied " + std::to_string(tied) + " tp" + std::to_string(tp) + " pp" +
                           std::to_string(pp) + " " + schedule + " zero" + std::to_string(zero) + " overlap " + std::to_string(overlap));
              const nlohmann::json plan = {{"tp", tp}, {"pp", pp}, {"dp", dp}, {"micro_batches", 4}, {"schedule", schedule},
                                           {"virtual_stages", v}, {"recompute", "full"},
                                           {"zero", {{"stage", zero}, {"overlap_comm", overlap}, {"reduce_bucket", 20000},
                                                     {"prefetch_bucket", 20000}}}};
              Program prog = lower_json(gpt(8, tied), plan, framework);
              EXPECT_NO_THROW(check(prog));
              ++lowered;
            }
          }
        }
      }
    }
  }
  // tied or not x (5 frameworks x 4 stages + megatron's 2) x (3 pipelined layouts x 4 schedules + pp 1 x
  // the 3 that are not interleaved) x 2 overlaps
  EXPECT_EQ(lowered, 2 * (5 * 4 + 2) * (3 * 4 + 3) * 2);
}

TEST(Framework, TrainingFileNamesTheFrameworkAndBadValuesAreRefused) {
  spec::Training t = test::training(8, {{"name", "fsdp"}, {"reduce_dtype", "fp32"}});
  EXPECT_EQ(t.framework, spec::Framework::kFsdp);
  EXPECT_EQ(t.reduce_bytes(), 4);
  EXPECT_EQ(spec::to_json(t)["framework"]["reduce_dtype"], "fp32");
  EXPECT_EQ(test::training(8).framework, spec::Framework::kDeepSpeed);
  try {
    test::training(8, "fdsp");
    FAIL() << "accepted an unknown framework";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("training.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/framework"), std::string::npos) << e.what();
  }
  EXPECT_THROW(test::training(8, {{"name", "fsdp"}, {"reduce_type", "fp32"}}), spec::SpecError);
  // "reduce_communicator": shared or separate, written back as read
  const spec::Training sep = test::training(8, {{"name", "fsdp"}, {"reduce_communicator", "separate"}});
  EXPECT_FALSE(sep.framework_profile().one_dp_communicator);
  EXPECT_EQ(spec::to_json(sep)["framework"]["reduce_communicator"], "separate");
  EXPECT_FALSE(spec::to_json(sep)["framework"].contains("reduce_dtype"));
  try {
    test::training(8, {{"name", "deepspeed"}, {"reduce_communicator", "one"}});
    FAIL() << "accepted an unknown reduce_communicator";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_communicator"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shared"), std::string::npos) << e.what();
  }
  EXPECT_THROW(test::training(8, 3), spec::SpecError);
  // Megatron-LM shards optimizer state at most (ZeRO-1)
  try {
    lower_json(gpt(2), {{"dp", 2}, {"zero", {{"stage", 3}}}}, "megatron");
    FAIL() << "accepted ZeRO-3 under megatron";
  } catch (const spec::SpecError& e) {
    EXPECT_NE(std::string(e.what()).find("zero/stage"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(lower_json(gpt(2), {{"dp", 2}, {"zero", {{"stage", 1}}}}, "megatron"));
}

}  // namespace
}  // namespace stagecraft::program
