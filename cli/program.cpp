// stagecraft program --model M --training T --plan P [--rank R] [--json]: the lowered Program.
#include <iostream>
#include <memory>
#include <optional>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/spec/limits.hpp"
#include "core/program/check.hpp"
#include "core/program/format.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"

namespace stagecraft::cli {

namespace {

struct ProgramArgs {
  std::string model, training, plan;
  int64_t rank = -1;
  bool json = false;
  bool check = false;
};

int run_program(const ProgramArgs& a) {
  using spec::ConfigKind;
  const spec::Model m = load_model_arg(a.model);
  const spec::Training t = spec::load_training(spec::resolve_config(ConfigKind::kTraining, a.training));
  warn_training_length(m, &t);
  const spec::Plan p = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, a.plan));
  const program::Program prog = program::lower(m, t, p);
  if (a.rank >= prog.placement.world()) {
    std::cerr << "stagecraft: error: --rank " << a.rank << ": expected a rank below the plan's "
              << prog.placement.world() << " ranks\n";
    return kBadInput;
  }
  if (a.check) program::check(prog);
  std::optional<int64_t> rank;
  if (a.rank >= 0) rank = a.rank;
  if (a.json) {
    std::cout << program::to_json(prog, rank).dump(1) << "\n";
  } else {
    program::print_program(std::cout, prog, rank);
  }
  return kOk;
}

}  // namespace

Subcommand add_program(CLI::App& root) {
  auto args = std::make_shared<ProgramArgs>();
  CLI::App* app = root.add_subcommand("program", "Print the lowered Program: each rank's instructions for one step");
  app->add_option("--model", args->model, "model file or bundled name")->required();
  app->add_option("--training", args->training, "training file or bundled name")->required();
  app->add_option("--plan", args->plan, "plan file or bundled name")->required();
  app->add_option("--rank", args->rank, "only this rank's instructions")->check(non_negative_int(spec::limits::kGpus - 1));
  app->add_flag("--check", args->check, "run the Program checks (matching, ordering, deadlock) first");
  app->add_flag("--json", args->json, "print one JSON document");
  return {app, [args]() { return run_program(*args); }};
}

}  // namespace stagecraft::cli
