// Lowering: instruction counts, bytes, FLOPs and ZeRO traffic against hand counts.
#include <algorithm>
#include <numeric>
#include <tuple>

#include <gtest/gtest.h>

#include "core/count/count.hpp"
#include "core/program/analysis.hpp"
#include "core/program/check.hpp"
#include "core/program/fingerprint.hpp"
#include "core/program/format.hpp"
#include "core/program/partition.hpp"
#include "program_fixtures.hpp"

namespace stagecraft::program {
namespace {

using test::gpt;
using test::lower_json;

int64_t count(const RoleProgram& r, Op op) { return op_counts(r)[static_cast<std::size_t>(op)]; }

TEST(Lower, InterleavedCountsMatchHandCounts) {
  const int64_t p = 4, m = 8, v = 2;
  Program prog = lower_json(gpt(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "interleaved"}, {"virtual_stages", v}});
  check(prog);
  ASSERT_EQ(prog.roles.size(), 4u);
  for (int64_t i = 0; i < p; ++i) {
    SCOPED_TRACE("stage " + std::to_string(i));
    const RoleProgram& r = prog.roles[i];
    // tp = 1 and no ZeRO-3: one Forward and one Backward per (chunk, micro-batch).
    EXPECT_EQ(count(r, Op::kForward), m * v);
    EXPECT_EQ(count(r, Op::kBackward), m * v);
    // A chunk receives activations unless it is the model's first chunk (stage 0, chunk 0) and
    // sends them on unless it is the last (stage p-1, chunk v-1); gradients flow the other way.
    const int64_t chunks_with_prev = i == 0 ? v - 1 : v;
    const int64_t chunks_with_next = i == p - 1 ? v - 1 : v;
    EXPECT_EQ(count(r, Op::kRecvActivation), m * chunks_with_prev);
    EXPECT_EQ(count(r, Op::kSendGrad), m * chunks_with_prev);
    EXPECT_EQ(count(r, Op::kSendActivation), m * chunks_with_next);
    EXPECT_EQ(count(r, Op::kRecvGrad), m * chunks_with_next);
    // dp = 1: no dp collectives; tied embeddings on stages 0 and p-1 all-reduce once per step.
    EXPECT_EQ(count(r, Op::kReduceScatterGrads) + count(r, Op::kGatherParams), 0);
    EXPECT_EQ(count(r, Op::kAllReduceGrads), (i == 0 || i == p - 1) ? 1 : 0);
    EXPECT_EQ(count(r, Op::kOptimizerStep), 1);
    EXPECT_EQ(count(r, Op::kGradNormAllReduce), 1);
    const int64_t total = 2 * m * v + 2 * m * chunks_with_prev + 2 * m * chunks_with_next +
                          ((i == 0 || i == p - 1) ? 1 : 0) + 2;
    EXPECT_EQ(static_cast<int64_t>(r.instrs.size()), total);
  }
}

TEST(Lower, TensorParallelCollectivesPerLayer) {
  // 2 blocks, pp = 1: units embedding, attn0, mlp0, attn1, mlp1, head.
  const int64_t m = 2;
  Program plain = lower_json(gpt(2), {{"tp", 2}, {"micro_batches", m}});
  check(plain);
  // Forward: one all-reduce after each of the 6 units (the head's is the cross-entropy's);
  // backward: one after each unit but the embedding (5).
  EXPECT_EQ(count(plain.roles[0], Op::kTpAllReduce), m * (6 + 5));
  EXPECT_EQ(count(plain.roles[0], Op::kForward), m * 6);

  Program sp = lower_json(gpt(2), {{"tp", 2}, {"micro_batches", m}, {"sequence_parallel", true}});
  check(sp);
  // Forward: embedding RS; attention and MLP AG + RS each (4 units); head AG + cross-entropy AR.
  // Backward: head RS; attention and MLP AG + RS; embedding AG.
  EXPECT_EQ(count(sp.roles[0], Op::kTpAllGather), m * ((4 + 1) + (4 + 1)));
  EXPECT_EQ(count(sp.roles[0], Op::kTpReduceScatter), m * ((1 + 4) + (1 + 4)));
  // the cross-entropy's all-reduce per micro-batch, and once per step the norms' gradients (each
  // rank computed them on its sequence shard): 2 blocks x 2 norms + the final one, in the reduce dtype
  EXPECT_EQ(count(sp.roles[0], Op::kTpAllReduce), m * 1 + 1);
  const auto& list = sp.roles[0].instrs;
  const auto norms = std::find_if(list.begin(), list.end(), [](const Instr& in) { return (in.flags & kFlagNormGrads) != 0; });
  ASSERT_NE(norms, list.end());
  EXPECT_EQ(norms->elems, (2 * 2 + 1) * count::norm_parameters(gpt(2)));
  EXPECT_EQ(norms->bytes, norms->elems * sp.reduce_bytes);
  EXPECT_EQ(norms->group, Group::kTp);
  EXPECT_EQ(count(plain.roles[0], Op::kTpAllReduce), m * (6 + 5)) << "without sequence parallelism the norms' gradients are whole";
  // b = 1, s = 16, h = 64, bf16: each buffer S = b s h 2 bytes.
  for (const Instr& in : sp.roles[0].instrs) {
    if (in.op == Op::kTpAllGather) {
      EXPECT_EQ(in.bytes, 1 * 16 * 64 * 2);
    }
  }
}

TEST(Lower, ComputeFlopsAddUpToTheModel) {
  for (const char* recompute : {"none", "selective", "full"}) {
    SCOPED_TRACE(recompute);
    const int64_t m = 4, b = 2, tp = 2;
    spec::Model model = gpt(4);
    Program prog = lower_json(model, {{"tp", tp}, {"pp", 2}, {"micro_batch", b}, {"micro_batches", m},
                                      {"recompute", recompute}});
    double flops = 0;
    for (const RoleProgram& r : prog.roles) {
      for (const Instr& in : r.instrs) flops += in.flops;
    }
    // One replica processes m b s tokens; every tp rank does 1/tp of the work.
    const double tokens = static_cast<double>(m * b * model.seq_len);
    const spec::Recompute mode = prog.plan.recompute;
    EXPECT_NEAR(flops * tp / (tokens * count::hardware_flops_per_token_train(model, mode)), 1.0, 1e-12);
  }
}

TEST(Lower, P2pBytesAreOneActivation) {
  Program prog = lower_json(gpt(4), {{"pp", 2}, {"micro_batch", 3}, {"micro_batches", 2}});
  for (const Instr& in : prog.roles[0].instrs) {
    if (in.op == Op::kSendActivation) {
      EXPECT_EQ(in.bytes, 3 * 16 * 64 * 2);  // b s h, bf16
    }
  }
}

struct ZeroCase {
  const char* recompute;
  bool tied;
};

TEST(Lower, Zero3GathersEveryPassWhenNothingIsReused) {
  for (ZeroCase zc : {ZeroCase{"none", false}, ZeroCase{"full", false}, ZeroCase{"none", true}}) {
    SCOPED_TRACE(std::string(zc.recompute) + (zc.tied ? " tied" : " untied"));
    const int64_t m = 4, pp = zc.tied ? 1 : 2;
    spec::Model model = gpt(4, zc.tied);
    // prefetch_bucket 1: every unit is its own bucket; threshold 0: nothing stays whole;
    // max_reuse_distance 0: every pass gathers again.
    Program prog = lower_json(model, {{"pp", pp}, {"dp", 2}, {"micro_batches", m}, {"recompute", zc.recompute},
                                      {"zero", {{"stage", 3}, {"prefetch_bucket", 1}, {"param_persistence_threshold", 0},
                                                {"max_reuse_distance", 0}}}});
    check(prog);
    const bool full = std::string(zc.recompute) == "full";
    int64_t gathered = 0, reduced = 0;
    for (const RoleProgram& r : prog.roles) {
      int64_t buckets = 0, block_buckets = 0;
      for (const Bucket& b : prog.param_buckets) {
        if (b.stage != r.stage) continue;
        ++buckets;
        block_buckets += b.unit_begin >= 1 && b.unit_end <= head_unit(model) ? 1 : 0;
      }
      // gathers per step = buckets x (forward + backward) x m, plus the recompute of block buckets;
      // a tied head on the embedding's stage gathers the embedding's bucket again in each pass
      const int64_t tied_head = zc.tied ? 2 : 0;
      EXPECT_EQ(count(r, Op::kGatherParams), m * (2 * buckets + (full ? block_buckets : 0) + tied_head));
      EXPECT_EQ(count(r, Op::kReleaseParams), count(r, Op::kGatherParams));
      gathered += op_elems(r, Op::kGatherParams);
      reduced += op_elems(r, Op::kReduceScatterGrads);
    }
    // ZeRO-3 traffic per micro-batch: P gathered in forward, P in backward, P reduce-scattered
    // (3P); full recompute gathers the blocks once more (the embedding and head are not
    // recomputed); a tied head gathers the embedding's bucket (its V x h table, and the s x h
    // positions that share the bucket) for its forward and its backward.
    const int64_t P = count::parameters(model);
    const int64_t blocks = model.layers * count::block_parameters(model);
    const int64_t table = zc.tied ? 2 * (model.vocab * model.hidden + model.seq_len * model.hidden) : 0;
    EXPECT_EQ(gathered + reduced, m * (3 * P + (full ? blocks : 0) + table));
    EXPECT_EQ(reduced, m * P);
  }
}

// Forward only (scoring): per rank, the schedule's forward passes and nothing of the backward.
// Hand count for pp 2 x dp 2 x tp 2, ZeRO-3, m = 4, every unit its own bucket: each stage runs
// m forwards of its units; each of its buckets is gathered (and released) once per micro-batch;
// stage 0 sends m activations, stage 1 receives m; no gradient reductions, no norm, no step.
TEST(Lower, ForwardOnlyKeepsTheForwardPassesAndNothingElse) {
  const int64_t m = 4;
  const spec::Model model = gpt(4, false);
  spec::Plan p = spec::plan_from_json({{"pp", 2}, {"dp", 2}, {"tp", 2}, {"micro_batches", m},
                                       {"zero", {{"stage", 3}, {"prefetch_bucket", 1}, {"param_persistence_threshold", 0},
                                                 {"max_reuse_distance", 0}}}},
                                      "plan.json");
  LowerOptions o;
  o.forward_only = true;
  const Program prog = lower(model, test::training(m * 2), p, o);
  EXPECT_TRUE(prog.forward_only);
  check(prog);
  for (const RoleProgram& r : prog.roles) {
    SCOPED_TRACE("stage " + std::to_string(r.stage));
    int64_t buckets = 0;
    for (const Bucket& b : prog.param_buckets) buckets += b.stage == r.stage ? 1 : 0;
    EXPECT_EQ(count(r, Op::kGatherParams), m * buckets);
    EXPECT_EQ(count(r, Op::kReleaseParams), m * buckets);
    for (Op op : {Op::kBackward, Op::kBackwardInput, Op::kBackwardWeight, Op::kReduceScatterGrads, Op::kAllReduceGrads,
                  Op::kGradNormAllReduce, Op::kOptimizerStep, Op::kRecvGrad, Op::kSendGrad}) {
      EXPECT_EQ(count(r, op), 0) << static_cast<int>(op);
    }
    EXPECT_EQ(count(r, r.stage == 0 ? Op::kSendActivation : Op::kRecvActivation), m);
    int64_t forward_units = 0;
    for (const Instr& in : r.instrs) forward_units += in.op == Op::kForward ? in.unit_end - in.unit_begin : 0;
    const ChunkInfo& c = prog.chunk(r.stage, 0);
    EXPECT_EQ(forward_units, m * (c.unit_end - c.unit_begin));
  }
  EXPECT_NE(fingerprint(prog), fingerprint(lower(model, test::training(m * 2), p)));
}

TEST(Lower, Zero3ReuseAndKeepGatheredSaveTraffic) {
  const int64_t m = 4;
  auto gathers = [&](nlohmann::json zero) {
    zero["stage"] = 3;
    zero["param_persistence_threshold"] = 0;
    zero["prefetch_bucket"] = 1;
    Program prog = lower_json(gpt(4), {{"dp", 2}, {"micro_batches", m}, {"zero", zero}});
    check(prog);
    return count(prog.roles[0], Op::kGatherParams);
  };
  const int64_t buckets = 2 * 4 + 2;  // every unit: embedding, 4 blocks x 2, head
  // Forward and backward of every bucket, plus the tied head's use of the embedding bucket in each.
  EXPECT_EQ(gathers({{"max_reuse_distance", 0}}), m * (2 * buckets + 2));
  // One gather per bucket per step when kept across micro-batches.
  EXPECT_EQ(gathers({{"keep_gathered_across_microbatches", true}}), buckets);
  // DeepSpeed's default reuse distance keeps the last buckets of the forward for the backward.
  EXPECT_LT(gathers({}), m * 2 * buckets);
}

TEST(Lower, Zero3RespectsMaxLiveParameters) {
  spec::Model model = gpt(4);
  Program prog = lower_json(model, {{"dp", 2}, {"micro_batches", 2},
                                    {"zero", {{"stage", 3}, {"prefetch_bucket", 1}, {"param_persistence_threshold", 0},
                                              {"max_live_parameters", 60000}}}});
  check(prog);
  // Walk the gather lane. DeepSpeed's look-ahead (the default framework) checks its budget
  // min(max_live − live, prefetch_bucket) before adding a bucket, so every gather starts with
  // fewer than max_live elements resident, and residency exceeds max_live by at most the
  // bucket just added.
  int64_t live = 0, peak = 0, biggest = 0;
  for (const Instr& in : prog.roles[0].instrs) {
    if (in.op == Op::kGatherParams) {
      EXPECT_LT(live, 60000);
      live += in.elems;
      biggest = std::max(biggest, in.elems);
    }
    if (in.op == Op::kReleaseParams) live -= in.elems;
    peak = std::max(peak, live);
  }
  EXPECT_EQ(live, 0);
  EXPECT_LE(peak, 60000 + biggest);
  EXPECT_GT(peak, 0);
}

// With tensor parallelism a backward's input gradient is summed over tp after the compute, and the
// norm that opens the segment runs its backward on the sum, with its own (gathered) parameters: a
// ZeRO-3 bucket used by a backward is released only after that collective. Released before it, the
// executor's norm backward read released parameters (NaN) whenever the norm's tensors were not
// persistent (param_persistence_threshold 0, or FSDP, which keeps nothing whole).
TEST(Lower, Zero3ReleasesABackwardsBucketAfterItsTensorParallelCollective) {
  for (const nlohmann::json& framework : {nlohmann::json("deepspeed"), nlohmann::json("fsdp")}) {
    // one bucket per unit, released after each use
    Program prog = lower_json(gpt(2), {{"tp", 2}, {"dp", 2}, {"micro_batches", 2},
                                       {"zero", {{"stage", 3}, {"param_persistence_threshold", 0}, {"prefetch_bucket", 1},
                                                 {"max_reuse_distance", 0}}}}, framework);
    check(prog);
    const RoleProgram& role = prog.roles[0];
    // the backward computes a tensor-parallel gradient collective follows
    std::vector<char> summed_after(role.instrs.size(), 0);
    for (const Instr& in : role.instrs) {
      if (in.op != Op::kTpAllReduce || !(in.flags & kFlagGrad)) continue;
      for (int32_t d : role.deps_of(in)) summed_after[static_cast<std::size_t>(d)] = 1;
    }
    int64_t after_collective = 0, after_compute = 0;
    for (const Instr& in : role.instrs) {
      if (in.op != Op::kReleaseParams) continue;
      for (int32_t d : role.deps_of(in)) {
        const Instr& use = role.instrs[static_cast<std::size_t>(d)];
        const bool backward = use.op == Op::kBackward || use.op == Op::kBackwardInput;
        EXPECT_FALSE(backward && summed_after[static_cast<std::size_t>(d)])
            << framework << ": bucket " << in.bucket << " released before the tp collective of its backward";
        if (use.op == Op::kTpAllReduce && (use.flags & kFlagGrad)) ++after_collective;
        if (backward) ++after_compute;
      }
    }
    // not vacuous: releases do follow backward collectives (and the embedding's, which has none, its compute)
    EXPECT_GT(after_collective, 0) << framework;
    EXPECT_GT(after_compute, 0) << framework;
  }
}

TEST(Lower, ZeroStagesPlaceReductionsAsSpecified) {
  const int64_t m = 3;
  auto role = [&](int stage) {
    Program prog = lower_json(gpt(2), {{"dp", 2}, {"micro_batches", m}, {"zero", {{"stage", stage}, {"reduce_bucket", 1}}}});
    check(prog);
    return prog.roles[0];
  };
  const int64_t grad_buckets = 2 * 2 + 2;  // reduce_bucket 1: one bucket per unit
  EXPECT_EQ(count(role(0), Op::kAllReduceGrads), grad_buckets);              // once per step
  EXPECT_EQ(count(role(1), Op::kReduceScatterGrads), grad_buckets);          // once per step
  EXPECT_EQ(count(role(1), Op::kAllGatherParams), 1);                        // 5e8-element buckets
  EXPECT_EQ(count(role(2), Op::kReduceScatterGrads), m * grad_buckets);      // every micro-batch
  EXPECT_EQ(count(role(3), Op::kReduceScatterGrads), m * grad_buckets);
  EXPECT_EQ(count(role(3), Op::kAllGatherParams), 0);
}

TEST(Lower, OptimizerShardAndOffload) {
  spec::Model model = gpt(2);
  const int64_t P = count::parameters(model);
  Program z1 = lower_json(model, {{"dp", 4}, {"micro_batches", 1}, {"zero", {{"stage", 1}, {"offload_optimizer", "cpu"}}}});
  check(z1);
  const RoleProgram& r = z1.roles[0];
  EXPECT_EQ(op_elems(r, Op::kOptimizerStep), (P + 3) / 4);  // ceil(P / dp): padded flat shard
  EXPECT_EQ(count(r, Op::kOffloadCopy), 2);                   // gradients down, parameters up
  Program z0 = lower_json(model, {{"dp", 4}, {"micro_batches", 1}});
  EXPECT_EQ(op_elems(z0.roles[0], Op::kOptimizerStep), P);
}

TEST(Lower, BalancedSplitPutsTheHeadCostOnTheLastStage) {
  // Block forward FLOPs per token 24h^2 + 4sh = 102400 and the head's 2hV = 16384 (h 64, s 16,
  // V 128): for 4 blocks on 2 stages [2, 2] costs max(204800, 221184) and beats [3, 1].
  Program prog = lower_json(gpt(4), {{"pp", 2}, {"micro_batches", 2}});
  EXPECT_EQ(prog.plan.stage_layers, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(prog.chunk(0, 0).unit_begin, 0);
  EXPECT_EQ(prog.chunk(0, 0).unit_end, 1 + 2 * 2);
  EXPECT_EQ(prog.chunk(1, 0).unit_end, head_unit(prog.model) + 1);
}

TEST(Partition, MatchesBruteForceOptimum) {
  const std::vector<double> costs = {3, 1, 4, 1, 5, 9, 2, 6};
  for (int64_t parts = 1; parts <= 4; ++parts) {
    for (double last : {0.0, 7.0}) {
      std::vector<int64_t> sizes = linear_partition(costs, parts, 2.0, last);
      auto max_cost = [&](const std::vector<int64_t>& s) {
        double worst = 0;
        std::size_t at = 0;
        for (std::size_t j = 0; j < s.size(); ++j) {
          double c = (j == 0 ? 2.0 : 0) + (j + 1 == s.size() ? last : 0);
          for (int64_t k = 0; k < s[j]; ++k) c += costs[at++];
          worst = std::max(worst, c);
        }
        return worst;
      };
      // Brute force over every placement of parts-1 cuts among 7 gaps.
      double best = 1e300;
      for (int mask = 0; mask < (1 << 7); ++mask) {
        if (__builtin_popcount(mask) != parts - 1) continue;
        std::vector<int64_t> s;
        int64_t run = 1;
        for (int g = 0; g < 7; ++g) {
          if (mask & (1 << g)) { s.push_back(run); run = 1; } else { ++run; }
        }
        s.push_back(run);
        best = std::min(best, max_cost(s));
      }
      EXPECT_DOUBLE_EQ(max_cost(sizes), best) << parts << " parts";
      EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), 8);
    }
  }
}

TEST(Lower, IsDeterministic) {
  auto json = [] {
    return to_json(lower_json(gpt(4), {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"schedule", "zb-h1"},
                                       {"zero", {{"stage", 3}}}}),
                   std::nullopt)
        .dump();
  };
  EXPECT_EQ(json(), json());
}

// The stages' lists are emitted on threads (LowerOptions::threads): the Program is the one the
// serial lowering builds, instruction for instruction, on every schedule and ZeRO stage, with
// more threads than stages too.
TEST(Lower, ThreadsChangeNothing) {
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    for (int zero = 0; zero <= 3; ++zero) {
      SCOPED_TRACE(std::string(schedule) + " zero" + std::to_string(zero));
      nlohmann::json plan_json = {{"pp", 4}, {"dp", 2}, {"tp", 2}, {"micro_batches", 8}, {"schedule", schedule},
                                  {"sequence_parallel", true}, {"zero", {{"stage", zero}, {"prefetch_bucket", 20000}}}};
      if (std::string(schedule) == "interleaved") plan_json["virtual_stages"] = 2;
      const spec::Plan p = spec::plan_from_json(plan_json, "plan.json");
      const spec::Training t = test::training(p.micro_batch * p.micro_batches * p.dp, nullptr);
      const Program serial = lower(gpt(8), t, p);
      for (int threads : {2, 3, 16}) {
        LowerOptions o;
        o.threads = threads;
        const Program parallel = lower(gpt(8), t, p, o);
        EXPECT_EQ(to_json(parallel, std::nullopt).dump(), to_json(serial, std::nullopt).dump()) << threads << " threads";
        EXPECT_EQ(fingerprint(parallel), fingerprint(serial));
        ASSERT_EQ(parallel.roles.size(), serial.roles.size());
        for (std::size_t r = 0; r < serial.roles.size(); ++r) {
          EXPECT_EQ(parallel.roles[r].first_id, serial.roles[r].first_id);
          EXPECT_EQ(parallel.roles[r].graph.succ, serial.roles[r].graph.succ);
          EXPECT_EQ(parallel.roles[r].graph.preds, serial.roles[r].graph.preds);
        }
      }
    }
  }
}

TEST(Lower, RanksOfAStageShareOneList) {
  Program prog = lower_json(gpt(4), {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 2}});
  ASSERT_EQ(prog.roles.size(), 2u);
  // rank = (stage * dp + dp_index) * tp + tp_index
  EXPECT_EQ(prog.roles[1].ranks, (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(prog.rank(5).data(), prog.roles[1].instrs.data());
  EXPECT_EQ(prog.placement.group_members(Group::kDp, 5), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(prog.placement.group_members(Group::kTp, 5), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(prog.placement.group_members(Group::kEmbedding, 1), (std::vector<int64_t>{1, 5}));
}

TEST(Lower, EverySchedulePassesTheChecks) {
  for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
    for (int zero = 0; zero <= 3; ++zero) {
      for (const char* recompute : {"none", "full"}) {
        SCOPED_TRACE(std::string(schedule) + " zero" + std::to_string(zero) + " " + recompute);
        nlohmann::json plan = {{"pp", 2}, {"dp", 2}, {"tp", 2}, {"micro_batches", 4}, {"schedule", schedule},
                               {"recompute", recompute}, {"sequence_parallel", true},
                               {"zero", {{"stage", zero}, {"prefetch_bucket", 20000}, {"reduce_bucket", 20000},
                                         {"overlap_comm", zero % 2 == 0}}}};
        if (std::string(schedule) == "interleaved") plan["virtual_stages"] = 2;
        EXPECT_NO_THROW(check(lower_json(gpt(4), plan)));
      }
    }
  }
}

}  // namespace
}  // namespace stagecraft::program

namespace stagecraft::program {
namespace {

TEST(Lower, TensorParallelPipelineSendsAreScatteredAndGathered) {
  // tp 2, pp 2, no sequence parallelism: each tp rank sends half of the b s h activation and
  // the receiver all-gathers the whole b s h over the tp group (Megatron's scatter-gather).
  Program prog = test::lower_json(test::gpt(4), {{"tp", 2}, {"pp", 2}, {"micro_batches", 2}});
  check(prog);
  const int64_t act = 1 * 16 * 64 * 2;  // b s h, bf16
  const RoleProgram& stage1 = prog.roles[1];
  for (std::size_t i = 0; i < stage1.instrs.size(); ++i) {
    const Instr& in = stage1.instrs[i];
    if (in.op != Op::kRecvActivation) continue;
    EXPECT_EQ(in.bytes, act / 2);
    const Instr& next = stage1.instrs[i + 1];
    EXPECT_EQ(next.op, Op::kTpAllGather);
    EXPECT_EQ(next.bytes, act);
  }
}

TEST(Lower, WithoutP2pOverlapComputeWaitsForThePreviousSend) {
  for (bool overlap : {false, true}) {
    Program prog = test::lower_json(test::gpt(4), {{"pp", 2}, {"micro_batches", 4}, {"overlap_p2p", overlap}});
    check(prog);
    const RoleProgram& stage0 = prog.roles[0];
    // stage 0's second forward (micro-batch 1) follows SendActivation(mb 0)
    int32_t send0 = -1, forward1 = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(stage0.instrs.size()); ++i) {
      const Instr& in = stage0.instrs[i];
      if (in.op == Op::kSendActivation && in.mb == 0) send0 = i;
      if (in.op == Op::kForward && in.mb == 1) forward1 = i;
    }
    ASSERT_GE(send0, 0);
    ASSERT_GE(forward1, 0);
    const auto deps = stage0.deps_of(stage0.instrs[forward1]);
    const bool waits = std::find(deps.begin(), deps.end(), send0) != deps.end();
    EXPECT_EQ(waits, !overlap);
  }
}

TEST(Fingerprint, NamesTheProgramAndChangesWithIt) {
  const spec::Model m = test::gpt(4);
  const nlohmann::json plan = {{"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"zero", {{"stage", 2}}}};
  const Program a = test::lower_json(m, plan), b = test::lower_json(m, plan);
  EXPECT_EQ(fingerprint(a), fingerprint(b));   // lowering is pure
  EXPECT_EQ(fingerprint(a).size(), 16u);
  // Another dtype moves other bytes: another Program, though every instruction is where it was.
  spec::Plan p = spec::plan_from_json(plan, "plan.json");
  spec::Training fp32 = test::training(p.micro_batch * p.micro_batches * p.dp);
  fp32.dtype = spec::Dtype::kFp32;
  const Program c = lower(m, fp32, p);
  EXPECT_EQ(c.instruction_count(), a.instruction_count());
  EXPECT_NE(fingerprint(c), fingerprint(a));
  // Another schedule: another order of the same instructions.
  nlohmann::json gpipe = plan;
  gpipe["schedule"] = "gpipe";
  EXPECT_NE(fingerprint(test::lower_json(m, gpipe)), fingerprint(a));
}


// LowerOptions::only_stage: that stage's list exactly as the whole lowering emits it (every
// instruction's fields and dependencies), every other stage's list empty.
TEST(Lower, OneStageAloneIsThatStagesListOfTheWholeProgram) {
  const std::vector<nlohmann::json> plans = {
      {{"pp", 4}, {"dp", 2}, {"tp", 2}, {"micro_batches", 4}, {"schedule", "1f1b"}, {"zero", {{"stage", 3}}}},
      {{"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"schedule", "interleaved"}, {"virtual_stages", 2}, {"zero", {{"stage", 1}}}},
      {{"pp", 4}, {"dp", 2}, {"micro_batches", 8}, {"schedule", "zb-h1"}, {"recompute", "full"}, {"zero", {{"stage", 2}}}}};
  for (const nlohmann::json& j : plans) {
    SCOPED_TRACE(j.dump());
    const spec::Plan p = spec::plan_from_json(j, "plan.json");
    const spec::Training t = test::training(p.micro_batch * p.micro_batches * p.dp);
    const Program whole = lower(gpt(8), t, p);
    for (int32_t s = 0; s < p.pp; ++s) {
      LowerOptions o;
      o.only_stage = s;
      const Program one = lower(gpt(8), t, p, o);
      ASSERT_EQ(one.roles.size(), whole.roles.size());
      for (int32_t r = 0; r < static_cast<int32_t>(whole.roles.size()); ++r) {
        const RoleProgram& a = whole.roles[static_cast<std::size_t>(r)];
        const RoleProgram& b = one.roles[static_cast<std::size_t>(r)];
        if (r != s) {
          EXPECT_TRUE(b.instrs.empty()) << "stage " << r;
          continue;
        }
        ASSERT_EQ(b.instrs.size(), a.instrs.size());
        ASSERT_FALSE(a.instrs.empty());
        for (std::size_t k = 0; k < a.instrs.size(); ++k) {
          const Instr& x = a.instrs[k];
          const Instr& y = b.instrs[k];
          EXPECT_EQ(std::tie(x.op, x.lane, x.group, x.mb, x.chunk, x.bytes, x.elems, x.bucket, x.unit_begin, x.unit_end),
                    std::tie(y.op, y.lane, y.group, y.mb, y.chunk, y.bytes, y.elems, y.bucket, y.unit_begin, y.unit_end))
              << "instruction " << k;
          const auto dx = a.deps_of(x), dy = b.deps_of(y);
          EXPECT_TRUE(std::equal(dx.begin(), dx.end(), dy.begin(), dy.end())) << "instruction " << k;
        }
      }
    }
  }
}

}  // namespace
}  // namespace stagecraft::program
