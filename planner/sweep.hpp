// Sweep: how the step time of a few plans moves as one cluster or training field changes, and
// where the fastest of them changes (`stagecraft sweep`, the GUI's what-if sweep).
//
// For each value v of the axis (a --set key: cluster.inter_node.nic_bandwidth_Bps, ...), the
// cluster and training files are read again with the base overrides and axis = v (so each value
// is validated by the loader, core/spec/overrides.hpp), every plan is checked against the GPU
// count (spec::validate_plan), lowered and simulated (sim::simulate, the call `simulate` makes).
// Sweeping cluster.nodes keeps each plan's tp, pp and micro-batch size and derives dp and the
// micro-batch count (adapt_plan). A plan that cannot run at a point (a GPU count it does not
// divide, too few GPUs) keeps the reason instead of a time. At each point the winner is the fastest plan that fits (ties: the earlier plan); a
// change of winner between neighbouring points is reported as lying between their values.
// The points x plans simulations run in parallel; the results do not depend on the thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/model.hpp"
#include "core/spec/overrides.hpp"
#include "core/spec/plan.hpp"
#include "sim/metrics.hpp"

namespace stagecraft::planner {

struct SweepInputs {
  spec::Model model;
  std::string cluster_path, training_path;   // resolved files
  std::vector<spec::Override> base;          // --set applied at every point
  int64_t nodes = 0;                         // --nodes (0: the cluster file's, or an override's)
};

struct SweepPlan {
  std::string key;
  spec::Plan plan;
};

struct SweepCell {
  bool ok = false;
  bool skipped = false;  // not simulated: the sweep was interrupted first
  sim::Metrics metrics;
  std::string error;     // when !ok
};

struct SweepPoint {
  std::string value;            // as given
  std::vector<SweepCell> cells; // one per plan
  int best = -1;                // the fastest plan that fits; -1: none (or a cell skipped)
  bool complete = true;         // every cell simulated (or refused); false once interrupted
};

struct Sweep {
  spec::Override axis;          // its value is the first point's
  std::vector<SweepPlan> plans;
  std::vector<SweepPoint> points;
  std::vector<std::size_t> changes;   // i: the winner at points[i] differs from points[i - 1]'s (both complete)
  bool interrupted = false;           // `cancel` was set before every cell was simulated
};

// The plan on another GPU count, keeping its tensor and pipeline sizes, micro-batch size, schedule
// and everything else: dp = G / (tp·pp), micro-batches = B / (dp·mb). When either is not a whole
// number, no plan and the reason, with the nearest GPU counts (multiples of `gpus_per_node`) at
// which it works.
struct AdaptedPlan {
  std::optional<spec::Plan> plan;
  std::string reason;
};
AdaptedPlan adapt_plan(const spec::Plan& plan, int64_t global_batch, int64_t gpus, int64_t gpus_per_node);

// values: JSON values (spec::parse_value of each text). Throws SpecError for an axis key that is
// not a cluster or training field.
// `cancel` (e.g. set by SIGINT or SIGTERM): cells not started once it is set are skipped, and the
// points they belong to name no winner.
Sweep sweep(const SweepInputs& in, const spec::Override& axis, const std::vector<std::string>& values,
            const std::vector<SweepPlan>& plans, int threads, const std::atomic<bool>* cancel = nullptr);

// "lo:hi:n" (linear) or "lo:hi:n:log" -> n values from lo to hi; SpecError naming `option`.
std::vector<std::string> range_values(const std::string& text, const std::string& option);

// A table: a row per value, a column per plan (step time, * on the winner), then the changes.
std::string format_sweep(const Sweep& s);
nlohmann::json to_json(const Sweep& s);

}  // namespace stagecraft::planner
