// The Program checks reject broken Programs, naming the rank and the instruction.
#include <gtest/gtest.h>

#include "core/program/check.hpp"
#include "program_fixtures.hpp"

namespace stagecraft::program {
namespace {

using test::gpt;
using test::lower_json;

// Removes instruction `index` from a list, dropping dependencies on it and renumbering the rest.
void erase_instr(RoleProgram& role, int32_t index) {
  std::vector<Instr> instrs;
  std::vector<int32_t> deps;
  for (int32_t i = 0; i < static_cast<int32_t>(role.instrs.size()); ++i) {
    if (i == index) continue;
    Instr in = role.instrs[i];
    const int32_t begin = static_cast<int32_t>(deps.size());
    for (int32_t d : role.deps_of(role.instrs[i])) {
      if (d != index) deps.push_back(d > index ? d - 1 : d);
    }
    in.dep_begin = begin;
    in.dep_count = static_cast<int16_t>(deps.size() - begin);
    instrs.push_back(in);
  }
  role.instrs = std::move(instrs);
  role.deps = std::move(deps);
}

int32_t find(const RoleProgram& role, Op op, int nth = 0) {
  for (int32_t i = 0; i < static_cast<int32_t>(role.instrs.size()); ++i) {
    if (role.instrs[i].op == op && nth-- == 0) return i;
  }
  return -1;
}

std::string check_message(const Program& prog) {
  try {
    check(prog);
  } catch (const ProgramError& e) {
    return e.what();
  }
  return "";
}

TEST(Check, MissingReceiveIsReported) {
  Program prog = lower_json(gpt(4), {{"pp", 2}, {"micro_batches", 4}});
  ASSERT_EQ(check_message(prog), "");
  RoleProgram& stage1 = prog.roles[1];
  erase_instr(stage1, find(stage1, Op::kRecvActivation, 2));  // micro-batch 2's input
  const std::string msg = check_message(prog);
  // Stage 0 (rank 0) sends micro-batch 2's activation that nobody receives.
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SendActivation mb=2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no matching receive on rank 1"), std::string::npos) << msg;
}

TEST(Check, MissingSendDeadlocks) {
  Program prog = lower_json(gpt(4), {{"pp", 2}, {"micro_batches", 4}});
  RoleProgram& stage1 = prog.roles[1];
  erase_instr(stage1, find(stage1, Op::kSendGrad, 1));
  const std::string msg = check_message(prog);
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("RecvGrad mb=1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
}

TEST(Check, SwappedCollectiveOrderIsReported) {
  // dp = 2, ZeRO-2: rank 1 gets its own copy of the list with two reduce-scatters swapped.
  Program prog = lower_json(gpt(2), {{"dp", 2}, {"micro_batches", 2}, {"zero", {{"stage", 2}, {"reduce_bucket", 1}}}});
  ASSERT_EQ(check_message(prog), "");
  RoleProgram copy = prog.roles[0];
  const int32_t a = find(copy, Op::kReduceScatterGrads, 0), b = find(copy, Op::kReduceScatterGrads, 1);
  std::swap(copy.instrs[a].bucket, copy.instrs[b].bucket);
  std::swap(copy.instrs[a].bytes, copy.instrs[b].bytes);
  std::swap(copy.instrs[a].elems, copy.instrs[b].elems);
  copy.first_id = static_cast<int32_t>(prog.instruction_count());
  copy.ranks = {1};
  prog.roles[0].ranks = {0};
  prog.roles.push_back(copy);
  prog.rank_role[1] = 1;
  const std::string msg = check_message(prog);
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ReduceScatterGrads"), std::string::npos) << msg;
  EXPECT_NE(msg.find("collective number 0 of its dp group"), std::string::npos) << msg;
}

TEST(Check, BackwardBeforeForwardIsReported) {
  Program prog = lower_json(gpt(2), {{"micro_batches", 2}});
  RoleProgram& r = prog.roles[0];
  std::swap(r.instrs[find(r, Op::kForward)], r.instrs[find(r, Op::kBackward)]);
  const std::string msg = check_message(prog);
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backward before this micro-batch's forward"), std::string::npos) << msg;
}

TEST(Check, MismatchedBytesAreReported) {
  Program prog = lower_json(gpt(4), {{"pp", 2}, {"micro_batches", 2}});
  RoleProgram& stage1 = prog.roles[1];
  stage1.instrs[find(stage1, Op::kRecvActivation)].bytes += 2;
  const std::string msg = check_message(prog);
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expects"), std::string::npos) << msg;
}

// Every schedule sends each pipeline message kind in the order the peer receives it (what a
// tagless transport needs), including the interleaved wrap edge and zero-bubble's split backward.
TEST(Check, EverySchedulesPipelineMessagesArriveInSendOrder) {
  for (spec::Schedule sched : spec::kSchedules) {
    for (int64_t pp : {2, 4}) {
      for (int64_t m : {4, 8}) {
        nlohmann::json plan = {{"pp", pp}, {"micro_batches", m}, {"schedule", spec::to_string(sched)}};
        if (sched == spec::Schedule::kInterleaved) plan["virtual_stages"] = 2;
        const Program prog = lower_json(gpt(8), plan);
        int64_t sends = 0;
        for (const RoleProgram& role : prog.roles) {
          for (const Instr& in : role.instrs) sends += is_send(in.op);
        }
        // Each micro-batch crosses every stage boundary of every chunk once forward, once backward.
        const int64_t v = sched == spec::Schedule::kInterleaved ? 2 : 1;
        EXPECT_EQ(sends, 2 * m * (pp * v - 1)) << spec::to_string(sched) << " pp" << pp << " m" << m;
        EXPECT_NO_THROW(check_p2p_order(prog)) << spec::to_string(sched) << " pp" << pp << " m" << m;
      }
    }
  }
}

// Stage 1 receives micro-batches 1 and 2 in swapped order: matched by key the step still runs,
// but a FIFO transport would hand micro-batch 1's activation to the receive of micro-batch 2.
TEST(Check, ReceivesOutOfSendOrderAreReported) {
  Program prog = lower_json(gpt(4), {{"pp", 2}, {"micro_batches", 4}, {"schedule", "gpipe"}});
  RoleProgram& stage1 = prog.roles[1];
  const int32_t a = find(stage1, Op::kRecvActivation, 1), b = find(stage1, Op::kRecvActivation, 2);
  ASSERT_EQ(stage1.instrs[a].mb, 1);
  ASSERT_EQ(stage1.instrs[b].mb, 2);
  std::swap(stage1.instrs[a].mb, stage1.instrs[b].mb);
  std::string msg;
  try {
    check_p2p_order(prog);
  } catch (const ProgramError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("activation receive number 2 from rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SendActivation mb=1"), std::string::npos) << msg;
}

}  // namespace
}  // namespace stagecraft::program
