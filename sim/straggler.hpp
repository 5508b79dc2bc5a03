// Stragglers: what one (or k) slow GPUs, nodes or NICs cost a step (spec::Straggler, the
// cluster's "straggler" what-if; docs/simulator.md, "Stragglers").
//
// A straggler breaks the symmetry the one-replica simulation relies on (symmetry.hpp), so the
// simulation runs every rank (simulation.hpp): a slow GPU's kernels take `slowdown` times their
// time, a slow NIC carries 1/slowdown of its bandwidth both ways (network/topology.hpp). Every
// synchronous step then waits for it: a collective starts when its last member issues it, a
// pipeline receive completes when its message arrives. The report compares the step with the
// same cluster without the straggler (one replica, the symmetric case) and names the lane whose
// waiting grew most on the other ranks: where the rest of the job waits for the straggler.
//   slowdown_of_step = T_straggled / T_symmetric
//   wait growth of lane l = mean over the other ranks of waited_l (straggled)
//                           − mean over the ranks of waited_l (symmetric)
// E.g. a data-parallel ring of n ranks, each computing C then all-reducing for A, one GPU f times
// slower: T = f·C + A against C + A — the others wait (f − 1)·C at the all-reduce.
#pragma once

#include <array>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::sim {

struct StragglerReport {
  spec::Straggler straggler;
  double symmetric_step_s = 0;
  double step_s = 0;
  double slowdown_of_step = 1;
  // per lane (program::Lane): the growth of the mean wait of the ranks that do not straggle over
  // the symmetric case, seconds (SimResult::others_wait_s)
  std::array<double, program::kLaneCount> wait_growth_s{};
  program::Lane waiting_lane = program::Lane::kCompute;   // the largest growth
};

// The report for `cluster.straggler` given the straggled simulation's result (nullopt when the
// cluster has none): simulates the symmetric case once more.
std::optional<StragglerReport> straggler_report(const program::Program& prog, const spec::Cluster& cluster,
                                                const SimResult& straggled);
// One line: "gpu 0 ×1.5: step 1.000 s → 1.300 s (1.30×); the others wait most on their dp-reduce
// lane, +0.290 s a rank".
std::string straggler_text(const StragglerReport& r);
nlohmann::json to_json(const StragglerReport& r);

}  // namespace stagecraft::sim
