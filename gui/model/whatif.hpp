// What-if (docs/gui.md "What-if"): the selected plan re-simulated on an edited cluster. Each
// control edits one cluster field through a --set override (core/spec/overrides.hpp), so an edit
// is validated as the file would be, "Copy as command" can repeat it, and the numbers are the
// ones `stagecraft simulate --set …` prints. Changing the node count keeps the plan's tp, pp,
// micro-batch size and schedule and derives dp and the micro-batch count (planner::adapt_plan),
// or says why it cannot.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gui/jobs/plan_job.hpp"
#include "gui/model/inputs.hpp"
#include "planner/search.hpp"
#include "planner/sweep.hpp"

namespace stagecraft::gui {

// One editable field, shown in `unit`: file value = shown value × scale.
struct WhatIfField {
  std::string key;        // the --set key, e.g. "cluster.inter_node.nic_bandwidth_Bps"
  std::string label;      // "IB bandwidth per NIC"
  std::string unit;       // "Gb/s"
  double scale = 1;       // bytes/s per Gb/s = 1e9 / 8
  bool integer = false;
  double min = 0, max = 0;   // the control's range, in `unit`
};
const std::vector<WhatIfField>& whatif_fields();
const WhatIfField& whatif_field(const std::string& key);   // throws std::out_of_range
// The field's value in a cluster, in its unit.
double field_value(const spec::Cluster& c, const WhatIfField& f);
// The override that sets the field to `shown` (in its unit). The straggler field sets the whole
// "straggler" object: `cluster`'s straggler at that slowdown, or GPU 0 when it has none.
spec::Override field_override(const WhatIfField& f, double shown, const spec::Cluster* cluster = nullptr);

// Edits of the plan itself: the micro-batch size (the data-parallel size kept, so the micro-batch
// count becomes B / (dp · mb)) and DeepSpeed's bucket sizes in elements (ZeRO: reduce_bucket_size;
// ZeRO-3: stage3_prefetch_bucket_size and stage3_max_live_parameters).
struct PlanEdits {
  std::optional<int64_t> micro_batch, reduce_bucket, prefetch_bucket, max_live_parameters;
  bool empty() const { return !micro_batch && !reduce_bucket && !prefetch_bucket && !max_live_parameters; }
};
// The plan with the edits, or the reason it cannot take them.
planner::AdaptedPlan edit_plan(const spec::Plan& plan, int64_t global_batch, const PlanEdits& edits);

struct WhatIfResult {
  std::string key;                 // the plan
  sim::Metrics base;               // as the table has it
  std::optional<sim::Metrics> modified;
  PlanViewPtr view;                // the modified step, when it ran
  std::string plan_note;           // how the plan was adapted (node count), if it was
  std::string error;               // why it did not run (a refused value, an impossible GPU count)
};

// `inputs` are the search's; `edits` the what-if overrides; `plan` a row of the table.
WhatIfResult evaluate_whatif(const Inputs& inputs, const std::vector<spec::Override>& edits, const planner::Evaluated& plan,
                             const PlanEdits& plan_edits = {});

// The sweep the panel plots: `field` from lo to hi (its unit) in n log-spaced points, for `plans`.
planner::Sweep whatif_sweep(const Inputs& inputs, const std::vector<spec::Override>& edits, const WhatIfField& field, double lo,
                            double hi, int n, const std::vector<planner::SweepPlan>& plans);

}  // namespace stagecraft::gui
