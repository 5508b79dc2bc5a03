// Simulated against measured (docs/gui.md "Compare"): traces::compare's numbers (the CLI's
// `stagecraft compare`), the two steps laid out for one time axis, and the rank x kind error
// grid that points at a slow rank: a rank whose kinds are slower than simulated while its peers'
// are on time is the culprit (an all-reduce that waits for it makes its peers' communication look
// slow too; the compute kinds do not wait).
#pragma once

#include <QColor>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gui/jobs/plan_job.hpp"
#include "traces/calibrate.hpp"
#include "traces/compare.hpp"

namespace stagecraft::gui {

struct ErrorGrid {
  std::vector<int64_t> ranks;        // measured ranks
  std::vector<std::string> kinds;    // traces::kind_order
  std::vector<std::vector<double>> error;   // [rank][kind]: simulated / measured − 1; NaN: none
  // The cell with the largest |error| among the compute kinds (forward, backward, ...): the
  // culprit; (-1, -1) when there is none.
  int worst_rank = -1, worst_kind = -1;
};

struct CompareData {
  traces::Comparison comparison;
  ErrorGrid grid;
  PlanViewPtr simulated;             // the plan's simulated step
  PlanViewPtr measured;              // the measured step `step` on the same Program, when it is at instruction level
  std::string note;                  // why the measured side has no timeline
  int32_t step = 0, steps = 1;
};

// Throws what traces::compare throws (spec::SpecError naming the measured file and the JSON pointer
// when the plans differ).
CompareData compare_data(const PlanViewPtr& simulated, const traces::Trace& measured, int32_t step);

ErrorGrid error_grid(const traces::Comparison& c);

// Diverging colour of an error: blue where the simulator is fast (< 0), red where slow, white at 0,
// saturating at ±50%; light grey when there is none.
QColor error_colour(double error);

// For the overlay: each measured event's simulated counterpart (same instruction id on the
// simulated rank standing for its rank), as (start, end) on the simulated step's time axis, and
// its error simulated / measured − 1. Index [row][event] of d.measured's timeline.
struct Overlay {
  std::vector<std::vector<std::optional<std::pair<int64_t, int64_t>>>> ghost;
  std::vector<std::vector<double>> error;   // NaN: no counterpart
};
Overlay overlay_of(const CompareData& d);

// The plan re-simulated on a cluster (the calibrated one).
PlanViewPtr resimulate(const PlanView& v, const spec::Cluster& cluster);

// Calibrates `base` from the measured traces (traces::add_trace_samples and traces::calibrate, as
// `stagecraft calibrate` does). Throws traces::CalibrationError or spec::SpecError with the reason.
traces::Calibration calibrate_from(const traces::Trace& measured, const spec::Cluster& base, const spec::Training& training);

}  // namespace stagecraft::gui
