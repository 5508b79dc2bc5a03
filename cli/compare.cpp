// stagecraft compare SIMULATED MEASURED... [--json] [--png out.png]: a simulated trace against a
// measured one (a Stagecraft trace, or PyTorch profiler files, one per rank); traces/compare.hpp.
// stagecraft compare A B... --plans: two traces of different plans side by side, per kind and per
// stage (traces/compare_plans.hpp).
#include <iostream>
#include <memory>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "render/timeline_png.hpp"
#include "traces/compare.hpp"
#include "traces/compare_plans.hpp"
#include "traces/io/trace_io.hpp"
#include "traces/timeline.hpp"

namespace stagecraft::cli {

namespace {

struct CompareArgs {
  std::string simulated;
  std::vector<std::string> measured;
  std::string png;
  bool plans = false;
  bool json = false;
};

int run_compare(const CompareArgs& a) {
  if (!a.png.empty() && !render::png_available()) {
    std::cerr << "stagecraft: error: --png needs a build with Qt6 (STAGECRAFT_WITH_GUI=ON); this one has none\n";
    return kImpossible;
  }
  const traces::Trace sim = traces::read_trace_files({a.simulated});
  const traces::Trace meas = traces::read_trace_files(a.measured);
  if (a.plans) {
    const traces::PlanComparison c = traces::compare_plans(sim, meas);
    if (a.json) {
      std::cout << traces::to_json(c).dump(2) << "\n";
    } else {
      std::cout << traces::to_text(c);
    }
    if (!a.png.empty()) {
      render::write_timeline_png({traces::timeline_panel(sim, "A: " + c.a.file + (c.a.plan.empty() ? "" : " (" + c.a.plan + ")")),
                                  traces::timeline_panel(meas, "B: " + c.b.file + (c.b.plan.empty() ? "" : " (" + c.b.plan + ")"))},
                                 a.png);
      std::cerr << "stagecraft: wrote " << a.png << "\n";
    }
    return kOk;
  }
  const traces::Comparison c = traces::compare(sim, meas);
  if (a.json) {
    std::cout << traces::to_json(c).dump(2) << "\n";
  } else {
    std::cout << traces::to_text(c);
  }
  if (!a.png.empty()) {
    render::write_timeline_png({traces::timeline_panel(sim, "simulated: " + c.simulated_file),
                                traces::timeline_panel(meas, "measured: " + c.measured_file)},
                               a.png);
    std::cerr << "stagecraft: wrote " << a.png << "\n";
  }
  return kOk;
}

}  // namespace

Subcommand add_compare(CLI::App& root) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* app = root.add_subcommand("compare", "Compare a simulated trace with a measured one, instruction by instruction");
  app->add_option("simulated", args->simulated, "simulated trace (stagecraft simulate --trace)")->required();
  app->add_option("measured", args->measured,
                  "measured trace (stagecraft run --trace), or PyTorch profiler JSON files, one per rank")
      ->required()
      ->expected(1, -1);
  app->add_option("--png", args->png, "also draw both timelines, one above the other, into this PNG (needs Qt)")->check(writable_file());
  app->add_flag("--json", args->json, "print one JSON document (SCHEMAS.md \"compare --json\")");
  app->add_flag("--plans", args->plans,
                "the two traces are of different plans (simulated or measured, any mix): show them side by side per "
                "kind and per pipeline stage instead of aligning instructions");
  return {app, [args]() { return run_compare(*args); }};
}

}  // namespace stagecraft::cli
