// MpiCommunicator over 4 ranks, nccl-tests style: inputs exactly representable, so every
// collective's output is checked for exact equality — uneven all-gather and reduce-scatter
// (ZeRO buckets straddle shards), in-place all-reduce in float and double, the embedding group,
// point-to-point between pipeline stages, the control plane, hierarchical ZeRO's data-parallel
// subgroups, the typed (int8 / fp32) all-gather and all-to-all of ZeRO++'s quantized payloads, and
// the 16-bit wires (bf16, fp16): inputs chosen off the 16-bit grid, outputs derived by hand.
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

// ---- 16-bit wires ------------------------------------------------------------------------------
// bf16 keeps 8 significant bits: its spacing (ulp) is 2^-7 in [1, 2), 2^-6 in [2, 4), 2^-5 in [4, 8),
// 2^-4 in [8, 16); fp16 keeps 11: 2^-10, 2^-9, 2^-8, 2^-7 there. Rounding is to nearest, ties to
// the even significand.

float two_to(int e) { return std::ldexp(1.0f, e); }

// Each member's piece, 3 values off the bf16 grid, rounded by hand:
//   1 + 2^-10 (r + 1)         below 1 + 2^-8, the midpoint of 1 and 1 + 2^-7 (r = 3 is on it: a
//                             tie, to the even 1): rounds to 1
//   1 + 2^-8 + 2^-11 (r + 1)  between the midpoint and 1 + 2^-7: rounds to 1 + 2^-7
//   -(1 + 3 2^-8) 2^r         halfway between -(1 + 2^-7) 2^r (odd significand) and -(1 + 2^-6) 2^r
//                             (even): rounds to -(1 + 2^-6) 2^r
// After the gather every piece holds the rounded values, this rank's own included.
TEST(MpiCommunicator, AllGatherOverBf16HoldsEveryPieceRounded) {
  MpiCommunicator comm(Placement{1, 1, 4});
  const int64_t me = comm.group_rank(Group::kDp);
  auto value = [](int64_t r, int64_t k) {
    if (k == 0) return 1 + two_to(-10) * float(r + 1);
    if (k == 1) return 1 + two_to(-8) + two_to(-11) * float(r + 1);
    return -(1 + 3 * two_to(-8)) * two_to(static_cast<int>(r));
  };
  auto rounded = [](int64_t r, int64_t k) {
    if (k == 0) return 1.0f;
    if (k == 1) return 1 + two_to(-7);
    return -(1 + two_to(-6)) * two_to(static_cast<int>(r));
  };
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t k = 0; k < 3; ++k) {
      ASSERT_NE(value(r, k), rounded(r, k));  // off the grid: the wire changes them
      ASSERT_EQ(round_to(Format::kBf16, value(r, k)), rounded(r, k)) << r << " " << k;
    }
  }
  // even pieces (MPI_Iallgather) and uneven ones, one empty (MPI_Iallgatherv)
  for (const std::vector<int64_t>& counts : {std::vector<int64_t>{3, 3, 3, 3}, std::vector<int64_t>{3, 1, 0, 2}}) {
    int64_t total = 0, first = 0;
    for (int64_t i = 0; i < 4; ++i) {
      if (i < me) first += counts[static_cast<std::size_t>(i)];
      total += counts[static_cast<std::size_t>(i)];
    }
    std::vector<float> buffer(static_cast<std::size_t>(total), std::numeric_limits<float>::quiet_NaN());
    for (int64_t k = 0; k < counts[static_cast<std::size_t>(me)]; ++k) buffer[static_cast<std::size_t>(first + k)] = value(me, k);
    Request r = comm.iall_gather({Group::kDp, Lane::kDpGather}, buffer, counts, Format::kBf16);
    comm.wait(r);
    std::vector<float> want;
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t k = 0; k < counts[static_cast<std::size_t>(i)]; ++k) want.push_back(rounded(i, k));
    }
    EXPECT_EQ(buffer, want) << "rank " << me;
  }
}

// Sums over a 16-bit wire, member by member (r = 0..3), in a format of spacing `ulp` in [1, 2) (bf16
// 2^-7, fp16 2^-10; its unit roundoff u = ulp / 2), the members' values and the result derived by hand:
//   kWireCancels     r < 3: 1 + (3/8) ulp, below the midpoint of 1 and 1 + ulp: sent as 1; r = 3: -2.
//                    Every partial sum is an integer in [-2, 3]: the result is 1 in any order, where
//                    the exact sum rounded once would be 1 + (9/8) ulp -> 1 + ulp. What is added is
//                    the members' rounded values.
//   kWireRoundsLast  r = 0: 2; r > 0: 2 + 4 ulp (bf16 2 + 2^-5, fp16 2 + 2^-8: on the grid). A sum of 2
//                    or 3 members is 4 or 6 plus a multiple of 4 ulp, on the grid of [4, 8) (spacing 4
//                    ulp); the total, 8 + 12 ulp, lies halfway between 8 + 8 ulp (odd significand in
//                    [8, 16), spacing 8 ulp) and 8 + 16 ulp (even): the result is 8 + 16 ulp (bf16
//                    8.125, fp16 8 + 2^-6) in any order, not the exact 8 + 12 ulp. The last partial
//                    sum is rounded.
//   kWireBounded     1 + (2r + 1) ulp, on the grid; a sum of 3 members falls between grid points, so
//                    the result depends on the library's order of additions: within (members - 1) u
//                    max|partial sum| (< 4.5) of the exact 4 + 16 ulp, and on the grid.
enum WireSum { kWireCancels, kWireRoundsLast, kWireBounded };
float wire_sum_input(WireSum p, int64_t r, float ulp) {
  switch (p) {
    case kWireCancels: return r < 3 ? 1 + 0.375f * ulp : -2.0f;
    case kWireRoundsLast: return r == 0 ? 2.0f : 2 + 4 * ulp;
    case kWireBounded: return 1 + float(2 * r + 1) * ulp;
  }
  return 0;
}
void expect_wire_sum(Format f, WireSum p, float got, float ulp, const std::string& where) {
  EXPECT_EQ(round_to(f, got), got) << where << ": " << got << " is not a " << to_string(f) << " value";
  switch (p) {
    case kWireCancels:
      EXPECT_EQ(got, 1.0f) << where;
      EXPECT_EQ(round_to(f, 3 * (1 + 0.375f * ulp) - 2), 1 + ulp) << where;  // what one rounding would give
      break;
    case kWireRoundsLast:
      EXPECT_EQ(got, 8 + 16 * ulp) << where;
      break;
    case kWireBounded: {
      const float exact = 4 + 16 * ulp, u = ulp / 2;
      EXPECT_LE(std::fabs(got - exact), 3 * u * 4.5f) << where << ": " << got;
      break;
    }
  }
}

TEST(MpiCommunicator, AllReduceOverBf16RoundsInputsAndPartialSums) {
  MpiCommunicator comm(Placement{1, 1, 4});
  const int64_t me = comm.group_rank(Group::kDp);
  const float ulp = two_to(-7);
  // kWireRoundsLast's total, 8 + 12 ulp = 8 + 3 2^-5, lies halfway between 8 + 2^-4 and 8 + 2^-3 (even)
  ASSERT_EQ(round_to(Format::kBf16, 8 + 12 * ulp), 8 + 16 * ulp);
  const std::vector<WireSum> sums = {kWireCancels, kWireRoundsLast, kWireBounded,
                                     kWireBounded, kWireRoundsLast, kWireCancels};
  std::vector<float> buffer;
  for (WireSum p : sums) buffer.push_back(wire_sum_input(p, me, ulp));
  Request r = comm.iall_reduce({Group::kDp, Lane::kDpReduce}, buffer, Format::kBf16);
  comm.wait(r);
  for (std::size_t i = 0; i < sums.size(); ++i) {
    expect_wire_sum(Format::kBf16, sums[i], buffer[i], ulp, "rank " + std::to_string(me) + " element " + std::to_string(i));
  }
}

// The same sums in fp16, reduce-scattered: uneven pieces (MPI_Ireduce_scatter, one empty) and even
// ones (MPI_Ireduce_scatter_block); element i sums as WireSum i mod 3.
TEST(MpiCommunicator, ReduceScatterOverFp16RoundsInputsAndPartialSums) {
  MpiCommunicator comm(Placement{1, 1, 4});
  const int64_t me = comm.group_rank(Group::kDp);
  const float ulp = two_to(-10);
  ASSERT_EQ(round_to(Format::kFp16, 8 + 12 * ulp), 8 + 16 * ulp);
  for (const std::vector<int64_t>& counts : {std::vector<int64_t>{2, 1, 0, 3}, std::vector<int64_t>{3, 3, 3, 3}}) {
    int64_t total = 0, first = 0;
    for (int64_t i = 0; i < 4; ++i) {
      if (i < me) first += counts[static_cast<std::size_t>(i)];
      total += counts[static_cast<std::size_t>(i)];
    }
    std::vector<float> send;
    for (int64_t i = 0; i < total; ++i) send.push_back(wire_sum_input(static_cast<WireSum>(i % 3), me, ulp));
    const std::vector<float> sent = send;
    std::vector<float> piece(static_cast<std::size_t>(counts[static_cast<std::size_t>(me)]), std::numeric_limits<float>::quiet_NaN());
    Request r = comm.ireduce_scatter({Group::kDp, Lane::kDpReduce}, send, piece, counts, Format::kFp16);
    comm.wait(r);
    EXPECT_EQ(send, sent);  // the input is read, not rounded in place
    for (int64_t k = 0; k < static_cast<int64_t>(piece.size()); ++k) {
      expect_wire_sum(Format::kFp16, static_cast<WireSum>((first + k) % 3), piece[static_cast<std::size_t>(k)], ulp,
                 "rank " + std::to_string(me) + " element " + std::to_string(first + k) + " of " + std::to_string(total));
    }
  }
}

// Messages over 16-bit wires between pipeline neighbours: the receiver holds round_to(wire, x) (the
// bf16 values as in the all-gather above; fp16 at its own grid: 1 + 2^-12 rounds to 1, 1 + 3 2^-11
// to 1 + 2^-9, 70000 overflows fp16's largest finite value, 65504, to infinity). The sender's
// buffer is left as it was.
TEST(MpiCommunicator, MessagesOverSixteenBitWiresArriveRounded) {
  MpiCommunicator comm(Placement{1, 4, 1});
  const int64_t me = comm.rank(), next = (me + 1) % 4, prev = (me + 3) % 4;
  auto bf16_out = [](int64_t r) {
    return std::vector<float>{1 + two_to(-10) * float(r + 1), 1 + two_to(-8) + two_to(-11) * float(r + 1),
                              -(1 + 3 * two_to(-8)) * two_to(static_cast<int>(r))};
  };
  auto fp16_out = [](int64_t r) { return std::vector<float>{1 + two_to(-12), 1 + 3 * two_to(-11), 70000.0f * float(r + 1)}; };
  const std::vector<float> out_b = bf16_out(me), out_h = fp16_out(me);
  std::vector<float> send_b = out_b, send_h = out_h, in_b(3, -1.0f), in_h(3, -1.0f);
  // received in the opposite order of sending: tags keep them apart
  Request rh = comm.irecv(in_h, prev, 2, Format::kFp16), rb = comm.irecv(in_b, prev, 1, Format::kBf16);
  Request sb = comm.isend(send_b, next, 1, Format::kBf16), sh = comm.isend(send_h, next, 2, Format::kFp16);
  for (Request* r : {&sb, &sh, &rb, &rh}) comm.wait(*r);
  EXPECT_EQ(in_b, (std::vector<float>{1.0f, 1 + two_to(-7), -(1 + two_to(-6)) * two_to(static_cast<int>(prev))}));
  EXPECT_EQ(in_h, (std::vector<float>{1.0f, 1 + two_to(-9), std::numeric_limits<float>::infinity()}));
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(in_b[k], round_to(Format::kBf16, bf16_out(prev)[k]));
    EXPECT_EQ(in_h[k], round_to(Format::kFp16, fp16_out(prev)[k]));
  }
  EXPECT_EQ(send_b, out_b);
  EXPECT_EQ(send_h, out_h);
}

TEST(MpiCommunicator, RejectsAPlacementOfAnotherSize) {
  EXPECT_THROW(MpiCommunicator(Placement{1, 1, 2}), ExecutorError);
}

}  // namespace
}  // namespace stagecraft::executor
