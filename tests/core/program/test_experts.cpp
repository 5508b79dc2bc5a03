// Mixture of experts in the lowering: the units' expert tensors and FLOPs, Megatron-Core's folding
// of the expert-parallel groups, a MoE unit's pass split around its dispatch and combine
// all-to-alls, and the experts' gradients reduced and partitioned over their own group — each
// value derived here from the shapes (core/program/comm_rules.hpp, zero.hpp, units.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/program/check.hpp"
#include "core/program/units.hpp"
#include "core/program/zero.hpp"
#include "program_fixtures.hpp"

namespace stagecraft::program {
namespace experts_test {

// h = 64, 4 heads, SwiGLU, 2 layers, 4 routed experts (top-2) of width 32, seq 32.
spec::Model moe() {
  return spec::model_from_json({{"name", "moe"}, {"layers", 2}, {"hidden", 64}, {"heads", 4}, {"ffn_hidden", 128},
                                {"vocab", 64}, {"seq_len", 32}, {"mlp", "swiglu"}, {"norm", "rmsnorm"},
                                {"position", "rope"}, {"tied_embeddings", false}, {"bias", false},
                                {"moe", {{"experts", 4}, {"experts_per_token", 2}, {"expert_ffn_hidden", 32}}}},
                               "moe.json");
}

Program lower_moe(const nlohmann::json& plan) { return test::lower_json(moe(), plan, "megatron"); }

constexpr int64_t kH = 64, kE = 4, kK = 2, kFe = 32, kT = 32;
constexpr int64_t kExpert = 3 * kH * kFe;  // one SwiGLU expert: gate and up h·f_e, down f_e·h

TEST(Experts, UnitsHoldTheirShareOfTheExpertsAndTheActiveFlops) {
  const spec::Model m = moe();
  const std::vector<Unit> whole = model_units(m, 1, 1), half = model_units(m, 1, 2);
  const Unit& u = whole[2];   // block 0's MLP
  ASSERT_EQ(u.kind, UnitKind::kMoe);
  // norm2 h + router h·E + the 4 experts
  EXPECT_EQ(u.params, kH + kH * kE + kE * kExpert);
  EXPECT_EQ(u.expert_params, kE * kExpert);
  EXPECT_EQ(half[2].expert_params, kE / 2 * kExpert);   // ep 2: two experts a rank
  EXPECT_EQ(half[2].params, kH + kH * kE + kE / 2 * kExpert);
  // per token: router 2hE + top-2 experts' 2·3·h·f_e each, whatever ep
  EXPECT_DOUBLE_EQ(u.fwd_flops_per_token, 2.0 * kH * kE + kK * 2.0 * kExpert);
  EXPECT_DOUBLE_EQ(half[2].fwd_flops_per_token, u.fwd_flops_per_token);
  EXPECT_DOUBLE_EQ(u.expert_flops_per_token, kK * 2.0 * kExpert);
  // tp 2 (sequence parallel): each rank routes half of the tokens
  EXPECT_DOUBLE_EQ(model_units(m, 2, 1)[2].fwd_flops_per_token, u.fwd_flops_per_token / 2);
}

TEST(Experts, GroupsFoldIntoTheStage) {
  // tp 2 × dp 4, ep 4: l = dp_index·2 + tp_index; ep groups of 4 consecutive l, the experts'
  // data-parallel group the l of one position in each (l mod 4)
  Placement pl{2, 1, 4};
  pl.ep = 4;
  EXPECT_EQ(pl.group_members(Group::kEp, 5), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(pl.group_members(Group::kExpertDp, 5), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(pl.group_members(Group::kDp, 5), (std::vector<int64_t>{1, 3, 5, 7}));
  // ep = tp: the experts' group is the dense data-parallel group
  pl.ep = 2;
  EXPECT_EQ(pl.group_members(Group::kExpertDp, 5), pl.group_members(Group::kDp, 5));
}

TEST(Experts, AMoePassIsSplitAroundItsAllToAlls) {
  const Program prog = lower_moe({{"dp", 4}, {"ep", 2}, {"zero", {{"stage", 1}}}});
  check(prog);
  const RoleProgram& r = prog.roles[0];
  // block 0's MLP (unit 2): compute, dispatch, experts, combine forward; the reverse backward
  std::vector<const Instr*> unit2;
  for (const Instr& in : r.instrs) {
    if (in.unit_begin == 2 && in.unit_end == 3 && (is_compute(in.op) || in.lane == Lane::kEp)) unit2.push_back(&in);
  }
  ASSERT_EQ(unit2.size(), 8u);
  const int64_t a2a = kT * kK * kH * 2;   // T tokens · k copies · h · 2 bytes
  const Op ops[] = {Op::kForward, Op::kAllToAll, Op::kForward, Op::kAllToAll, Op::kAllToAll, Op::kBackward, Op::kAllToAll, Op::kBackward};
  const bool experts[] = {false, false, true, false, false, true, false, false};
  const double routed = kK * 2.0 * kExpert * kT;   // the experts' forward FLOPs of the micro-batch
  const double router = 2.0 * kH * kE * kT;
  for (std::size_t i = 0; i < unit2.size(); ++i) {
    SCOPED_TRACE(i);
    const Instr& in = *unit2[i];
    EXPECT_EQ(in.op, ops[i]);
    EXPECT_EQ((in.flags & kFlagExperts) != 0, experts[i]);
    if (in.op == Op::kAllToAll) {
      EXPECT_EQ(in.group, Group::kEp);
      EXPECT_EQ(in.bytes, a2a);
    }
  }
  EXPECT_DOUBLE_EQ(unit2[0]->flops, router);
  EXPECT_DOUBLE_EQ(unit2[2]->flops, routed);
  EXPECT_DOUBLE_EQ(unit2[5]->flops, 2 * routed);   // input and weight gradients
  EXPECT_DOUBLE_EQ(unit2[7]->flops, 2 * router);
  EXPECT_EQ(unit2[2]->elems, kE / 2 * kExpert);
}

TEST(Experts, ExpertGradientsAreReducedAndPartitionedOverTheirGroup) {
  const Program prog = lower_moe({{"dp", 4}, {"ep", 2}, {"zero", {{"stage", 1}}}});
  const RoleProgram& r = prog.roles[0];
  // ZeRO-1: the dense gradients reduce-scattered over dp 4, the experts' (2 a rank in each of
  // the 2 layers) over their 4 / 2 = 2 holders
  int64_t dense = 0, experts = 0;
  for (const Instr& in : r.instrs) {
    if (in.op != Op::kReduceScatterGrads) continue;
    if (in.group == Group::kExpertDp) experts += in.elems;
    else if (in.group == Group::kDp) dense += in.elems;
  }
  const int64_t expert_elems = 2 * kE / 2 * kExpert;
  EXPECT_EQ(experts, expert_elems);
  EXPECT_EQ(dense + experts, prog.chunks[0].params);
  EXPECT_EQ(prog.chunks[0].expert_params, expert_elems);
  const auto opt = std::find_if(r.instrs.begin(), r.instrs.end(), [](const Instr& in) { return in.op == Op::kOptimizerStep; });
  ASSERT_NE(opt, r.instrs.end());
  EXPECT_EQ(opt->elems, shard_elems(dense, 4) + shard_elems(expert_elems, 2));
  // and gathered back over the same groups
  int64_t gathered_experts = 0;
  for (const Instr& in : r.instrs) {
    if (in.op == Op::kAllGatherParams && in.group == Group::kExpertDp) gathered_experts += in.elems;
  }
  EXPECT_EQ(gathered_experts, expert_elems);
}

TEST(Experts, WithoutExpertParallelismNothingIsSplit) {
  const Program prog = lower_moe({{"dp", 2}});
  check(prog);
  for (const Instr& in : prog.roles[0].instrs) {
    EXPECT_NE(in.lane, Lane::kEp);
    EXPECT_EQ(in.flags & kFlagExperts, 0);
    EXPECT_NE(in.group, Group::kExpertDp);   // the experts' group is the dense one: reduced with it
  }
}

// tp 2 with sequence parallelism and ep 2 over 4 ranks, pipelined: the whole Program's
// collectives match across ranks (check), and each rank routes half of the micro-batch's tokens.
TEST(Experts, ComposesWithTensorAndPipelineParallelism) {
  const Program prog = lower_moe({{"tp", 2}, {"pp", 2}, {"dp", 2}, {"ep", 2}, {"sequence_parallel", true},
                                  {"micro_batches", 4}});
  check(prog);
  const RoleProgram& last = prog.roles[1];
  const auto a2a = std::find_if(last.instrs.begin(), last.instrs.end(), [](const Instr& in) { return in.lane == Lane::kEp; });
  ASSERT_NE(a2a, last.instrs.end());
  EXPECT_EQ(a2a->bytes, kT / 2 * kK * kH * 2);
}

// Expert tensor parallelism (etp 2): each rank holds half of each of its experts' width (gate
// and up by columns, down by rows; no biases here) and computes it for twice the tokens: the same
// FLOPs a token.
TEST(Experts, ExpertTensorParallelismHalvesEachExpert) {
  const spec::Model m = moe();
  const Unit whole = model_units(m, 1, 1)[2];
  const Unit split = model_units(m, 1, 2, 2)[2];   // ep 2, etp 2
  EXPECT_EQ(split.expert_params, kE / 2 * kExpert / 2);
  EXPECT_EQ(split.params, kH + kH * kE + kE / 2 * kExpert / 2);
  EXPECT_DOUBLE_EQ(split.fwd_flops_per_token, whole.fwd_flops_per_token);
  EXPECT_DOUBLE_EQ(split.expert_flops_per_token, whole.expert_flops_per_token);
}

// The grid etp 2 × ep 2 × edp 2 over tp 2 × dp 4 (l = dp_index·2 + tp_index, etp fastest):
// rank 5 (l 5) has etp index 1, ep index (5/2) mod 2 = 0, edp index 5/4 = 1.
TEST(Experts, ExpertTensorParallelGroupsAreTheFastestOfTheGrid) {
  Placement pl{2, 1, 4};
  pl.ep = 2;
  pl.etp = 2;
  EXPECT_EQ(pl.group_members(Group::kExpertTp, 5), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(pl.group_members(Group::kEp, 5), (std::vector<int64_t>{5, 7}));        // etp index 1, edp index 1
  EXPECT_EQ(pl.group_members(Group::kExpertDp, 5), (std::vector<int64_t>{1, 5}));   // l mod 4 = 1
  EXPECT_EQ(pl.etp_index_of(5), 1);
  EXPECT_EQ(pl.ep_index_of(5), 0);
  EXPECT_EQ(pl.expert_dp_index_of(5), 1);
  // on a second stage the same shape, shifted by the stage's 8 ranks
  Placement two = pl;
  two.pp = 2;
  EXPECT_EQ(two.group_members(Group::kEp, 8 + 5), (std::vector<int64_t>{13, 15}));
}

// etp 2 adds a gather of the routed copies before the experts and a scatter of their partial
// outputs after (S = etp·T·k·h·w), inside the all-to-alls; with ep 1 they stand alone.
TEST(Experts, ExpertTensorParallelismGathersAndScattersInsideTheAllToAlls) {
  const int64_t a2a = kT * kK * kH * 2, S = 2 * a2a;
  const double routed = kK * 2.0 * kExpert * kT;
  struct Case {
    nlohmann::json plan;
    std::vector<Op> ops;
  };
  const Case cases[] = {
      {{{"dp", 4}, {"ep", 2}, {"etp", 2}, {"zero", {{"stage", 1}}}},
       {Op::kForward, Op::kAllToAll, Op::kTpAllGather, Op::kForward, Op::kTpReduceScatter, Op::kAllToAll,   //
        Op::kAllToAll, Op::kTpAllGather, Op::kBackward, Op::kTpReduceScatter, Op::kAllToAll, Op::kBackward}},
      {{{"dp", 4}, {"etp", 2}},
       {Op::kForward, Op::kTpAllGather, Op::kForward, Op::kTpReduceScatter,   //
        Op::kTpAllGather, Op::kBackward, Op::kTpReduceScatter, Op::kBackward}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.plan.dump());
    const Program prog = lower_moe(c.plan);
    check(prog);
    std::vector<const Instr*> unit2;
    for (const Instr& in : prog.roles[0].instrs) {
      if (in.unit_begin == 2 && in.unit_end == 3 && (is_compute(in.op) || in.lane == Lane::kEp)) unit2.push_back(&in);
    }
    ASSERT_EQ(unit2.size(), c.ops.size());
    for (std::size_t i = 0; i < unit2.size(); ++i) {
      SCOPED_TRACE(i);
      const Instr& in = *unit2[i];
      EXPECT_EQ(in.op, c.ops[i]);
      if (in.op == Op::kTpAllGather || in.op == Op::kTpReduceScatter) {
        EXPECT_EQ(in.group, Group::kExpertTp);
        EXPECT_EQ(in.bytes, S);
      }
      if (in.op == Op::kAllToAll) {
        EXPECT_EQ(in.bytes, a2a);
      }
      if (in.flags & kFlagExperts) {
        EXPECT_DOUBLE_EQ(in.flops, (in.op == Op::kForward ? 1 : 2) * routed);
        EXPECT_EQ(in.elems, (c.plan.contains("ep") ? kE / 2 : kE) * kExpert / 2);
      }
    }
  }
}

// etp 2 × ep 2 over dp 8: the experts' shards are held by 8 / 4 = 2 ranks, over which ZeRO-1
// reduce-scatters their gradients (2 layers of 2 experts at half width a rank).
TEST(Experts, ExpertTensorParallelShardsReduceOverTheirDataParallelGroup) {
  const Program prog = lower_moe({{"dp", 8}, {"ep", 2}, {"etp", 2}, {"micro_batches", 1}, {"zero", {{"stage", 1}}}});
  check(prog);
  int64_t dense = 0, experts = 0;
  for (const Instr& in : prog.roles[0].instrs) {
    if (in.op != Op::kReduceScatterGrads) continue;
    (in.group == Group::kExpertDp ? experts : dense) += in.elems;
  }
  const int64_t expert_elems = 2 * kE / 2 * kExpert / 2;
  EXPECT_EQ(experts, expert_elems);
  EXPECT_EQ(dense + experts, prog.chunks[0].params);
  const auto opt = std::find_if(prog.roles[0].instrs.begin(), prog.roles[0].instrs.end(),
                                [](const Instr& in) { return in.op == Op::kOptimizerStep; });
  ASSERT_NE(opt, prog.roles[0].instrs.end());
  EXPECT_EQ(opt->elems, shard_elems(dense, 8) + shard_elems(expert_elems, 2));
}

// Megatron-Core's all-gather dispatcher over the expert grid etp 1 × ep 2 (G = 2, dp 4): no
// all-to-all; the forward gathers the group's tokens with their probabilities and routing map,
// S = G·T·(h·w + E·w + E) = 2·32·(128 + 8 + 4) = 8960 bytes, and reduce-scatters the experts'
// outputs, S = G·T·h·w = 8192; the backward gathers d(output) (8192) and reduce-scatters d(tokens)
// and d(probabilities), S = G·T·(h + E)·w = 2·32·68·2 = 8704.
TEST(Experts, TheAllGatherDispatcherGathersTheGroupsTokens) {
  const Program prog = lower_moe({{"dp", 4}, {"ep", 2}, {"moe_dispatcher", "allgather"}, {"zero", {{"stage", 1}}}});
  check(prog);
  std::vector<const Instr*> unit2;
  for (const Instr& in : prog.roles[0].instrs) {
    if (in.unit_begin == 2 && in.unit_end == 3 && (is_compute(in.op) || in.lane == Lane::kEp)) unit2.push_back(&in);
  }
  const Op ops[] = {Op::kForward, Op::kTpAllGather, Op::kForward, Op::kTpReduceScatter,
                    Op::kTpAllGather, Op::kBackward, Op::kTpReduceScatter, Op::kBackward};
  const int64_t bytes[] = {0, 2 * kT * (kH * 2 + kE * 2 + kE), 0, 2 * kT * kH * 2, 2 * kT * kH * 2, 0, 2 * kT * (kH + kE) * 2, 0};
  ASSERT_EQ(unit2.size(), 8u);
  for (std::size_t i = 0; i < unit2.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(unit2[i]->op, ops[i]);
    if (!is_compute(unit2[i]->op)) {
      EXPECT_EQ(unit2[i]->group, Group::kExpertTpEp);
      EXPECT_EQ(unit2[i]->bytes, bytes[i]);
    }
  }
  // the group: the etp·ep consecutive places of a stage (here the ep pair)
  EXPECT_EQ(prog.placement.group_members(Group::kExpertTpEp, 3), (std::vector<int64_t>{2, 3}));
  Placement grid{2, 1, 4};
  grid.ep = 2;
  grid.etp = 2;
  EXPECT_EQ(grid.group_members(Group::kExpertTpEp, 5), (std::vector<int64_t>{4, 5, 6, 7}));
}

// The balancing loss over tp or cp ranks (comm_rules.hpp, moe_aux_counts_bytes): each MoE unit's
// forward all-reduces E int64 counts, 4 · 8 = 32 bytes, over the tp·cp ranks of its micro-batch
// (Group::kTpCp) after the route and before the dispatch; under full recompute the Recompute does it
// instead of the forward; none without the loss, at tp·cp = 1, or in a forward-only Program.
TEST(Experts, TheBalancingLossSumsItsCountsOverTheTpCpGroup) {
  auto lower_aux = [](const nlohmann::json& plan_json, double alpha, LowerOptions options = {}) {
    const spec::Plan p = spec::plan_from_json(plan_json, "plan.json");
    spec::Training t = test::training(p.micro_batch * p.micro_batches * p.dp, "megatron");
    t.moe_aux_loss_coeff = alpha;
    return lower(moe(), t, p, options);
  };
  auto counts_of = [](const Program& prog, int32_t unit) {
    std::vector<std::pair<Op, Op>> out;  // (the all-reduce's predecessor on the unit, what follows it)
    const auto& v = prog.roles[0].instrs;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i].group != Group::kTpCp || v[i].unit_begin != unit) continue;
      EXPECT_EQ(v[i].op, Op::kTpAllReduce);
      EXPECT_EQ(v[i].lane, Lane::kTp);
      EXPECT_EQ(v[i].bytes, kE * 8);
      std::size_t next = i + 1;
      while (next < v.size() && v[next].unit_begin != unit) ++next;
      out.emplace_back(v[i - 1].op, next < v.size() ? v[next].op : Op::kForward);
    }
    return out;
  };
  const nlohmann::json tp_ep = {{"tp", 2}, {"dp", 2}, {"ep", 2}, {"sequence_parallel", true}, {"micro_batches", 2}};
  const Program prog = lower_aux(tp_ep, 0.01);
  check(prog);
  // unit 2 (block 0's MoE): per micro-batch one, after the route's Forward and before the dispatch
  const auto two = counts_of(prog, 2);
  ASSERT_EQ(two.size(), 2u);
  for (const auto& [before, after] : two) {
    EXPECT_EQ(before, Op::kForward);
    EXPECT_EQ(after, Op::kAllToAll);
  }
  EXPECT_EQ(prog.placement.group_members(Group::kTpCp, 3), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(prog.placement.moe_counts);
  // full recompute: the Recompute's, not the forward's
  nlohmann::json full = tp_ep;
  full["recompute"] = "full";
  const Program recomputed = lower_aux(full, 0.01);
  check(recomputed);
  for (int32_t unit : {2, 4}) {  // both blocks' MoE units
    const auto r = counts_of(recomputed, unit);
    ASSERT_EQ(r.size(), 2u);
    for (const auto& [before, after] : r) {
      EXPECT_EQ(before, Op::kRecompute);
      EXPECT_EQ(after, Op::kAllToAll);
    }
  }
  // cp 2 x tp 2: the 4 ranks of a micro-batch, whose tokens are split over tp and cp
  const Program cp = lower_aux({{"tp", 2}, {"cp", 2}, {"dp", 1}, {"sequence_parallel", true}, {"micro_batches", 2}}, 0.01);
  check(cp);
  EXPECT_EQ(cp.placement.group_members(Group::kTpCp, 2), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(counts_of(cp, 2).size(), 2u);
  // none without the loss, at tp·cp 1, or forward only
  EXPECT_TRUE(counts_of(lower_aux(tp_ep, 0.0), 2).empty());
  EXPECT_TRUE(counts_of(lower_aux({{"dp", 4}, {"ep", 2}, {"micro_batches", 2}}, 0.01), 2).empty());
  LowerOptions eval;
  eval.forward_only = true;
  const Program fwd = lower_aux(tp_ep, 0.01, eval);
  EXPECT_TRUE(counts_of(fwd, 2).empty());
  EXPECT_FALSE(fwd.placement.moe_counts);
}

}  // namespace experts_test
}  // namespace stagecraft::program
