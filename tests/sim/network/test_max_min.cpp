// Max-min fair sharing on systems small enough to solve by hand, plus the defining property of
// max-min fairness (every flow is bottlenecked) on a random system.
#include "sim/network/max_min.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace stagecraft::sim {
namespace {

TEST(MaxMin, OneFlowAloneGetsTheWholeLink) {
  // One link of C, one flow: λ rises to C / 1.
  const double C = 10e9;
  const std::vector<double> caps{C};
  const std::vector<double> rates = max_min_rates(caps, {{0}});
  EXPECT_DOUBLE_EQ(rates[0], C);
}

TEST(MaxMin, OneFlowIsLimitedByItsNarrowestLink) {
  // Path over links of 10 and 4: the first round saturates the 4 (share 4/1 < 10/1).
  const std::vector<double> caps{10e9, 4e9};
  EXPECT_DOUBLE_EQ(max_min_rates(caps, {{0, 1}})[0], 4e9);
}

TEST(MaxMin, TwoFlowsOnOneLinkShareItEqually) {
  // Two flows share one link of C: each gets C / 2.
  const double C = 10e9;
  const std::vector<double> caps{C};
  const std::vector<double> rates = max_min_rates(caps, {{0}, {0}});
  EXPECT_DOUBLE_EQ(rates[0], C / 2);
  EXPECT_DOUBLE_EQ(rates[1], C / 2);
}

TEST(MaxMin, ClassicThreeFlows) {
  // Link A (C_A = 10) carries f0 and f1; link B (C_B = 4) carries f1 and f2.
  //   round 1: shares A: 10/2 = 5, B: 4/2 = 2  ->  λ = 2, B saturates: r1 = r2 = 2.
  //            A has 10 − 2·2 = 6 left, one unfrozen flow (f0).
  //   round 2: share A: 6/1 = 6  ->  λ = 2 + 6 = 8, A saturates: r0 = 8.
  // Check: A carries 8 + 2 = 10, B carries 2 + 2 = 4; f1 cannot grow without shrinking f2 = f1.
  const double C_A = 10e9, C_B = 4e9;
  const std::vector<double> caps{C_A, C_B};
  const std::vector<double> rates = max_min_rates(caps, {{0}, {0, 1}, {1}});
  EXPECT_DOUBLE_EQ(rates[1], C_B / 2);
  EXPECT_DOUBLE_EQ(rates[2], C_B / 2);
  EXPECT_DOUBLE_EQ(rates[0], C_A - C_B / 2);
}

TEST(MaxMin, RateCapFreesBandwidthForOthers) {
  // One link of C = 10 and two flows; f0 is capped at 2.
  //   round 1: share 10/2 = 5, headroom of f0 = 2 − 0  ->  λ = 2, f0 frozen at its cap.
  //   round 2: 10 − 2·2 = 6 left for f1 alone  ->  λ = 8: r1 = C − cap.
  const double C = 10e9, cap = 2e9;
  const std::vector<double> caps{C};
  const std::vector<double> rates = max_min_rates(caps, {{0}, {0}}, {cap, kNoRateCap});
  EXPECT_DOUBLE_EQ(rates[0], cap);
  EXPECT_DOUBLE_EQ(rates[1], C - cap);
}

TEST(MaxMin, RateCapAboveTheFairShareDoesNothing) {
  // Fair share is C/2 = 5 < cap 7: the link saturates first.
  const double C = 10e9;
  const std::vector<double> caps{C};
  const std::vector<double> rates = max_min_rates(caps, {{0}, {0}}, {7e9, kNoRateCap});
  EXPECT_DOUBLE_EQ(rates[0], C / 2);
  EXPECT_DOUBLE_EQ(rates[1], C / 2);
}

TEST(MaxMin, FlowWithoutLinksGetsItsCap) {
  const std::vector<double> caps{1e9};
  const std::vector<double> rates = max_min_rates(caps, {{}, {}, {0}}, {3e9, kNoRateCap, kNoRateCap});
  EXPECT_DOUBLE_EQ(rates[0], 3e9);
  EXPECT_EQ(rates[1], kNoRateCap);
  EXPECT_DOUBLE_EQ(rates[2], 1e9);
}

TEST(MaxMin, NoFlows) {
  const std::vector<double> caps{1e9};
  EXPECT_TRUE(max_min_rates(caps, {}).empty());
}

TEST(MaxMin, RejectsMalformedInput) {
  const std::vector<double> caps{1e9, 0.0};
  EXPECT_THROW(max_min_rates(caps, {{2}}), std::invalid_argument);   // unknown link
  EXPECT_THROW(max_min_rates(caps, {{1}}), std::invalid_argument);   // zero capacity
  EXPECT_THROW(max_min_rates(caps, {{0}}, {0.0}), std::invalid_argument);  // zero cap
  EXPECT_THROW(max_min_rates(caps, {{0}, {0}}, {1e9}), std::invalid_argument);  // cap count
}

struct RandomSystem {
  std::vector<double> capacity_Bps;
  std::vector<std::vector<LinkId>> paths;
  std::vector<double> rate_cap_Bps;
};

// Paths of 1-4 random links, every 7th flow capped. `ties`: capacities from {1, 2, 4}·1e9 only,
// so many links saturate at the same level.
RandomSystem random_system(int links, int flows, unsigned seed, bool ties = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> real_cap(1e9, 100e9);
  std::uniform_int_distribution<int> exponent(0, 2);
  auto cap = [&](std::mt19937& r) { return ties ? 1e9 * (1 << exponent(r)) : real_cap(r); };
  std::uniform_int_distribution<int> link(0, links - 1);
  std::uniform_int_distribution<int> length(1, 4);
  RandomSystem s;
  for (int l = 0; l < links; ++l) s.capacity_Bps.push_back(cap(rng));
  for (int f = 0; f < flows; ++f) {
    std::vector<LinkId> path;
    const int n = length(rng);
    for (int i = 0; i < n; ++i) path.push_back(link(rng));
    s.paths.push_back(path);
    s.rate_cap_Bps.push_back(f % 7 == 0 ? cap(rng) / 20 : kNoRateCap);
  }
  return s;
}

// Max-min fairness holds iff the allocation is feasible and every flow either sits at its cap or
// crosses a saturated link on which no other flow has a larger rate (its bottleneck).
TEST(MaxMin, EveryFlowIsCappedOrBottlenecked) {
  const RandomSystem s = random_system(64, 300, 42);
  const std::vector<double> rates = max_min_rates(s.capacity_Bps, s.paths, s.rate_cap_Bps);
  std::vector<double> load(s.capacity_Bps.size(), 0.0), largest(s.capacity_Bps.size(), 0.0);
  for (std::size_t f = 0; f < s.paths.size(); ++f) {
    for (LinkId l : s.paths[f]) {
      load[static_cast<std::size_t>(l)] += rates[f];
      largest[static_cast<std::size_t>(l)] = std::max(largest[static_cast<std::size_t>(l)], rates[f]);
    }
  }
  const double tol = 1e-9;
  for (std::size_t l = 0; l < load.size(); ++l) EXPECT_LE(load[l], s.capacity_Bps[l] * (1 + tol)) << "link " << l;
  for (std::size_t f = 0; f < s.paths.size(); ++f) {
    EXPECT_GT(rates[f], 0) << "flow " << f;
    EXPECT_LE(rates[f], s.rate_cap_Bps[f] * (1 + tol)) << "flow " << f;
    bool justified = rates[f] >= s.rate_cap_Bps[f] * (1 - tol);
    for (LinkId l : s.paths[f]) {
      const auto li = static_cast<std::size_t>(l);
      if (load[li] >= s.capacity_Bps[li] * (1 - 1e-6) && rates[f] >= largest[li] * (1 - 1e-6)) justified = true;
    }
    EXPECT_TRUE(justified) << "flow " << f << " at " << rates[f] << " B/s has no bottleneck";
  }
}

// The oracle: progressive filling written the plain way, one round at a time, scanning every
// link and flow (O(rounds · (L + F·P))); the solver must agree with it.
std::vector<double> reference_rates(const RandomSystem& s) {
  const std::size_t F = s.paths.size(), L = s.capacity_Bps.size();
  std::vector<double> rate(F, 0.0), remaining = s.capacity_Bps;
  std::vector<bool> frozen(F, false);
  double level = 0;
  for (;;) {
    std::vector<int> n(L, 0);
    for (std::size_t f = 0; f < F; ++f) {
      if (!frozen[f]) {
        for (LinkId l : s.paths[f]) ++n[static_cast<std::size_t>(l)];
      }
    }
    double delta = kNoRateCap;
    for (std::size_t l = 0; l < L; ++l) {
      if (n[l] > 0) delta = std::min(delta, remaining[l] / n[l]);
    }
    for (std::size_t f = 0; f < F; ++f) {
      if (!frozen[f]) delta = std::min(delta, s.rate_cap_Bps[f] - level);
    }
    if (delta == kNoRateCap) break;  // nothing unfrozen
    level += delta;
    for (std::size_t l = 0; l < L; ++l) remaining[l] -= delta * n[l];
    for (std::size_t f = 0; f < F; ++f) {
      if (frozen[f]) continue;
      bool stop = s.rate_cap_Bps[f] <= level * (1 + 1e-12);
      for (LinkId l : s.paths[f]) {
        const auto li = static_cast<std::size_t>(l);
        stop = stop || remaining[li] <= 1e-9 * s.capacity_Bps[li];
      }
      if (stop) {
        frozen[f] = true;
        rate[f] = std::min(level, s.rate_cap_Bps[f]);
      }
    }
  }
  return rate;
}

TEST(MaxMin, AgreesWithThePlainProgressiveFilling) {
  for (unsigned seed = 1; seed <= 60; ++seed) {
    const int links = 8 + static_cast<int>(seed) * 3, flows = 10 + static_cast<int>(seed) * 17;
    const RandomSystem s = random_system(links, flows, seed, /*ties=*/seed % 2 == 0);
    const std::vector<double> fast = max_min_rates(s.capacity_Bps, s.paths, s.rate_cap_Bps);
    const std::vector<double> plain = reference_rates(s);
    for (std::size_t f = 0; f < s.paths.size(); ++f) {
      EXPECT_NEAR(fast[f], plain[f], 1e-9 * plain[f]) << "seed " << seed << ", flow " << f;
    }
  }
}

// Small problems take the scan path, large ones the heap; both must give the same bits.
TEST(MaxMin, SmallProblemPathEqualsTheHeapPathExactly) {
  MaxMinSolver solver;
  int compared = 0;
  for (unsigned seed = 1; seed <= 400; ++seed) {
    const int links = 1 + static_cast<int>(seed % MaxMinSolver::kSmallLinks);
    const int flows = 1 + static_cast<int>((seed * 7) % MaxMinSolver::kSmallFlows);
    const RandomSystem s = random_system(links, flows, seed, /*ties=*/seed % 2 == 0);
    std::vector<int32_t> offsets{0};
    std::vector<LinkId> path_links;
    for (const auto& p : s.paths) {
      path_links.insert(path_links.end(), p.begin(), p.end());
      offsets.push_back(static_cast<int32_t>(path_links.size()));
    }
    const MaxMinProblem problem{s.capacity_Bps, offsets, path_links, s.rate_cap_Bps};
    std::vector<double> small(s.paths.size()), heap(s.paths.size());
    solver.solve(problem, small);
    const int small_rounds = solver.last_rounds();
    solver.solve_heap(problem, heap);
    EXPECT_EQ(small_rounds, solver.last_rounds()) << "seed " << seed;
    for (std::size_t f = 0; f < s.paths.size(); ++f) {
      EXPECT_EQ(small[f], heap[f]) << "seed " << seed << ", flow " << f;  // bitwise, not near
      ++compared;
    }
  }
  EXPECT_GT(compared, 2000);
}

TEST(MaxMin, ReusedSolverGivesTheSameAnswer) {
  // Scratch buffers are reused across calls: solving a big then a small then the big system
  // again must match fresh solves.
  const RandomSystem big = random_system(32, 200, 1), small = random_system(4, 5, 2);
  auto solve = [](MaxMinSolver& solver, const RandomSystem& s) {
    std::vector<int32_t> offsets{0};
    std::vector<LinkId> links;
    for (const auto& p : s.paths) {
      links.insert(links.end(), p.begin(), p.end());
      offsets.push_back(static_cast<int32_t>(links.size()));
    }
    std::vector<double> rates(s.paths.size());
    solver.solve({s.capacity_Bps, offsets, links, s.rate_cap_Bps}, rates);
    return rates;
  };
  MaxMinSolver solver;
  const std::vector<double> first = solve(solver, big);
  EXPECT_EQ(solve(solver, small), max_min_rates(small.capacity_Bps, small.paths, small.rate_cap_Bps));
  EXPECT_EQ(solve(solver, big), first);
  EXPECT_EQ(first, max_min_rates(big.capacity_Bps, big.paths, big.rate_cap_Bps));
  EXPECT_GE(solver.last_rounds(), 1);
}

}  // namespace
}  // namespace stagecraft::sim
