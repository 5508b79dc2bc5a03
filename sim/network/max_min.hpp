// Max-min fair bandwidth sharing, solved by progressive filling. This is the network model's
// solver, in the style of SimGrid's LMM solver (Casanova et al., "Versatile, scalable and
// accurate simulation of distributed applications and platforms", JPDC 74(10), 2014; Velho et
// al., "On the validity of flow-level TCP network models for grid and cloud simulations", ACM
// TOMACS 2013). It knows links, flows and rates only: no GPUs, no time.
//
// The problem. Links l have capacity C_l > 0 (bytes/s). Flow f crosses the links of its path
// P_f (a link listed twice is crossed twice) and may have its own bound B_f (+inf when none,
// e.g. a collective step limited by something other than the network). Find rates r_f with
//
//     Σ_{f : l ∈ P_f} r_f ≤ C_l     for every link l            (capacity)
//     0 ≤ r_f ≤ B_f                 for every flow f             (own bound)
//
// that are max-min fair: no r_f can grow without shrinking some r_g ≤ r_f. That is the
// lexicographically largest sorted rate vector; it is unique.
//
// Progressive filling. All unfrozen flows share one level λ (they rise together from 0):
//
//     λ ← 0;  U ← every flow with a non-empty path;   R_l ← C_l;  n_l ← |{f ∈ U : l ∈ P_f}|
//     while U ≠ ∅:
//         δ ← min( min_{l : n_l > 0} R_l / n_l ,  min_{f ∈ U} B_f − λ )
//         λ ← λ + δ;   R_l ← R_l − δ·n_l  for every l with n_l > 0
//         every f ∈ U with B_f ≤ λ:                    r_f ← B_f, remove f from U
//         every link l with R_l ≈ 0 (saturated):       every f ∈ U on l: r_f ← λ, remove f from U
//         (removing f decrements n_l on each link of P_f)
//
// A flow with an empty path is bounded only by B_f (r_f = B_f, possibly +inf).
//
// Implementation. Between freezes every R_l / n_l falls by the same δ as λ rises, so link l
// saturates exactly when λ reaches
//     λ_l = (C_l − Σ_{frozen f on l} r_f) / n_l
// which changes only when a flow on l freezes (and then never decreases). The links with unfrozen
// flows wait in an indexed min-heap keyed by (λ_l, l); the capped flows wait in a list sorted by
// (B_f, f). Each round takes the smaller of the two fronts as λ and freezes every flow with
// B_f ≤ λ·(1 + 1e-12) (r_f = B_f) and every link with λ_l ≤ λ·(1 + 1e-9) (all its unfrozen
// flows get r_f = λ). Freezing flows touches the links of their paths; each touched link gets
// its new λ_l and moves in the heap once per batch. Cost per solve: O(L + F·P·log L) for L
// links, F flows and paths of P links, however many rounds it takes. In the first round
// λ = C_l / n_l exactly, so equal flows on one bottleneck get exactly C_l / n_l.

// Reentrant: a MaxMinSolver holds only scratch buffers, reused across calls so that steady-state
// solving does not allocate. Use one solver per thread (per simulation).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "sim/network/topology.hpp"

namespace stagecraft::sim {

inline constexpr double kNoRateCap = std::numeric_limits<double>::infinity();

// Flows in compressed-row form: flow f crosses path_links[path_offsets[f] .. path_offsets[f+1]).
struct MaxMinProblem {
  std::span<const double> capacity_Bps;   // one per link, > 0
  std::span<const int32_t> path_offsets;  // flows + 1 entries, non-decreasing, first 0
  std::span<const LinkId> path_links;     // link ids in [0, capacity_Bps.size())
  std::span<const double> rate_cap_Bps;   // one per flow (> 0, kNoRateCap for none), or empty
};

class MaxMinSolver {
 public:
  // Writes the max-min fair rate of every flow into rate_Bps (size = flows). Throws
  // std::invalid_argument on malformed input (sizes, link ids, non-positive capacity or cap).
  void solve(const MaxMinProblem& problem, std::span<double> rate_Bps);
  // The same algorithm with the indexed heap whatever the size; solve() uses it above
  // kSmallLinks links or kSmallFlows flows and linear scans over stack arrays below (the same
  // rounds, order and arithmetic, so both give bit-identical rates).
  void solve_heap(const MaxMinProblem& problem, std::span<double> rate_Bps);
  // solve() without validate(): for callers that build the problem from checked parts (the
  // FlowNetwork checks links and caps when a flow starts) and solve it thousands of times.
  void solve_prevalidated(const MaxMinProblem& problem, std::span<double> rate_Bps);
  static constexpr std::size_t kSmallLinks = 16, kSmallFlows = 16;

  int last_rounds() const { return rounds_; }  // filling rounds of the last solve

 private:
  struct HeapEntry {
    double level;  // λ_l
    LinkId link;
  };

  void validate(const MaxMinProblem& p, std::size_t rate_count) const;
  void solve_small(const MaxMinProblem& p, std::span<double> rate_Bps);
  void prepare(const MaxMinProblem& p, std::span<double> rate_Bps);
  void fill(const MaxMinProblem& p, std::span<double> rate_Bps);  // the filling rounds after prepare()
  static bool heap_less(const HeapEntry& a, const HeapEntry& b);
  void heap_place(std::size_t slot, HeapEntry entry);
  void heap_sift_down(std::size_t slot);
  void heap_sift(std::size_t slot);
  void heap_remove(LinkId link);
  void update_link(const MaxMinProblem& p, LinkId link, double level);  // new λ_l, heap position
  void freeze_flow(const MaxMinProblem& p, int32_t flow, double rate, std::span<double> rate_Bps);
  void freeze_link(const MaxMinProblem& p, LinkId link, double level, std::span<double> rate_Bps);
  void update_touched(const MaxMinProblem& p, double level);

  std::vector<int32_t> unfrozen_on_link_;   // per link: n_l (with multiplicity)
  std::vector<double> frozen_Bps_;          // per link: Σ rates of frozen flows crossing it
  std::vector<int32_t> link_flow_offsets_;  // per link: transpose of the paths (CSR)
  std::vector<int32_t> link_flows_;
  std::vector<int32_t> fill_cursor_;        // scratch for building the transpose
  std::vector<HeapEntry> heap_;             // links with unfrozen flows, min-heap by (λ_l, l)
  std::vector<int32_t> heap_slot_;          // per link: index in heap_, −1 when absent
  std::vector<unsigned char> touched_;      // per link: λ_l changed since the last push
  std::vector<LinkId> touched_links_;
  std::vector<int32_t> capped_;             // flows with a finite cap, by (cap, flow)
  std::vector<unsigned char> frozen_;       // per flow
  std::size_t next_capped_ = 0;
  int64_t unfrozen_ = 0;
  int rounds_ = 0;
};

// Convenience for tests and one-off use: paths as vectors, caps optional (empty = none).
std::vector<double> max_min_rates(std::span<const double> capacity_Bps, const std::vector<std::vector<LinkId>>& paths,
                                  const std::vector<double>& rate_cap_Bps = {});

}  // namespace stagecraft::sim
