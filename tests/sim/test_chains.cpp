// Chains (sim/chains.hpp): what a step-time-only simulation times in one go. They must change no
// step time, so the tests compare step-time-only simulations, which use them, with full ones,
// which do not, to the nanosecond, over plans that exercise every kind of instruction.
#include "sim/chains.hpp"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cluster_fixture.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::sim {
namespace chains_test {

using program::Lane;

spec::Model chain_blocks(int64_t layers) {
  return spec::model_from_json({{"name", "blocks"}, {"layers", layers}, {"hidden", 512}, {"heads", 8}, {"vocab", 512},
                                {"seq_len", 128}, {"tied_embeddings", true}},
                               "blocks.json");
}

program::Program lower_plan(const spec::Model& m, const nlohmann::json& plan, const std::string& framework = "") {
  spec::Plan p = spec::plan_from_json(plan, "plan.json");
  nlohmann::json training = {{"global_batch", p.micro_batch * p.micro_batches * p.dp}, {"dtype", "bf16"}};
  if (!framework.empty()) training["framework"] = framework;
  return program::lower(m, spec::training_from_json(training, "training.json"), p);
}

// predecessors of k: the previous instruction of its lane and its dependencies
std::vector<int32_t> chain_preds(const program::RoleProgram& role, int32_t k) {
  std::vector<int32_t> out;
  const Lane lane = role.instrs[static_cast<std::size_t>(k)].lane;
  for (int32_t q = k - 1; q >= 0; --q) {
    if (role.instrs[static_cast<std::size_t>(q)].lane == lane) {
      out.push_back(q);
      break;
    }
  }
  for (int32_t d : role.deps_of(role.instrs[static_cast<std::size_t>(k)])) out.push_back(d);
  return out;
}

std::vector<int32_t> chain_succs(const program::RoleGraph& g, int32_t k) {
  std::vector<int32_t> out;
  if (g.lane_next[static_cast<std::size_t>(k)] >= 0) out.push_back(g.lane_next[static_cast<std::size_t>(k)]);
  for (int32_t i = g.succ_begin[static_cast<std::size_t>(k)]; i < g.succ_begin[static_cast<std::size_t>(k) + 1]; ++i) {
    out.push_back(g.succ[static_cast<std::size_t>(i)]);
  }
  return out;
}

// A tensor-parallel layer pass is gather, compute, reduce-scatter, gather, ...: one chain, and
// only the members something outside waits for are exits.
TEST(Chains, PassesAreChainsWhoseExitsAreWhatTheRestWaitsFor) {
  // pp 2: the sends and receives between a stage's passes end its chains
  const program::Program prog =
      lower_plan(chain_blocks(4), {{"tp", 2}, {"pp", 2}, {"micro_batches", 4}, {"sequence_parallel", true}});
  ASSERT_EQ(prog.roles.size(), 2u);
  const program::RoleProgram& role = prog.roles[0];
  program::RoleGraph scratch;
  const program::RoleGraph& g = program::graph_of(role, scratch);
  const Chains ch = find_chains(role, g, true);
  ASSERT_FALSE(ch.begin.empty());
  std::size_t members = 0;
  for (std::size_t c = 0; c < ch.begin.size(); ++c) {
    const int32_t a = ch.begin[c], e = ch.end[c];
    ASSERT_GE(e - a, 2);
    members += static_cast<std::size_t>(e - a);
    for (int32_t k = a; k < e; ++k) {
      const program::Instr& in = role.instrs[static_cast<std::size_t>(k)];
      EXPECT_TRUE((in.lane == Lane::kCompute && program::is_compute(in.op)) || in.lane == Lane::kTp) << "#" << k;
      // an exit is exactly a member with a successor outside
      bool outside = false;
      for (int32_t s : chain_succs(g, k)) outside |= s < a || s >= e;
      EXPECT_EQ(ch.exit[static_cast<std::size_t>(k)] != 0, outside) << "#" << k;
      if (k == a) continue;
      bool inside = false;
      for (int32_t q : chain_preds(role, k)) inside |= q >= a;
      EXPECT_TRUE(inside) << "#" << k << " has no predecessor inside its chain";
    }
  }
  EXPECT_EQ(members, ch.members);
  // each pass has at most a compute and a collective that the rest waits for, plus the entry's
  // neighbours
  int64_t computes = 0, exits = 0;
  for (std::size_t k = 0; k < role.instrs.size(); ++k) {
    if (ch.of[k] < 0) continue;
    computes += role.instrs[k].lane == Lane::kCompute;
    exits += ch.exit[k];
  }
  EXPECT_GT(computes, 0);
  EXPECT_LE(exits, 3 * static_cast<int64_t>(ch.begin.size()));
  EXPECT_GT(static_cast<int64_t>(ch.members), 3 * exits);
  // later micro-batches' passes repeat the first's: twins, whose members match one for one
  int64_t twins = 0;
  for (std::size_t c = 0; c < ch.begin.size(); ++c) {
    const auto s = static_cast<std::size_t>(ch.shape[c]);
    ASSERT_LE(s, c);
    if (s == c) continue;
    ++twins;
    ASSERT_EQ(ch.end[s] - ch.begin[s], ch.end[c] - ch.begin[c]);
    for (int32_t i = 0; i < ch.end[c] - ch.begin[c]; ++i) {
      const program::Instr& x = role.instrs[static_cast<std::size_t>(ch.begin[c] + i)];
      const program::Instr& y = role.instrs[static_cast<std::size_t>(ch.begin[s] + i)];
      EXPECT_EQ(x.op, y.op);
      EXPECT_EQ(x.unit_begin, y.unit_begin);
      EXPECT_EQ(x.bytes, y.bytes);
      EXPECT_EQ(ch.exit[static_cast<std::size_t>(ch.begin[c] + i)], ch.exit[static_cast<std::size_t>(ch.begin[s] + i)]);
    }
  }
  EXPECT_GT(twins, 0);
}

// Exactness: every step-time-only simulation (chains) equals the full one (no chains), to the ns.
void expect_same_step(const program::Program& prog, const spec::Cluster& c, NetworkModel network, bool full_mode) {
  SimOptions all, quick;
  all.network = quick.network = network;
  all.full = quick.full = full_mode;
  quick.step_time_only = true;
  const double expected = simulate(prog, c, all).metrics.step_time_s;
  ASSERT_GT(expected, 0);
  EXPECT_EQ(simulate(prog, c, quick).metrics.step_time_s, expected);
  // with the chains handed in (as the error bars do), and with chains found without the overlap
  // rule (ignored where NCCL beside compute is charged; used on the contention-free network)
  const std::vector<Chains> shared = find_chains(prog, true), loose = find_chains(prog, false);
  quick.chains = &shared;
  EXPECT_EQ(simulate(prog, c, quick).metrics.step_time_s, expected);
  quick.chains = &loose;
  EXPECT_EQ(simulate(prog, c, quick).metrics.step_time_s, expected);
}

TEST(Chains, StepTimeOnlySimulationsEqualFullOnesToTheNanosecond) {
  // the bundled A100 profile: SM count known, so NCCL's kernels slow the compute beside them
  const spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "dgx-a100-80g-hdr"));
  ASSERT_GT(c.gpu.sm_count, 0);
  const spec::Model m = chain_blocks(8);
  struct Case {
    nlohmann::json plan;
    std::string framework;
  };
  std::vector<Case> cases;
  for (int zero : {0, 1, 2, 3}) {
    for (bool overlap : {false, true}) {
      for (const char* schedule : {"1f1b", "gpipe", "zb-h1"}) {
        cases.push_back({{{"tp", 2}, {"pp", 2}, {"dp", 8}, {"micro_batches", 4}, {"schedule", schedule},
                          {"sequence_parallel", zero % 2 == 0}, {"recompute", zero == 3 ? "full" : "selective"},
                          {"zero", {{"stage", zero}, {"prefetch_bucket", 300000}, {"overlap_comm", overlap}}}},
                         zero == 3 ? "deepspeed" : ""});
      }
    }
  }
  cases.push_back({{{"tp", 4}, {"pp", 2}, {"dp", 4}, {"micro_batches", 4}, {"schedule", "interleaved"}, {"virtual_stages", 2},
                    {"sequence_parallel", true}, {"zero", {{"stage", 1}}}},
                   "megatron"});
  cases.push_back({{{"tp", 2}, {"pp", 1}, {"dp", 16}, {"micro_batches", 2}, {"recompute", "full"}, {"zero", {{"stage", 3}}}}, "fsdp"});
  cases.push_back({{{"tp", 1}, {"pp", 2}, {"dp", 16}, {"micro_batches", 4}, {"zero", {{"stage", 3}}}}, "deepspeed-0.5"});
  cases.push_back({{{"tp", 8}, {"pp", 4}, {"dp", 1}, {"micro_batches", 8}, {"sequence_parallel", true}}, "megatron-2021"});
  for (const Case& k : cases) {
    SCOPED_TRACE(k.plan.dump() + " " + k.framework);
    const program::Program prog = lower_plan(m, k.plan, k.framework);
    // (FSDP's gathers run beside every compute of this plan and feed each: none can chain)
    if (prog.plan.tp > 1 && k.framework != "fsdp") {
      std::size_t members = 0;
      for (const Chains& ch : find_chains(prog, true)) members += ch.members;
      EXPECT_GT(members, 0u) << "no chain: the test would not test them";
    }
    for (NetworkModel network : {NetworkModel::kShared, NetworkModel::kContentionFree}) {
      SCOPED_TRACE("network " + std::to_string(static_cast<int>(network)));
      expect_same_step(prog, c, network, false);
    }
  }
  // every rank simulated (tp groups of several simulated members: no chains for them)
  const program::Program prog = lower_plan(m, {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"zero", {{"stage", 3}}}});
  expect_same_step(prog, c, NetworkModel::kShared, true);
}

// The overlap rule: in a simulation that charges NCCL beside compute, no compute that is a chain
// member runs while a data-parallel collective of its rank is in flight.
TEST(Chains, NoChainedComputeOverlapsADataParallelCollective) {
  const spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "dgx-a100-80g-hdr"));
  const program::Program prog = lower_plan(chain_blocks(8), {{"tp", 2}, {"pp", 2}, {"dp", 8}, {"micro_batches", 4},
                                                        {"zero", {{"stage", 2}, {"reduce_bucket", 1}, {"overlap_comm", true}}}});
  const std::vector<Chains> chains = find_chains(prog, true);
  SimOptions o;
  o.record_trace = true;
  const SimResult r = simulate(prog, c, o);
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> dp;   // rank -> collectives in flight
  for (const trace::Event& e : r.trace.events) {
    if ((e.lane == Lane::kDpGather || e.lane == Lane::kDpReduce) && program::is_collective(e.op)) dp[e.rank].emplace_back(e.start_ns, e.end_ns);
  }
  ASSERT_FALSE(dp.empty()) << "no data-parallel collective: the test would not test the rule";
  int64_t chained = 0, overlapped = 0;
  for (const trace::Event& e : r.trace.events) {
    if (e.lane != Lane::kCompute) continue;
    const program::RoleProgram& role = prog.role_of(e.rank);
    const auto k = static_cast<std::size_t>(e.instr - role.first_id);
    const auto which = static_cast<std::size_t>(&role - prog.roles.data());
    bool beside = false;
    for (const auto& [begin, end] : dp[e.rank]) beside |= begin < e.end_ns && e.start_ns < end;
    overlapped += beside;
    if (chains[which].of[k] < 0) continue;
    ++chained;
    EXPECT_FALSE(beside) << "rank " << e.rank << " instruction " << e.instr;
  }
  EXPECT_GT(chained, 0);
  EXPECT_GT(overlapped, 0) << "nothing overlaps: the test would not test the rule";
}

}  // namespace chains_test
}  // namespace stagecraft::sim
