// Model error, measured: how far published training runs were from their simulation, and what
// that says of a plan about to be simulated.
//
// The error bars (uncertainty.hpp) propagate the profile's parameter uncertainties; they do not
// cover the simulator's own model error. That error is measured, run by run, by the validation
// scripts (scripts/validate_*.py, docs/validation.md), which write every run they check into the
// record configs/validation/runs.json: its set and id, the framework that ran it, its ZeRO stage,
// its GPUs and
//   r = T_measured / T_simulated = (simulated throughput) / (published throughput),
// the run's measured step time over the simulated one (r > 1: the simulation was too fast).
//
// For a plan, the runs that speak to it are those of the same framework (training.json
// "framework") and the same ZeRO class (stage 3, which gathers parameters every pass, or stages
// 0-2); ModelError gives their number and the least, median and largest r, and from 4 runs on the
// middle half (the medians of the lower and upper halves). The median of n values sorted is the
// middle one (n odd) or the mean of the two middle ones. Where the framework has no
// checked run of the class, the other frameworks' runs of that class are given beside it (each
// framework apart: they issue their collectives differently). Given the plan's GPU, the runs on
// its family (the GPU name up to its first space or '-': "A100", "H100") are quoted first and apart,
// as one family's runs can sit apart from another's (docs/validation.md), and a family with no
// checked run is named as such. It is what the record measured, not a confidence interval: a plan
// unlike every checked run (another GPU, scale or model) may fall outside it, and a framework with
// no checked run says so (runs = 0). ZeRO across nodes is a class of its own: a run with a
// "variant" ("zeropp": hpZ, qwZ or qgZ; "shard": MiCS, hybrid sharding, optimizer instances;
// spec::across_nodes_class; "moe": a mixture-of-experts model, spec::validation_class) speaks only
// to plans of that variant, a plain plan only to plain runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/framework.hpp"

namespace stagecraft::sim {

struct CheckedRun {
  std::string set;     // the validation script's section (table1, zero3, ...)
  std::string id;      // the row within it
  std::string source;  // where the published number comes from
  spec::Framework framework = spec::Framework::kDeepSpeed;
  std::string gpu;
  int64_t gpus = 0;
  int zero_stage = 0;
  double measured_over_simulated = 1;  // r above
  std::string variant;                 // ZeRO across nodes ("zeropp", "shard"), empty for plain
};

struct ValidationRecord {
  std::string file;
  std::vector<CheckedRun> runs;
};

// Reads a record; a malformed one is a SpecError naming the file, the field and what was expected.
ValidationRecord read_validation_record(const std::string& path);
// The bundled record (<config dir>/validation/runs.json), or nullopt when there is none.
std::optional<ValidationRecord> bundled_validation_record();
// The path bundled_validation_record reads.
std::string bundled_validation_record_path();

struct ModelError {
  spec::Framework framework = spec::Framework::kDeepSpeed;
  bool zero3 = false;
  std::string variant;               // the plan's class of ZeRO across nodes, empty for plain
  std::string record;                // the file the runs come from
  std::vector<std::string> run_ids;  // "set/id" of each matching run
  double low = 0, median = 0, high = 0;  // of r over the matching runs; 0 when there are none
  // The middle half, from 4 runs on (0 below): the medians of the lower and upper halves of the r
  // sorted (Tukey's hinges; an odd count's middle value in neither half).
  double q1 = 0, q3 = 0;
  std::vector<std::string> gpu_families;  // "A100", "V100": each run's GPU name up to its first space or '-'
  int64_t min_gpus = 0, max_gpus = 0;     // the runs' sizes
  // With no run of this framework: the same ZeRO class under each other framework that has runs.
  std::vector<ModelError> other_frameworks;
  // Given the plan's GPU: its family, and the runs above on that family alone (none, or one entry
  // whose gpu_families is {plan_gpu_family}).
  std::string plan_gpu_family;
  std::vector<ModelError> same_gpu;
  size_t runs() const { return run_ids.size(); }
};

// The family of a GPU name: up to its first space or '-' ("A100-SXM4-80GB" and "A100 80GB": "A100").
std::string gpu_family(const std::string& gpu_name);
// `plan_gpu`: the plan's GPU name (the cluster's gpu.name), or empty for every GPU alike.
// `variant`: the plan's spec::validation_class.
ModelError model_error(const ValidationRecord& record, spec::Framework framework, int zero_stage,
                       const std::string& plan_gpu = "", const std::string& variant = "");

// One line for text output: what the matching runs measured, or that there are none.
std::string model_error_text(const ModelError& e);
// {"framework", "zero", "runs", "measured_over_simulated": {low, median, high} or null, "ids", "record"};
// given the plan's GPU, "gpu_family" and "same_gpu": the same object for the runs on it, or null.
nlohmann::json to_json(const ModelError& e);

}  // namespace stagecraft::sim
