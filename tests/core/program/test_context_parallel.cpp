// Context parallelism in the plan and the lowering: the plan's fields and their checks, Megatron's
// rank order, and each comm type's collectives — their bytes derived here from the shapes, and
// where they sit (core/program/comm_rules.hpp).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/program/check.hpp"
#include "core/program/comm_rules.hpp"
#include "core/program/format.hpp"  // describe
#include "core/spec/error.hpp"
#include "program_fixtures.hpp"

namespace stagecraft::program {
namespace context_parallel_test {

using test::gpt;

const nlohmann::json kMegatron = "megatron";

// A plan over `cp` with `comm` ("p2p", "all_gather", "a2a") on gpt(layers), lowered with `framework`.
Program lower_cp(int64_t layers, nlohmann::json plan, const nlohmann::json& framework = kMegatron) {
  return test::lower_json(gpt(layers), plan, framework);
}

int64_t count(const RoleProgram& r, Op op) {
  return std::count_if(r.instrs.begin(), r.instrs.end(), [op](const Instr& in) { return in.op == op; });
}

bool depends_on(const RoleProgram& r, int32_t instr, int32_t on) {
  const auto deps = r.deps_of(r.instrs[static_cast<std::size_t>(instr)]);
  return std::find(deps.begin(), deps.end(), on) != deps.end();
}

TEST(ContextParallel, PlanFieldsReadWriteAndCount) {
  const spec::Plan p = spec::plan_from_json({{"tp", 2}, {"cp", 2}, {"cp_comm_type", "a2a"}, {"dp", 3}}, "plan.json");
  EXPECT_EQ(p.cp, 2);
  EXPECT_EQ(p.cp_comm, spec::CpComm::kA2a);
  EXPECT_EQ(p.world(), 2 * 2 * 1 * 3);   // tp × cp × pp × dp
  EXPECT_EQ(p.dp_cp(), 2 * 3);           // the ranks gradients are reduced over
  EXPECT_NE(spec::summary(p).find("tp2 cp2-a2a pp1 dp3"), std::string::npos) << spec::summary(p);
  const spec::Plan back = spec::plan_from_json(spec::to_json(p), "back.json");
  EXPECT_EQ(back.cp, 2);
  EXPECT_EQ(back.cp_comm, spec::CpComm::kA2a);
  // without cp the plan's JSON is what it was
  EXPECT_FALSE(spec::to_json(spec::plan_from_json({{"dp", 2}}, "plan.json")).contains("cp"));
  // bf16 tokens of a rank: micro_batch · seq_len / cp
  EXPECT_EQ(spec::rank_tokens(p, 16), 1 * 16 / 2);
}

// The SpecError's pointer (or "" when it passes).
std::string rejected(const nlohmann::json& plan, const nlohmann::json& framework = kMegatron) {
  try {
    lower_cp(2, plan, framework);
  } catch (const spec::SpecError& e) {
    return e.pointer();
  }
  return "";
}

TEST(ContextParallel, PlansTheModelOrFrameworkCannotRunAreRefusedByField) {
  // seq 16: cp 4 splits it into 2·4 = 8 chunks of 2; cp 16 would need 32 chunks
  EXPECT_EQ(rejected({{"cp", 4}}), "");
  EXPECT_EQ(rejected({{"cp", 16}}), "/cp");
  // a2a scatters heads: 4 heads over tp 2 leave 2 a rank, which cp 4 cannot split
  EXPECT_EQ(rejected({{"tp", 2}, {"cp", 2}, {"cp_comm_type", "a2a"}}), "");
  EXPECT_EQ(rejected({{"tp", 2}, {"cp", 4}, {"cp_comm_type", "a2a"}}), "/cp");
  // DeepSpeed's context parallelism is Ulysses' all-to-all; Megatron-LM of 2021 has none
  EXPECT_EQ(rejected({{"cp", 2}, {"cp_comm_type", "a2a"}}, "deepspeed"), "");
  EXPECT_EQ(rejected({{"cp", 2}}, "deepspeed"), "/cp_comm_type");
  EXPECT_EQ(rejected({{"cp", 2}}, "megatron-2021"), "/cp");
  // ZeRO across nodes is not modelled with cp
  EXPECT_EQ(rejected({{"cp", 2}, {"dp", 2}, {"zero", {{"stage", 1}, {"shard_group", 2}}}}), "/cp");
  // the GPU count counts cp
  const spec::Plan p = spec::plan_from_json({{"cp", 2}, {"dp", 2}}, "plan.json");
  EXPECT_THROW(spec::validate_plan(p, gpt(2), test::training(2, kMegatron), 2), spec::SpecError);
  EXPECT_NO_THROW(spec::validate_plan(p, gpt(2), test::training(2, kMegatron), 4));
}

TEST(ContextParallel, RanksFollowMegatronsOrderAndGradientsSpanDpTimesCp) {
  // tp fastest, then cp, then dp, then pp: rank = ((stage·dp + d)·cp + c)·tp + t
  const Program prog = lower_cp(2, {{"tp", 2}, {"cp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 2}});
  const Placement& pl = prog.placement;
  EXPECT_EQ(pl.world(), 16);
  const int64_t tp = 2, cp = 2, dp = 2;
  const auto rank = [&](int64_t s, int64_t d, int64_t c, int64_t t) { return ((s * dp + d) * cp + c) * tp + t; };
  EXPECT_EQ(pl.group_members(Group::kTp, rank(1, 1, 0, 0)), (std::vector<int64_t>{rank(1, 1, 0, 0), rank(1, 1, 0, 1)}));
  EXPECT_EQ(pl.group_members(Group::kCp, rank(1, 1, 1, 1)), (std::vector<int64_t>{rank(1, 1, 0, 1), rank(1, 1, 1, 1)}));
  // the data-parallel group is every (d, c) of the stage and tp index: dp·cp = 4 ranks
  EXPECT_EQ(pl.group_members(Group::kDp, rank(0, 0, 0, 1)),
            (std::vector<int64_t>{rank(0, 0, 0, 1), rank(0, 0, 1, 1), rank(0, 1, 0, 1), rank(0, 1, 1, 1)}));
  EXPECT_EQ(pl.cp_index_of(rank(1, 1, 1, 0)), 1);
  EXPECT_EQ(pl.batch_index_of(rank(1, 1, 1, 0)), 1);
  // a pipeline message goes to the same (d, c, t) on the next stage
  for (const Instr& in : prog.rank(rank(0, 1, 1, 0))) {
    if (in.op == Op::kSendActivation) {
      EXPECT_EQ(message_of(pl, rank(0, 1, 1, 0), in).dst, rank(1, 1, 1, 0));
    }
  }
  // ZeRO-1 partitions the optimizer over the same 4 ranks as a plan of dp 4 without cp
  const Program dp4 = lower_cp(2, {{"tp", 2}, {"pp", 2}, {"dp", 4}, {"micro_batches", 1}, {"zero", {{"stage", 1}}}});
  const Program cp2 = lower_cp(2, {{"tp", 2}, {"cp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 2}, {"zero", {{"stage", 1}}}});
  const auto optimizer_elems = [](const Program& p) {
    for (const Instr& in : p.roles[0].instrs) {
      if (in.op == Op::kOptimizerStep) return in.elems;
    }
    return int64_t{-1};
  };
  EXPECT_EQ(optimizer_elems(cp2), optimizer_elems(dp4));
  EXPECT_GT(optimizer_elems(cp2), 0);
}

// gpt: h = 64, 4 heads (4 K/V heads) of d = 16, seq 16, bf16 (w = 2). cp 2, micro_batch 1:
// a rank's tokens T = 16 / 2 = 8.
constexpr int64_t kT = 8, kD = 16, kW = 2, kHeads = 4, kCp = 2;

TEST(ContextParallel, EachCommTypesBytesFromTheShapes) {
  const int64_t kv_gather = kCp * kT * 2 * kHeads * kD * kW;   // every rank's K and V: 4096 bytes
  const int64_t qkv = kT * (kHeads + 2 * kHeads) * kD * kW;    // a rank's Q, K, V: 3072
  const int64_t out = kT * kHeads * kD * kW;                   // a rank's attention output: 1024
  const int64_t m = 2, attention_units = 2;
  {
    const Program p = lower_cp(2, {{"cp", kCp}, {"micro_batches", m}});
    const RoleProgram& r = p.roles[0];
    // forward: a K/V pass around the ring; backward: K/V again and dK/dV back
    EXPECT_EQ(count(r, Op::kCpAllGather), m * attention_units * 2);
    EXPECT_EQ(count(r, Op::kCpReduceScatter), m * attention_units);
    for (const Instr& in : r.instrs) {
      if (in.op != Op::kCpAllGather && in.op != Op::kCpReduceScatter) continue;
      EXPECT_EQ(in.bytes, kv_gather);
      EXPECT_EQ(in.group, Group::kCp);
      EXPECT_EQ(in.lane, Lane::kCp);
      EXPECT_EQ(in.unit_end - in.unit_begin, 1);
      EXPECT_TRUE(in.unit_begin == 1 || in.unit_begin == 3) << "an attention unit";
    }
  }
  {
    const Program p = lower_cp(2, {{"cp", kCp}, {"cp_comm_type", "all_gather"}, {"micro_batches", m}});
    EXPECT_EQ(count(p.roles[0], Op::kCpAllGather), m * attention_units * 2);
    EXPECT_EQ(count(p.roles[0], Op::kCpReduceScatter), m * attention_units);
  }
  {
    const Program p = lower_cp(2, {{"cp", kCp}, {"cp_comm_type", "a2a"}, {"micro_batches", m}});
    const RoleProgram& r = p.roles[0];
    EXPECT_EQ(count(r, Op::kCpAllGather) + count(r, Op::kCpReduceScatter), 0);
    // Q, K, V to heads and the output back, each pass (the backward: d(out) there, dQ, dK, dV back)
    int64_t qkv_n = 0, out_n = 0;
    for (const Instr& in : r.instrs) {
      if (in.op != Op::kAllToAll) continue;
      EXPECT_EQ(in.group, Group::kCp);
      qkv_n += in.bytes == qkv;
      out_n += in.bytes == out;
    }
    EXPECT_EQ(qkv_n, m * attention_units * 2);
    EXPECT_EQ(out_n, m * attention_units * 2);
  }
  // the rest of the Program counts the rank's tokens: a pipeline message T·h·w, and a forward's
  // FLOPs half the plan without cp (per-token FLOPs count the whole sequence's keys)
  const Program cp2 = lower_cp(2, {{"cp", kCp}, {"pp", 2}, {"micro_batches", m}});
  const Program cp1 = lower_cp(2, {{"pp", 2}, {"micro_batches", m}});
  for (const Instr& in : cp2.roles[0].instrs) {
    if (in.op == Op::kSendActivation) {
      EXPECT_EQ(in.bytes, kT * 64 * kW);
    }
  }
  double f2 = 0, f1 = 0;
  for (const Instr& in : cp2.roles[0].instrs) f2 += in.op == Op::kForward ? in.flops : 0;
  for (const Instr& in : cp1.roles[0].instrs) f1 += in.op == Op::kForward ? in.flops : 0;
  EXPECT_DOUBLE_EQ(2 * f2, f1);
}

// The first instruction of `op` on an attention unit of gpt(2) (units 1 and 3; 5 is the head).
int32_t find_attention(const RoleProgram& r, Op op) {
  for (int32_t i = 0; i < static_cast<int32_t>(r.instrs.size()); ++i) {
    const Instr& in = r.instrs[static_cast<std::size_t>(i)];
    if (in.op == op && (in.unit_begin == 1 || in.unit_begin == 3)) return i;
  }
  return -1;
}

TEST(ContextParallel, TheRingRunsBesideTheAttentionTheOthersBlockIt) {
  {  // p2p: the attention's forward does not wait for the ring; the MLP after it does
    const Program p = lower_cp(2, {{"cp", kCp}});
    const RoleProgram& r = p.roles[0];
    const int32_t ring = find_attention(r, Op::kCpAllGather);
    const int32_t attn = find_attention(r, Op::kForward);
    ASSERT_GE(ring, 0);
    ASSERT_EQ(attn, ring + 1);
    EXPECT_FALSE(depends_on(r, attn, ring));
    const int32_t mlp = attn + 1;
    EXPECT_EQ(r.instrs[static_cast<std::size_t>(mlp)].op, Op::kForward);
    EXPECT_TRUE(depends_on(r, mlp, ring));
    EXPECT_TRUE(depends_on(r, mlp, attn));
  }
  {  // all_gather: the attention waits for the gather; in the backward the next compute waits for dK/dV
    const Program p = lower_cp(2, {{"cp", kCp}, {"cp_comm_type", "all_gather"}});
    const RoleProgram& r = p.roles[0];
    const int32_t gather = find_attention(r, Op::kCpAllGather);
    EXPECT_TRUE(depends_on(r, find_attention(r, Op::kForward), gather));
    const int32_t back = find_attention(r, Op::kBackward);
    const int32_t reduce = find_attention(r, Op::kCpReduceScatter);
    ASSERT_GT(reduce, back);
    EXPECT_TRUE(depends_on(r, reduce, back))<< describe(p, r, reduce);
    EXPECT_TRUE(depends_on(r, reduce + 1, reduce)) << to_string(r.instrs[static_cast<std::size_t>(reduce + 1)].op);
  }
}

TEST(ContextParallel, EveryCommTypeScheduleAndZeroStagePassesTheChecks) {
  // Megatron-Core runs every comm type, with ZeRO 0-1 (its distributed optimizer); ZeRO 2-3 with
  // cp: FSDP2 (torch's ring and all-gather) and DeepSpeed (Ulysses' all-to-all)
  for (const char* comm : {"p2p", "all_gather", "a2a"}) {
    for (const char* schedule : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
      for (int zero = 0; zero <= 3; ++zero) {
        const std::string c = comm;
        const nlohmann::json framework = zero <= 1 ? "megatron" : c == "a2a" ? "deepspeed" : "fsdp2";
        SCOPED_TRACE(c + " " + schedule + " zero" + std::to_string(zero) + " " + framework.get<std::string>());
        nlohmann::json plan = {{"pp", 2}, {"dp", 2}, {"tp", 2}, {"cp", 2}, {"cp_comm_type", comm}, {"micro_batches", 4},
                               {"schedule", schedule}, {"recompute", zero == 2 ? "full" : "none"},
                               {"sequence_parallel", true},
                               {"zero", {{"stage", zero}, {"prefetch_bucket", 20000}, {"reduce_bucket", 20000},
                                         {"overlap_comm", zero % 2 == 0}}}};
        if (std::string(schedule) == "interleaved") plan["virtual_stages"] = 2;
        EXPECT_NO_THROW(check(lower_cp(4, plan, framework)));
      }
    }
  }
}

}  // namespace context_parallel_test
}  // namespace stagecraft::program
