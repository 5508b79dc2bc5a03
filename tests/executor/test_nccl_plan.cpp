// The NCCL transport's rules on CPU: which communicators a rank joins (comm/channels.hpp), the
// two-member point-to-point communicators' split rounds, the device a rank drives, and the NCCL
// calls of each operation (comm/nccl_plan.hpp) run on every member through an emulation of NCCL's
// semantics (nccl.h: ncclAllGather, ncclReduceScatter, ncclAllReduce, ncclBroadcast, ncclReduce,
// ncclSend/ncclRecv), against what the operation must leave: MpiCommunicator's results.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/comm/channels.hpp"
#include "executor/comm/nccl_plan.hpp"
#include "executor/errors.hpp"
#include "runner/plans.hpp"

namespace stagecraft::executor {
namespace {

using program::Group;
using program::Placement;

// ---- channels -------------------------------------------------------------------------------------

// Every group's colour classes are Placement::group_members, members in increasing world rank.
TEST(Channels, GroupSplitsAreThePlacementsGroups) {
  for (Placement pl : {Placement{2, 2, 2}, Placement{1, 4, 2}, Placement{2, 1, 4}}) {
    std::map<std::pair<Group, int64_t>, std::vector<int64_t>> classes;
    for (int64_t r = 0; r < pl.world(); ++r) {
      const std::vector<GroupSplit> splits = group_splits(pl, r);
      ASSERT_EQ(splits.size(), 4u);  // tp, dp, embedding, world; in one order on every rank
      for (const GroupSplit& g : splits) {
        if (g.color >= 0) classes[{g.group, g.color}].push_back(r);
      }
    }
    for (const auto& [key, members] : classes) {
      EXPECT_EQ(members, pl.group_members(key.first, members.front())) << program::to_string(key.first);
    }
    // the embedding group: stages 0 and p-1 of one (dp, tp) position
    for (int64_t r = 0; r < pl.world(); ++r) {
      const bool end_stage = pl.stage_of(r) == 0 || pl.stage_of(r) == pl.pp - 1;
      EXPECT_EQ(group_splits(pl, r)[2].color >= 0, end_stage);
    }
  }
}

// The stage edges a Program's sends use: 1F1B's chain down (activations) and up (gradients); the
// interleaved schedule's wrap besides (the last stage's chunk feeds the first stage's next chunk).
TEST(Channels, PipelineEdgesAreTheProgramsSends) {
  const spec::Model model = test::tiny_model();  // 4 layers: pp 4 for 1F1B, pp 2 with 2 virtual stages
  const auto edges = [&](int pp, const char* schedule, int v) {
    test::PlanSpec s;
    s.pp = pp, s.micro_batches = 8, s.schedule = schedule, s.virtual_stages = v;
    return pipeline_edges(program::lower(model, test::tiny_training(), test::make_plan(s)));
  };
  const auto chain = [](int64_t p, bool wrap) {
    std::vector<StageEdge> out;
    for (int64_t s = 0; s + 1 < p; ++s) {
      out.push_back({s, s + 1, P2pClass::kActivation});
      out.push_back({s + 1, s, P2pClass::kGrad});
    }
    if (wrap) {
      out.push_back({p - 1, 0, P2pClass::kActivation});
      out.push_back({0, p - 1, P2pClass::kGrad});
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(edges(4, "1f1b", 1), chain(4, false));
  EXPECT_EQ(edges(2, "interleaved", 2), chain(2, true));
}

// Every edge of every pipeline exactly once; in a round a rank is in at most one edge.
TEST(Channels, PointToPointRoundsMakeEveryEdgeOnce) {
  const Placement pl{1, 4, 2};  // two pipelines of 4 stages
  std::vector<StageEdge> edges;
  for (int64_t s = 0; s + 1 < 4; ++s) {
    edges.push_back({s, s + 1, P2pClass::kActivation});
    edges.push_back({s + 1, s, P2pClass::kGrad});
  }
  edges.push_back({3, 0, P2pClass::kActivation});
  edges.push_back({0, 3, P2pClass::kGrad});
  std::sort(edges.begin(), edges.end());
  const std::vector<P2pRound> rounds = p2p_rounds(pl, edges);
  std::set<std::tuple<int64_t, int64_t, int>> seen;
  for (const P2pRound& round : rounds) {
    for (std::size_t c = 0; c < round.edges.size(); ++c) {
      const P2pEdge& e = round.edges[c];
      EXPECT_EQ(round.color[static_cast<std::size_t>(e.sender)], static_cast<int64_t>(c));
      EXPECT_EQ(round.color[static_cast<std::size_t>(e.receiver)], static_cast<int64_t>(c));
      EXPECT_TRUE(seen.insert({e.sender, e.receiver, static_cast<int>(e.cls)}).second);
    }
    int64_t members = 0;
    for (int64_t c : round.color) members += c >= 0;
    EXPECT_EQ(members, 2 * static_cast<int64_t>(round.edges.size()));  // disjoint pairs
  }
  EXPECT_EQ(seen.size(), 2 * edges.size());  // each stage edge in both pipelines
  for (int64_t d = 0; d < 2; ++d) {
    for (const StageEdge& e : edges) EXPECT_TRUE(seen.count({pl.rank(e.from, d, 0), pl.rank(e.to, d, 0), static_cast<int>(e.cls)}));
  }
  // a ring of 4 stages in each direction and class: a stage is in 4 edges, so at least 4 rounds
  EXPECT_GE(rounds.size(), 4u);
  EXPECT_TRUE(p2p_rounds(Placement{2, 1, 4}, {}).empty());  // no pipeline
}

TEST(Channels, LocalRankComesFromTheLauncherElseTheHost) {
  const std::vector<uint64_t> hosts = {7, 7, 9, 7, 9};  // ranks 0, 1, 3 on one host, 2 and 4 on another
  std::map<std::string, std::string> env;
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(local_rank(hosts, 3, lookup).index, 2);  // ranks 0 and 1 share its host
  EXPECT_EQ(local_rank(hosts, 4, lookup).index, 1);
  EXPECT_EQ(local_rank(hosts, 4, lookup).source, "host hash");
  env["SLURM_LOCALID"] = "5";
  EXPECT_EQ(local_rank(hosts, 4, lookup).index, 5);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "3";  // Open MPI's first
  EXPECT_EQ(local_rank(hosts, 4, lookup).source, "OMPI_COMM_WORLD_LOCAL_RANK");
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "x1";
  EXPECT_THROW(local_rank(hosts, 4, lookup), CommError);
}

// ---- NCCL's calls, emulated -------------------------------------------------------------------------

// Each member's input and output buffers; a plan per member, run in NCCL's matching order: the
// k-th collective call of every member together (they must agree on call, root and count), sends
// matched to receives in order per (sender, receiver).
struct Member {
  std::vector<double> in, out;
  NcclPlan plan;
};

void emulate(std::vector<Member>& m) {
  const std::size_t n = m.size();
  std::vector<std::vector<NcclStep>> collectives(n), sends(n), recvs(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (const NcclStep& s : m[i].plan.steps) {
      (s.call == NcclCall::kSend ? sends : s.call == NcclCall::kRecv ? recvs : collectives)[i].push_back(s);
    }
  }
  for (std::size_t i = 1; i < n; ++i) ASSERT_EQ(collectives[i].size(), collectives[0].size());
  std::vector<Member> before = m;  // a group's calls read what the members held before it
  for (std::size_t k = 0; k < collectives[0].size(); ++k) {
    const NcclStep& s0 = collectives[0][k];
    for (std::size_t i = 1; i < n; ++i) {
      ASSERT_EQ(collectives[i][k].call, s0.call);
      ASSERT_EQ(collectives[i][k].count, s0.count);
      ASSERT_EQ(collectives[i][k].peer, s0.peer);
    }
    const int64_t c = s0.count;
    for (std::size_t i = 0; i < n; ++i) {
      const NcclStep& s = collectives[i][k];
      for (int64_t j = 0; j < c; ++j) {
        switch (s.call) {
          case NcclCall::kAllGather:  // in place: member r's piece from its buffer at r·c
            for (std::size_t r = 0; r < n; ++r) m[i].out[r * c + j] = before[r].out[collectives[r][k].send + j];
            break;
          case NcclCall::kBroadcast:
            m[i].out[s.recv + j] = before[s.peer].out[collectives[s.peer][k].send + j];
            break;
          case NcclCall::kReduceScatter: {
            double sum = 0;
            for (std::size_t r = 0; r < n; ++r) sum += before[r].in[collectives[r][k].send + i * c + j];
            m[i].out[s.recv + j] = sum;
            break;
          }
          case NcclCall::kReduce: {
            if (static_cast<int64_t>(i) != s.peer) break;
            double sum = 0;
            for (std::size_t r = 0; r < n; ++r) sum += before[r].in[collectives[r][k].send + j];
            m[i].out[s.recv + j] = sum;
            break;
          }
          case NcclCall::kAllReduce: {
            double sum = 0;
            for (std::size_t r = 0; r < n; ++r) sum += before[r].out[s.send + j];
            m[i].out[s.recv + j] = sum;
            break;
          }
          default: break;
        }
      }
    }
  }
  // point to point: the q-th send from a to b meets the q-th receive at b from a, counts equal
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) {
      std::vector<NcclStep> out, in;
      for (const NcclStep& s : sends[a]) {
        if (s.peer == static_cast<int64_t>(b)) out.push_back(s);
      }
      for (const NcclStep& s : recvs[b]) {
        if (s.peer == static_cast<int64_t>(a)) in.push_back(s);
      }
      ASSERT_EQ(out.size(), in.size());
      for (std::size_t q = 0; q < out.size(); ++q) {
        ASSERT_EQ(out[q].count, in[q].count);
        for (int64_t j = 0; j < out[q].count; ++j) m[b].out[in[q].recv + j] = before[a].in[out[q].send + j];
      }
    }
  }
}

std::vector<std::vector<int64_t>> count_cases() {
  return {{3, 3, 3, 3}, {4, 3, 3, 2}, {0, 5, 0, 1}, {2, 2}, {1, 0}, {6}};
}

TEST(NcclPlan, AllGatherInPlaceEqualAndUneven) {
  for (const std::vector<int64_t>& counts : count_cases()) {
    const int64_t n = static_cast<int64_t>(counts.size()), total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    std::vector<Member> m(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      Member& me = m[static_cast<std::size_t>(i)];
      me.out.assign(static_cast<std::size_t>(total), -1);  // only its own piece in place
      const int64_t at = std::accumulate(counts.begin(), counts.begin() + i, int64_t{0});
      for (int64_t j = 0; j < counts[static_cast<std::size_t>(i)]; ++j) me.out[static_cast<std::size_t>(at + j)] = 100 * i + j;
      me.plan = plan_all_gather(counts, i);
    }
    const bool equal = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    EXPECT_EQ(m[0].plan.grouped, !equal);
    emulate(m);
    for (int64_t i = 0; i < n; ++i) {
      int64_t at = 0;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t j = 0; j < counts[static_cast<std::size_t>(r)]; ++j) {
          EXPECT_EQ(m[static_cast<std::size_t>(i)].out[static_cast<std::size_t>(at + j)], 100 * r + j) << "member " << i;
        }
        at += counts[static_cast<std::size_t>(r)];
      }
    }
  }
}

TEST(NcclPlan, ReduceScatterEqualAndUneven) {
  for (const std::vector<int64_t>& counts : count_cases()) {
    const int64_t n = static_cast<int64_t>(counts.size()), total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    std::vector<Member> m(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      Member& me = m[static_cast<std::size_t>(i)];
      me.in.resize(static_cast<std::size_t>(total));
      for (int64_t j = 0; j < total; ++j) me.in[static_cast<std::size_t>(j)] = (i + 1) * 1000 + j;
      me.out.assign(static_cast<std::size_t>(counts[static_cast<std::size_t>(i)]), -1);
      me.plan = plan_reduce_scatter(counts);
    }
    emulate(m);
    // member i's piece j: sum over members r of (r + 1)·1000 + (its offset + j) = 1000·n(n+1)/2 + n·(offset + j)
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < counts[static_cast<std::size_t>(i)]; ++j) {
        EXPECT_EQ(m[static_cast<std::size_t>(i)].out[static_cast<std::size_t>(j)], 1000.0 * n * (n + 1) / 2 + n * (at + j));
      }
      at += counts[static_cast<std::size_t>(i)];
    }
  }
}

TEST(NcclPlan, AllToAllPairsEverySendWithItsReceive) {
  // member i sends (i + j + 1) elements to member j, valued 100·i + j
  const int64_t n = 3;
  std::vector<Member> m(n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> send(n), recv(n);
    for (int64_t j = 0; j < n; ++j) send[j] = i + j + 1, recv[j] = j + i + 1;
    Member& me = m[static_cast<std::size_t>(i)];
    for (int64_t j = 0; j < n; ++j) me.in.insert(me.in.end(), static_cast<std::size_t>(send[j]), 100.0 * i + j);
    me.out.assign(me.in.size(), -1);
    me.plan = plan_all_to_all(send, recv);
    EXPECT_TRUE(me.plan.grouped);
  }
  emulate(m);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> want;
    for (int64_t j = 0; j < n; ++j) want.insert(want.end(), static_cast<std::size_t>(j + i + 1), 100.0 * j + i);
    EXPECT_EQ(m[static_cast<std::size_t>(i)].out, want);
  }
}

TEST(NcclPlan, DatatypesAreNcclsEnum) {
  // nccl.h (2.x): ncclInt8 = 0, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
  EXPECT_EQ(static_cast<int>(nccl_type(Format::kFp32)), 7);
  EXPECT_EQ(static_cast<int>(nccl_type(Format::kBf16)), 9);
  EXPECT_EQ(static_cast<int>(nccl_type(Format::kFp16)), 6);
  EXPECT_EQ(static_cast<int>(nccl_type(ElemType::kInt8)), 0);
  EXPECT_EQ(plan_all_reduce(0).steps.size(), 0u);
  EXPECT_EQ(plan_all_reduce(5).steps, (std::vector<NcclStep>{{NcclCall::kAllReduce, 0, 0, 5, -1}}));
}

}  // namespace
}  // namespace stagecraft::executor
