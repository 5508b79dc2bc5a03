// What the GUI searches: a model, a cluster (and how many of its nodes), a training, the axis
// limits, the search options — the arguments of `stagecraft search`, as one value. load() reads
// the files exactly as the command line does (spec::resolve_config: a bundled name or a path,
// Hugging Face config.json included), and search_command() is the command that reproduces it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/overrides.hpp"
#include "core/spec/training.hpp"
#include "planner/report.hpp"
#include "planner/space.hpp"

namespace stagecraft::gui {

struct Inputs {
  std::string model, cluster, training;   // bundled names or paths
  int64_t nodes = 0;            // 0: the cluster file's
  planner::SpaceLimits limits;
  int64_t top_k = 10;
  double pareto_window = 0.1;
  int threads = 0;              // 0: one per core
  std::string db;               // results store ("" for none)
  bool resume = false;
  std::vector<spec::Override> overrides;   // what-if edits of cluster and training fields (--set)
  std::string deepspeed;        // a ds_config.json to compare with (--deepspeed), "" for none
};

// The bundled demo case (`stagecraft demo`): GPT-3 13B on 8 DGX-H100 nodes, batch 1024.
Inputs demo_inputs();

struct Loaded {
  spec::Model model;
  spec::Cluster cluster;
  spec::Training training;
  std::shared_ptr<const planner::Space> space;
  std::optional<planner::Baseline> baseline;   // the DeepSpeed config, simulated
  std::vector<std::string> baseline_notes;     // DeepSpeed's defaults it filled in, and its warnings
};

// Throws spec::SpecError (file, JSON pointer, what was expected) for a file that does not load,
// limits the model cannot take, or a node count outside the cluster.
Loaded load(const Inputs& in);

// `stagecraft search --model … --cluster … --training … --nodes N --top K [limits]`, each argument
// shell-quoted when it needs it.
std::string search_command(const Inputs& in);

// The axes the inputs panel shows as checkable chips: every value the space can take on the axis
// (a Space built with no limits), and whether it is checked. All checked leaves the axis free,
// some checked pins those values, none is an error.
struct AxisChoice {
  std::string axis;                  // "tp", "pp", "zero", "schedule", "recompute", "sp"
  std::vector<std::string> values;   // as the CLI spells them ("8", "1f1b", "selective", "on")
  std::vector<bool> checked;
};
std::vector<AxisChoice> axis_choices(const planner::Space& free_space);
// Limits from chips; throws spec::SpecError naming the option ("--tp") when an axis has no value
// checked. Axes not in `axes` keep `base`'s limits.
planner::SpaceLimits limits_of(const std::vector<AxisChoice>& axes, planner::SpaceLimits base = {});

// One-line summaries, as `stagecraft info` prints them.
std::string model_summary(const spec::Model& m);
std::string cluster_summary(const spec::Cluster& c);
std::string training_summary(const spec::Training& t, const spec::Model& m);

}  // namespace stagecraft::gui
