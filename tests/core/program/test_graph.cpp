// RoleGraph: predecessor counts and successors, checked on a hand-built list and against the
// instruction list of a real lowering.
#include "core/program/graph.hpp"

#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "core/program/program.hpp"
#include "core/spec/bundled.hpp"

namespace stagecraft::program {
namespace {

TEST(RoleGraph, HandBuiltList) {
  // #0 compute, #1 tp after #0, #2 compute after #1, #3 tp after #2, #4 pp-send after #2.
  RoleProgram role;
  auto add = [&](Lane lane, std::vector<int32_t> deps) {
    Instr in;
    in.lane = lane;
    in.dep_begin = static_cast<int32_t>(role.deps.size());
    in.dep_count = static_cast<int16_t>(deps.size());
    role.deps.insert(role.deps.end(), deps.begin(), deps.end());
    role.instrs.push_back(in);
  };
  add(Lane::kCompute, {});
  add(Lane::kTp, {0});
  add(Lane::kCompute, {1});
  add(Lane::kTp, {2});
  add(Lane::kPpSend, {2});
  const RoleGraph g = build_graph(role);
  // preds = lane predecessor (1 unless first on its lane) + dependencies
  EXPECT_EQ(g.preds, (std::vector<int16_t>{0, 1, 1 + 1, 1 + 1, 1}));
  EXPECT_EQ(g.lane_next, (std::vector<int32_t>{2, 3, -1, -1, -1}));
  // dependents: #0 -> {1}, #1 -> {2}, #2 -> {3, 4}
  EXPECT_EQ(g.succ_begin, (std::vector<int32_t>{0, 1, 2, 4, 4, 4}));
  EXPECT_EQ(g.succ, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(g.lane_count[static_cast<int>(Lane::kCompute)], 2);
  EXPECT_EQ(g.lane_count[static_cast<int>(Lane::kTp)], 2);
  EXPECT_EQ(g.lane_count[static_cast<int>(Lane::kPpSend)], 1);
  EXPECT_TRUE(g.built_for(role.instrs.size(), role.deps.size()));
  // graph_of builds one for a list lower() did not
  RoleGraph scratch;
  EXPECT_EQ(&graph_of(role, scratch), &scratch);
  EXPECT_EQ(scratch.succ, g.succ);
}

TEST(RoleGraph, LowerBuildsItForEveryRole) {
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "gpt3-1.3b"));
  const spec::Plan p = spec::plan_from_json({{"tp", 2}, {"pp", 4}, {"dp", 2}, {"micro_batch", 1}, {"micro_batches", 8},
                                             {"schedule", "interleaved"}, {"virtual_stages", 2}},
                                            "test");
  const spec::Training t = spec::training_from_json({{"global_batch", 16}, {"dtype", "bf16"}}, "test");
  const Program prog = lower(m, t, p);
  for (const RoleProgram& role : prog.roles) {
    ASSERT_TRUE(role.graph.built_for(role.instrs.size(), role.deps.size()));
    RoleGraph scratch;
    EXPECT_EQ(&graph_of(role, scratch), &role.graph);  // the stored one is used
    // every dependency edge d -> k appears once among d's successors, and the counts add up
    std::size_t edges = 0;
    for (std::size_t k = 0; k < role.instrs.size(); ++k) {
      for (int32_t d : role.deps_of(role.instrs[k])) {
        const auto first = role.graph.succ.begin() + role.graph.succ_begin[static_cast<std::size_t>(d)];
        const auto last = role.graph.succ.begin() + role.graph.succ_begin[static_cast<std::size_t>(d) + 1];
        EXPECT_NE(std::find(first, last, static_cast<int32_t>(k)), last);
        ++edges;
      }
    }
    EXPECT_EQ(edges, role.graph.succ.size());
    int32_t lane_edges = 0, total = 0;
    for (int32_t next : role.graph.lane_next) lane_edges += next >= 0;
    for (int16_t p : role.graph.preds) total += p;
    EXPECT_EQ(total, lane_edges + static_cast<int32_t>(edges));
  }
}

}  // namespace
}  // namespace stagecraft::program
