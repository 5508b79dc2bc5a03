// stagecraft calibrate MEASURED... --cluster C -o CALIBRATED.json [--training T] [--json]: fit the
// cluster profile's cost-model parameters to measured traces (traces/calibrate.hpp). Writes the
// profile and CALIBRATED.calibration.json (values, standard errors, residuals, traces). Exit 1
// when the traces hold too few samples to fit anything.
#include <iostream>
#include <memory>
#include <optional>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/cluster.hpp"
#include "core/spec/training.hpp"
#include "traces/calibrate.hpp"

namespace stagecraft::cli {

namespace {

struct CalibrateArgs {
  std::vector<std::string> traces;
  std::string cluster, output, training;
  bool json = false;
};

int run_calibrate(const CalibrateArgs& a) {
  const spec::Cluster base = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, a.cluster));
  std::vector<std::string> inputs = a.traces;
  inputs.push_back(base.file);
  refuse_overwriting_input(a.output, inputs, "-o");
  // its companion report too (CALIBRATED.calibration.json), which was written over an input of that name
  refuse_overwriting_input(traces::report_path_for(a.output), inputs, "-o (its report " + traces::report_path_for(a.output) + ")");
  std::optional<spec::Training> training;
  if (!a.training.empty()) training = spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, a.training));
  const traces::Samples samples = traces::samples_from_files(a.traces, base, training);
  traces::Calibration c;
  try {
    c = traces::calibrate(samples, base);
    traces::write_calibration(c, a.output);
  } catch (const traces::CalibrationError& e) {
    std::cerr << "stagecraft: cannot calibrate: " << e.what() << "\n";
    return kImpossible;
  }
  if (a.json) {
    std::cout << traces::report_json(c).dump(2) << "\n";
  } else {
    std::cout << traces::to_text(c);
  }
  std::cerr << "stagecraft: wrote " << a.output << " and " << c.report_file << "\n";
  return kOk;
}

}  // namespace

Subcommand add_calibrate(CLI::App& root) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* app = root.add_subcommand("calibrate",
                                      "Fit a cluster profile's GEMM efficiency, memory throughput, activation and Adam "
                                      "rates and link α/β to measured traces");
  app->add_option("traces", args->traces, "measured traces (stagecraft run --trace, stagecraft probe --trace)")
      ->required()
      ->expected(1, -1);
  app->add_option("--cluster", args->cluster, "base cluster profile (file or bundled name)")->required();
  app->add_option("-o,--output", args->output, "where to write the calibrated profile")->required()->check(writable_file());
  app->add_option("--training", args->training,
                  "the training the traces ran (file or bundled name); default: the trace header (the Program it lowers to must have the trace's fingerprint)");
  app->add_flag("--json", args->json, "print the calibration report as one JSON document");
  return {app, [args]() { return run_calibrate(*args); }};
}

}  // namespace stagecraft::cli
