// FlowNetwork: finish times of flows sharing links, with latency, caps and re-solving, derived by
// hand. Times are integer ns rounded up, so a hand value v (in ns, possibly fractional) must come
// out as ⌈v⌉, or at most one ns later per rate change the flow went through.
#include "sim/network/flows.hpp"
#include "sim/network/max_min.hpp"

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace stagecraft::sim {
namespace {

// Never early; late by at most one ns per rate change.
void expect_finish(int64_t actual_ns, double expected_ns, int rate_changes) {
  EXPECT_GE(actual_ns, static_cast<int64_t>(std::ceil(expected_ns - 1e-6)));
  EXPECT_LE(actual_ns, static_cast<int64_t>(std::ceil(expected_ns)) + rate_changes);
}

// Runs the network until it is empty; returns the completions in order.
std::vector<FlowCompletion> run_all(FlowNetwork& net) {
  std::vector<FlowCompletion> done;
  while (net.flow_count() > 0) {
    const auto& batch = net.advance_to(net.next_event_time_ns());
    done.insert(done.end(), batch.begin(), batch.end());
  }
  return done;
}

int64_t finish_of(const std::vector<FlowCompletion>& done, FlowId id) {
  for (const FlowCompletion& c : done) {
    if (c.id == id) return c.time_ns;
  }
  ADD_FAILURE() << "flow " << id << " never finished";
  return -1;
}

const LinkId kA = 0, kB = 1;

TEST(FlowNetwork, OneFlowAloneTakesLatencyPlusBytesOverBandwidth) {
  const double C = 1e9;  // bytes/s
  const int64_t bytes = 1'000'000, latency_ns = 700;
  FlowNetwork net({C, 4 * C});
  const FlowId f = net.start_flow(std::vector<LinkId>{kA, kB}, bytes, latency_ns);
  EXPECT_EQ(net.state(f), FlowState::kPending);
  EXPECT_EQ(net.next_event_time_ns(), latency_ns);  // activation
  const std::vector<FlowCompletion> done = run_all(net);
  ASSERT_EQ(done.size(), 1u);
  // The narrowest link (C) limits it: latency + bytes / C.
  EXPECT_EQ(done[0].time_ns, latency_ns + static_cast<int64_t>(static_cast<double>(bytes) / C * 1e9));
  EXPECT_EQ(net.state(f), FlowState::kFinished);
  EXPECT_EQ(net.next_event_time_ns(), kNeverNs);
}

TEST(FlowNetwork, TwoEqualFlowsOnOneLinkFinishTogether) {
  // Each gets C/2, so each takes bytes / (C/2).
  const double C = 1e9;
  const int64_t bytes = 1'000'000;
  FlowNetwork net({C});
  const FlowId a = net.start_flow(std::vector<LinkId>{kA}, bytes, 0);
  const FlowId b = net.start_flow(std::vector<LinkId>{kA}, bytes, 0);
  EXPECT_DOUBLE_EQ(net.rate_Bps(a), C / 2);
  const std::vector<FlowCompletion> done = run_all(net);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].id, a);  // a tie is reported by id
  EXPECT_EQ(done[1].id, b);
  expect_finish(done[0].time_ns, bytes / (C / 2) * 1e9, 0);
  EXPECT_EQ(done[0].time_ns, done[1].time_ns);
}

TEST(FlowNetwork, ShortFlowLeavesAndTheLongOneSpeedsUp) {
  // Link C; a has B bytes, b has 3B. Both at C/2 until a finishes at t1 = B/(C/2) = 2B/C; b has
  // moved B and has 2B left, now alone at C: + 2B/C. So b ends at 4B/C (the link never idles).
  const double C = 1e9;
  const int64_t B = 1'000'000;
  FlowNetwork net({C});
  const FlowId a = net.start_flow(std::vector<LinkId>{kA}, B, 0);
  const FlowId b = net.start_flow(std::vector<LinkId>{kA}, 3 * B, 0);
  const std::vector<FlowCompletion> done = run_all(net);
  expect_finish(finish_of(done, a), 2.0 * B / C * 1e9, 0);
  expect_finish(finish_of(done, b), 4.0 * B / C * 1e9, 1);
}

TEST(FlowNetwork, LatencyDelaysTheStartOfTheBytes) {
  // Link C; a (B bytes) starts now, b (B bytes) after latency L < B/C.
  //   [0, L):  a alone at C, moves C·L.
  //   [L, ..): both at C/2; a has B − C·L left -> ends at L + 2(B − C·L)/C = 2B/C − L.
  //            b has moved (C/2)·(2B/C − 2L) = B − C·L, so C·L left, alone at C: ends at 2B/C.
  const double C = 1e9;
  const int64_t B = 1'000'000, L_ns = 200'000;
  const double L_s = static_cast<double>(L_ns) / 1e9;
  FlowNetwork net({C});
  const FlowId a = net.start_flow(std::vector<LinkId>{kA}, B, 0);
  const FlowId b = net.start_flow(std::vector<LinkId>{kA}, B, L_ns);
  EXPECT_DOUBLE_EQ(net.rate_Bps(a), C);
  EXPECT_DOUBLE_EQ(net.rate_Bps(b), 0.0);  // pending
  EXPECT_EQ(net.finish_time_ns(b), kNeverNs);
  EXPECT_EQ(net.next_event_time_ns(), L_ns);
  EXPECT_TRUE(net.advance_to(L_ns).empty());
  EXPECT_EQ(net.state(b), FlowState::kActive);
  EXPECT_DOUBLE_EQ(net.remaining_bytes(a), B - C * L_s);
  EXPECT_DOUBLE_EQ(net.rate_Bps(a), C / 2);
  const std::vector<FlowCompletion> done = run_all(net);
  expect_finish(finish_of(done, a), (2.0 * B / C - L_s) * 1e9, 1);
  expect_finish(finish_of(done, b), 2.0 * B / C * 1e9, 1);
}

TEST(FlowNetwork, ClassicThreeFlowsFinishTimes) {
  // Links A (10) and B (4): f0 on A, f1 on A+B, f2 on B, each 8e6 bytes (rates in GB/s, bytes in
  // MB, times in ms). Max-min: r0 = 8, r1 = r2 = 2 (see test_max_min).
  //   f0 ends at 8/8 = 1 ms. Then A carries f1 only, B carries f1 and f2: still 2 each (B is
  //   their bottleneck), and both have 8 − 2 = 6 MB left -> + 6/2 = 3 ms: end at 4 ms.
  const double C_A = 10e9, C_B = 4e9;
  const int64_t bytes = 8'000'000;
  FlowNetwork net({C_A, C_B});
  const FlowId f0 = net.start_flow(std::vector<LinkId>{kA}, bytes, 0);
  const FlowId f1 = net.start_flow(std::vector<LinkId>{kA, kB}, bytes, 0);
  const FlowId f2 = net.start_flow(std::vector<LinkId>{kB}, bytes, 0);
  const double r0 = C_A - C_B / 2, r12 = C_B / 2;
  const std::vector<FlowCompletion> done = run_all(net);
  const double t0 = bytes / r0;
  expect_finish(finish_of(done, f0), t0 * 1e9, 0);
  expect_finish(finish_of(done, f1), (t0 + (bytes - r12 * t0) / r12) * 1e9, 0);
  EXPECT_EQ(finish_of(done, f1), finish_of(done, f2));
}

TEST(FlowNetwork, RateCappedFlow) {
  // Link C = 10, a capped at 2, b uncapped, equal bytes: a at 2, b at 8. b ends at bytes/8,
  // then a (still capped) continues at 2: ends at bytes/2.
  const double C = 10e9, cap = 2e9;
  const int64_t bytes = 4'000'000;
  FlowNetwork net({C});
  const FlowId a = net.start_flow(std::vector<LinkId>{kA}, bytes, 0, cap);
  const FlowId b = net.start_flow(std::vector<LinkId>{kA}, bytes, 0);
  EXPECT_DOUBLE_EQ(net.rate_Bps(a), cap);
  EXPECT_DOUBLE_EQ(net.rate_Bps(b), C - cap);
  const std::vector<FlowCompletion> done = run_all(net);
  expect_finish(finish_of(done, b), bytes / (C - cap) * 1e9, 0);
  expect_finish(finish_of(done, a), bytes / cap * 1e9, 0);
}

TEST(FlowNetwork, ZeroBytesAndLinklessFlowsFinishWhenTheyActivate) {
  FlowNetwork net({1e9});
  const FlowId empty = net.start_flow(std::vector<LinkId>{kA}, 0, 300);
  const FlowId local = net.start_flow(std::vector<LinkId>{}, 1'000'000, 300);  // same-GPU copy
  const std::vector<FlowCompletion> done = run_all(net);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(finish_of(done, empty), 300);
  EXPECT_EQ(finish_of(done, local), 300);
}

TEST(FlowNetwork, AdvanceToAFarTimeProcessesEveryEventInOrder) {
  // Three flows of B, 2B, 3B on one link C: rates C/3 each until the first ends at 3B/C, then C/2
  // (B left each): 2B/C more -> 5B/C, then C alone (B left): B/C more -> 6B/C.
  const double C = 1e9;
  const int64_t B = 1'000'000;
  FlowNetwork net({C});
  const FlowId a = net.start_flow(std::vector<LinkId>{kA}, B, 0);
  const FlowId b = net.start_flow(std::vector<LinkId>{kA}, 2 * B, 0);
  const FlowId c = net.start_flow(std::vector<LinkId>{kA}, 3 * B, 0);
  const int64_t far_ns = 1'000'000'000;
  const std::vector<FlowCompletion> done = net.advance_to(far_ns);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[0].id, a);
  EXPECT_EQ(done[1].id, b);
  EXPECT_EQ(done[2].id, c);
  expect_finish(done[0].time_ns, 3.0 * B / C * 1e9, 0);
  expect_finish(done[1].time_ns, 5.0 * B / C * 1e9, 1);
  expect_finish(done[2].time_ns, 6.0 * B / C * 1e9, 2);
  EXPECT_EQ(net.now_ns(), far_ns);
  EXPECT_EQ(net.flow_count(), 0u);
}

TEST(FlowNetwork, FlowStartedLaterSeesTheCurrentTime) {
  // a alone for 1 ms at C moves C·1ms; then b starts (latency 0) and both share.
  const double C = 1e9;
  const int64_t B = 2'000'000, t1 = 1'000'000;
  FlowNetwork net({C});
  const FlowId a = net.start_flow(std::vector<LinkId>{kA}, B, 0);
  EXPECT_TRUE(net.advance_to(t1).empty());
  const FlowId b = net.start_flow(std::vector<LinkId>{kA}, B, 0);
  EXPECT_DOUBLE_EQ(net.rate_Bps(b), C / 2);
  // a: B − C·t1 left at C/2 -> t1 + 2(B − C·t1)/C.
  const double t1_s = static_cast<double>(t1) / 1e9;
  const double a_end_s = t1_s + 2 * (B - C * t1_s) / C;
  expect_finish(net.finish_time_ns(a), a_end_s * 1e9, 1);
  const std::vector<FlowCompletion> done = run_all(net);
  // b: moved (C/2)(a_end − t1) by then, rest alone at C. Total work conserved: ends at 2B/C.
  expect_finish(finish_of(done, b), 2.0 * B / C * 1e9, 2);
}

TEST(FlowNetwork, RejectsBadRequests) {
  FlowNetwork net({1e9});
  EXPECT_THROW(net.start_flow(std::vector<LinkId>{1}, 10, 0), std::invalid_argument);
  EXPECT_THROW(net.start_flow(std::vector<LinkId>{0}, -1, 0), std::invalid_argument);
  EXPECT_THROW(net.start_flow(std::vector<LinkId>{0}, 10, -5), std::invalid_argument);
  EXPECT_THROW(net.start_flow(std::vector<LinkId>{0}, 10, 0, 0.0), std::invalid_argument);
  net.advance_to(100);
  EXPECT_THROW(net.advance_to(50), std::invalid_argument);
  EXPECT_THROW(net.state(7), std::out_of_range);
  EXPECT_THROW(FlowNetwork({1e9, -1.0}), std::invalid_argument);
}

// Flows that all cross the same links take a shortcut past the general solver; their rates must
// be the solver's to the bit, capped or not, ties or not.
TEST(FlowNetwork, FlowsOnOneSharedPathGetTheSolversRatesExactly) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> capacity(1e9, 100e9);
  int compared = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<double> links{capacity(rng), capacity(rng), capacity(rng)};
    const std::vector<LinkId> path{2, 0, 1};
    const int flows = 2 + trial % 6;
    std::vector<double> caps;
    for (int f = 0; f < flows; ++f) {
      const int kind = static_cast<int>(rng() % 4);  // none, small, tied, large
      caps.push_back(kind == 0 ? kNoRateCap : kind == 1 ? links[0] / 10 : kind == 2 ? 1e9 : capacity(rng));
    }
    FlowNetwork net(links);
    std::vector<FlowId> ids;
    for (double cap : caps) ids.push_back(net.start_flow(path, 1'000'000'000, 0, cap));
    const std::vector<double> expected = max_min_rates(links, std::vector<std::vector<LinkId>>(caps.size(), path), caps);
    for (std::size_t f = 0; f < ids.size(); ++f) {
      EXPECT_EQ(net.rate_Bps(ids[f]), expected[f]) << "trial " << trial << ", flow " << f;
      ++compared;
    }
  }
  EXPECT_GT(compared, 800);
}

TEST(FlowNetwork, SameInputsGiveTheSameCompletions) {
  auto run = [] {
    FlowNetwork net({3e9, 5e9, 7e9});
    for (int i = 0; i < 50; ++i) {
      std::vector<LinkId> path{static_cast<LinkId>(i % 3)};
      if (i % 4 == 0) path.push_back(static_cast<LinkId>((i + 1) % 3));
      net.start_flow(path, 10'000 + 997 * i, 13 * (i % 5));
    }
    return run_all(net);
  };
  const std::vector<FlowCompletion> first = run(), second = run();
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].id, second[i].id);
    EXPECT_EQ(first[i].time_ns, second[i].time_ns);
    if (i > 0) {
      EXPECT_LE(first[i - 1].time_ns, first[i].time_ns);
    }
  }
}

}  // namespace
}  // namespace stagecraft::sim
