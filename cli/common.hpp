// Shared plumbing of the subcommands: registration, error-to-exit-status mapping (SCHEMAS.md:
// 0 success, 1 impossible request, 2 bad input). Numbers are formatted by core/text/format.hpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/training.hpp"
#include "core/text/format.hpp"
#include "planner/deepspeed.hpp"

namespace stagecraft::cli {

using text::short_bytes;
using text::short_count;
using text::with_commas;

enum ExitCode : int { kOk = 0, kImpossible = 1, kBadInput = 2 };

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Subcommand add_info(CLI::App& root);
Subcommand add_demo(CLI::App& root);
Subcommand add_program(CLI::App& root);
Subcommand add_run(CLI::App& root);
Subcommand add_simulate(CLI::App& root);
Subcommand add_search(CLI::App& root);    // search.cpp
Subcommand add_results(CLI::App& root);   // results.cpp
Subcommand add_sweep(CLI::App& root);     // sweep.cpp
Subcommand add_export(CLI::App& root);    // export.cpp
Subcommand add_eval(CLI::App& root);      // eval.cpp
Subcommand add_compare(CLI::App& root);   // compare.cpp
Subcommand add_calibrate(CLI::App& root); // calibrate.cpp
Subcommand add_probe(CLI::App& root);     // probe.cpp

// Loads a model argument (file or bundled name) and prints its warnings (keys of a Hugging Face
// config that are read but not modelled) on stderr, once.
spec::Model load_model_arg(const std::string& arg);
// Prints the model's training-length note (a Hugging Face config planned at a default length)
// unless `t` (nullptr: none) sets the length.
void warn_training_length(const spec::Model& m, const spec::Training* t);

// --seq-len, --global-batch and --dtype of simulate, search and run: values that replace the
// training file's (SCHEMAS.md, "Command line"). `batch_and_dtype` false adds --seq-len only.
struct TrainingArgs {
  int64_t seq_len = 0;
  int64_t global_batch = 0;
  std::string dtype;
  CLI::Option* global_batch_option = nullptr;
  CLI::Option* dtype_option = nullptr;
};
void add_training_options(CLI::App* app, TrainingArgs& a);
// --set KEY=VALUE (repeatable): what-if overrides of cluster and training fields (core/spec/overrides.hpp).
void add_set_option(CLI::App* app, std::vector<std::string>& sets);
// The training with the options given on the command line in place (recorded for messages).
spec::Training with_training_args(spec::Training t, const TrainingArgs& a);

// --tokens, --gpu-hour-price and --currency of simulate and search: a token budget to price, and
// a price per GPU-hour in place of the cluster file's (sim/run_cost.hpp).
struct CostArgs {
  std::string tokens;           // "1T", "300B", "2e12"; "" = no budget
  double gpu_hour_price = 0;    // 0 = the cluster file's price, if any
  std::string currency;         // "" = the cluster file's, else USD
};
void add_cost_options(CLI::App* app, CostArgs& a);
// The token budget (nullopt without --tokens) and the cluster's price as the options set it.
std::optional<double> token_budget(const CostArgs& a);
void apply_price(spec::Cluster& c, const CostArgs& a);

// What the Hugging Face Trainer would fill a DeepSpeed config's "auto" values with for model `m`:
// TrainingArguments' defaults and the model's hidden size (planner/deepspeed.hpp).
planner::HfTrainerArgs hf_args(const spec::Model& m);

// Interrupted work (docs/reliability.md, "Interrupted work"): search, sweep, demo and run stop at
// the first SIGINT or SIGTERM (a Ctrl-C, a scheduler's preemption, mpirun passing either on) once
// the piece in flight is done (a batch of plans, a sweep's cells, a training step), report and keep
// what they finished (a search's store marked interrupted, a run's checkpoint saved with --save),
// and exit 128 + the signal's number (130, 143) as a shell does for a process a signal ended, so a
// partial answer is never mistaken for a whole one. A second signal ends the process at once.
// "stagecraft: rank R: error: <what>" on stderr in one write: mpirun forwards each rank's stderr as
// it arrives and prints its own abort banner, so a line written piece by piece (std::cerr's <<
// are unbuffered) can be cut in two by it.
void rank_error(int64_t rank, const std::string& what);

void install_interrupt_handler();
const std::atomic<bool>& interrupted();
// 128 + the first signal's number once interrupted; 0 before.
int interrupted_exit_code();

}  // namespace stagecraft::cli
