// MpiCommunicator over 4 ranks, nccl-tests style: inputs exactly representable, so every
// collective's output is checked for exact equality — uneven all-gather and reduce-scatter
// (ZeRO buckets straddle shards), in-place all-reduce in float and double, the embedding group,
// point-to-point between pipeline stages, the control plane, hierarchical ZeRO's data-parallel
// subgroups and the typed (int8 / fp32) all-gather and all-to-all of ZeRO++'s quantized payloads.
#include <algorithm>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "executor/comm/mpi.hpp"
#include "executor/errors.hpp"

namespace stagecraft::executor {
namespace {

using program::Group;
using program::Lane;
using program::Placement;

TEST(MpiCommunicator, UnevenAllGatherAndReduceScatterAreExact) {
  MpiCommunicator comm(Placement{1, 1, 4});  // pure dp
  ASSERT_EQ(comm.size(), 4);
  const int64_t me = comm.group_rank(Group::kDp);
  const std::vector<int64_t> counts = {1, 0, 3, 2};
  std::vector<float> buffer(6, std::numeric_limits<float>::quiet_NaN());
  int64_t first = 0;
  for (int64_t i = 0; i < me; ++i) first += counts[static_cast<std::size_t>(i)];
  for (int64_t k = 0; k < counts[static_cast<std::size_t>(me)]; ++k) buffer[static_cast<std::size_t>(first + k)] = float(100 * me + k);
  Request r = comm.iall_gather({Group::kDp, Lane::kDpGather}, buffer, counts);
  comm.wait(r);
  const std::vector<float> gathered = {0, 200, 201, 202, 300, 301};
  EXPECT_EQ(buffer, gathered);

  std::vector<float> send(6), piece(static_cast<std::size_t>(counts[static_cast<std::size_t>(me)]));
  for (int k = 0; k < 6; ++k) send[static_cast<std::size_t>(k)] = float((me + 1) * (k + 1));
  Request rs = comm.ireduce_scatter({Group::kDp, Lane::kDpReduce}, send, piece, counts);
  while (!comm.test(rs)) {
  }
  for (int64_t k = 0; k < static_cast<int64_t>(piece.size()); ++k) EXPECT_EQ(piece[static_cast<std::size_t>(k)], float(10 * (first + k + 1)));

  std::vector<float> even(8, float(me)), even_piece(2);
  Request block = comm.ireduce_scatter({Group::kDp, Lane::kDpReduce}, even, even_piece, std::vector<int64_t>(4, 2));
  comm.wait(block);
  EXPECT_EQ(even_piece, std::vector<float>(2, 6.0f));
}

// Context parallelism (Placement::cp): 4 data-parallel ranks of which each 2 consecutive split a
// sequence, so the cp groups are {0, 1} and {2, 3}, on the cp lane's channel.
TEST(MpiCommunicator, ContextParallelGroupsAreTheConsecutivePairs) {
  Placement pl{1, 1, 4};
  pl.cp = 2;
  MpiCommunicator comm(pl);
  ASSERT_EQ(comm.group_size(Group::kCp), 2);
  const int64_t me = comm.rank();
  EXPECT_EQ(comm.group_rank(Group::kCp), me % 2);
  std::vector<float> kv(4, std::numeric_limits<float>::quiet_NaN());
  kv[static_cast<std::size_t>(2 * (me % 2))] = float(10 * me);
  kv[static_cast<std::size_t>(2 * (me % 2) + 1)] = float(10 * me + 1);
  Request r = comm.iall_gather({Group::kCp, Lane::kCp}, kv, std::vector<int64_t>(2, 2));
  comm.wait(r);
  const int64_t first = me - me % 2;   // the pair's first rank
  EXPECT_EQ(kv, (std::vector<float>{float(10 * first), float(10 * first + 1), float(10 * (first + 1)), float(10 * (first + 1) + 1)}));
  std::vector<float> dkv = {float(me + 1), float(me + 1), float(me + 1), float(me + 1)}, mine(2);
  Request rs = comm.ireduce_scatter({Group::kCp, Lane::kCp}, dkv, mine, std::vector<int64_t>(2, 2));
  comm.wait(rs);
  const float sum = float(first + 1) + float(first + 2);   // the pair's values summed
  EXPECT_EQ(mine, (std::vector<float>{sum, sum}));
}

TEST(MpiCommunicator, AllReduceOverGroupsIsExact) {
  MpiCommunicator comm(Placement{1, 2, 2});  // ranks 0,1 stage 0; 2,3 stage 1
  std::vector<float> f = {float(comm.rank()), 1.0f};
  Request a = comm.iall_reduce({Group::kDp, Lane::kDpReduce}, f);
  std::vector<double> d = {0.25 * double(comm.rank())};
  Request b = comm.iall_reduce({Group::kWorld, Lane::kDpReduce}, d);
  std::vector<float> e = {float(comm.rank() + 1)};
  Request c = comm.iall_reduce({Group::kEmbedding, Lane::kDpReduce}, e);
  comm.wait(a);
  comm.wait(b);
  comm.wait(c);
  const int64_t stage = comm.rank() / 2;
  EXPECT_EQ(f[0], float(stage == 0 ? 0 + 1 : 2 + 3));
  EXPECT_EQ(f[1], 2.0f);
  EXPECT_EQ(d[0], 0.25 * (0 + 1 + 2 + 3));
  // embedding group: (stage 0, dp d) with (stage 1, dp d): ranks {0, 2} and {1, 3}
  EXPECT_EQ(e[0], float(comm.rank() % 2 == 0 ? 1 + 3 : 2 + 4));
  EXPECT_EQ(comm.group_size(Group::kEmbedding), 2);
}

TEST(MpiCommunicator, PipelinePeersExchangeTaggedMessages) {
  MpiCommunicator comm(Placement{1, 4, 1});  // a pipeline of 4
  const int64_t me = comm.rank(), next = (me + 1) % 4, prev = (me + 3) % 4;
  std::vector<float> out1 = {float(me), 1}, out2 = {float(me), 2}, in1(2), in2(2);
  // receive in the opposite order of sending: tags keep them apart
  Request r2 = comm.irecv(in2, prev, 2), r1 = comm.irecv(in1, prev, 1);
  Request s1 = comm.isend(out1, next, 1), s2 = comm.isend(out2, next, 2);
  for (Request* r : {&s1, &s2, &r1, &r2}) comm.wait(*r);
  EXPECT_EQ(in1, (std::vector<float>{float(prev), 1}));
  EXPECT_EQ(in2, (std::vector<float>{float(prev), 2}));
}

TEST(MpiCommunicator, ControlPlane) {
  MpiCommunicator comm(Placement{1, 1, 4});
  EXPECT_EQ(comm.all_gather(comm.rank() * 10), (std::vector<int64_t>{0, 10, 20, 30}));
  EXPECT_EQ(comm.all_reduce_sum(1.5), 6.0);
  EXPECT_EQ(comm.all_reduce_max(double(comm.rank())), 3.0);
  const std::vector<std::string> blobs = comm.gather_to_root(std::string(static_cast<std::size_t>(comm.rank()), 'x'));
  if (comm.rank() == 0) {
    ASSERT_EQ(blobs.size(), 4u);
    EXPECT_EQ(blobs[3], "xxx");
  } else {
    EXPECT_TRUE(blobs.empty());
  }
  EXPECT_EQ(comm.broadcast_from_root(comm.rank() == 0 ? "plan" : ""), "plan");
}

// dp 4 in shard groups of 2 ({0,1}, {2,3}), one dp rank a node: each subgroup's members, in
// increasing world rank, by summing each member's 2^rank.
TEST(MpiCommunicator, DataParallelSubgroupsHaveThePlacementsMembers) {
  Placement pl{1, 1, 4};
  pl.inner = 2;
  pl.local = 1;
  MpiCommunicator comm(pl);
  const int64_t me = comm.rank();
  for (Group g : {Group::kDpShard, Group::kDpReplica, Group::kDpLocal, Group::kDpCross, Group::kDpShardCross}) {
    const std::vector<int64_t> members = pl.group_members(g, me);
    std::vector<float> bits = {float(1 << me)};
    for (Lane lane : {Lane::kDpGather, Lane::kDpReduce, Lane::kDpReplica}) {
      std::vector<float> v = bits;
      Request r = comm.iall_reduce({g, lane}, v);
      comm.wait(r);
      float want = 0;
      for (int64_t m : members) want += float(1 << m);
      EXPECT_EQ(v[0], want) << program::to_string(g) << " " << program::to_string(lane);
    }
    EXPECT_EQ(comm.group_size(g), static_cast<int64_t>(members.size())) << program::to_string(g);
    const auto pos = std::find(members.begin(), members.end(), me) - members.begin();
    EXPECT_EQ(comm.group_rank(g), pos) << program::to_string(g);
  }
  // kDpShard {0,1}/{2,3}; kDpReplica {0,2}/{1,3}; kDpLocal one rank; kDpCross every rank; kDpShardCross the shard group
  EXPECT_EQ(comm.group_size(Group::kDpShard), 2);
  EXPECT_EQ(comm.group_size(Group::kDpCross), 4);
}

// Typed collectives: an uneven int8 all-gather and fp32 all-gather in place, an uneven int8
// all-to-all (rank r sends r + 1 + i bytes of value 10r + i to member i) and a float one.
TEST(MpiCommunicator, TypedAllGatherAndAllToAllAreExact) {
  Placement pl{1, 1, 4};
  pl.local = 2;
  MpiCommunicator comm(pl);
  const int64_t me = comm.rank();
  const std::vector<int64_t> counts = {2, 0, 1, 3};
  std::vector<int8_t> bytes(6, -1);
  int64_t first = 0;
  for (int64_t i = 0; i < me; ++i) first += counts[static_cast<std::size_t>(i)];
  for (int64_t k = 0; k < counts[static_cast<std::size_t>(me)]; ++k) bytes[static_cast<std::size_t>(first + k)] = int8_t(10 * me + k);
  Request g = comm.iall_gather_typed({Group::kDp, Lane::kDpGather}, std::span<int8_t>(bytes), counts);
  std::vector<float> scales(4, -1.0f);
  scales[static_cast<std::size_t>(me)] = 0.5f * float(me);
  Request gs = comm.iall_gather_typed({Group::kDp, Lane::kDpReduce}, std::span<float>(scales), std::vector<int64_t>(4, 1));
  comm.wait(g);
  comm.wait(gs);
  EXPECT_EQ(bytes, (std::vector<int8_t>{0, 1, 20, 30, 31, 32}));
  EXPECT_EQ(scales, (std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f}));

  std::vector<int64_t> send_counts, recv_counts;
  std::vector<int8_t> send;
  for (int64_t i = 0; i < 4; ++i) {
    send_counts.push_back(me + 1 + i);
    recv_counts.push_back(i + 1 + me);  // member i sends i + 1 + me to me
    for (int64_t k = 0; k < me + 1 + i; ++k) send.push_back(int8_t(10 * me + i));
  }
  std::vector<int8_t> recv(static_cast<std::size_t>(4 * (me + 1) + 6), -1);
  Request a = comm.iall_to_all({Group::kDp, Lane::kDpReduce}, std::span<int8_t>(send), send_counts, std::span<int8_t>(recv),
                               recv_counts);
  comm.wait(a);
  std::vector<int8_t> want;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t k = 0; k < i + 1 + me; ++k) want.push_back(int8_t(10 * i + me));
  }
  EXPECT_EQ(recv, want);
  // over the node (kDpLocal: {0,1}, {2,3}): one float each way
  std::vector<float> out = {float(me), float(me) + 0.5f}, in(2, -1.0f);
  Request f = comm.iall_to_all({Group::kDpLocal, Lane::kDpReduce}, std::span<float>(out), std::vector<int64_t>{1, 1},
                               std::span<float>(in), std::vector<int64_t>{1, 1});
  comm.wait(f);
  const int64_t base = me - me % 2, pos = me % 2;
  EXPECT_EQ(in, (std::vector<float>{float(base) + 0.5f * float(pos), float(base + 1) + 0.5f * float(pos)}));
}

TEST(MpiCommunicator, RejectsAPlacementOfAnotherSize) {
  EXPECT_THROW(MpiCommunicator(Placement{1, 1, 2}), ExecutorError);
}

}  // namespace
}  // namespace stagecraft::executor
