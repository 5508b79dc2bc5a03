// train(): a whole run on the CPU executor, as `stagecraft run` performs it — build the Runner,
// optionally resume from a checkpoint, run the steps, optionally trace and save — returning one
// report (SCHEMAS.md "run --json" is printed from it by the command line). Collective over the
// communicator; every rank returns, rank 0's report carries the gathered per-rank values.
// Nothing here prints: progress goes to the on_step callback.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/program/program.hpp"
#include "core/io/safetensors.hpp"
#include "executor/checkpoint.hpp"
#include "executor/runner.hpp"

namespace stagecraft::executor {

struct TrainOptions {
  int64_t steps = 10;
  RunnerOptions runner;
  CheckpointContext data;     // recorded in / checked against checkpoints
  std::string resume_dir;     // empty: start from the initial parameters
  std::string save_dir;       // empty: no checkpoint at the end
  int64_t save_every = 0;     // > 0 (with save_dir): also a checkpoint after every save_every-th step
  // Set (by SIGINT or SIGTERM) on any rank: every rank stops after the step in flight, and the run
  // ends as if it had been asked for the steps done (checkpoint, trace, report); `interrupted` says so.
  const std::atomic<bool>* cancel = nullptr;
  std::string save_hf_dir;    // empty: no Hugging Face folder at the end (rank 0 writes it)
  io::safetensors::Dtype save_hf_dtype = io::safetensors::Dtype::kF32;
  std::string trace_path;     // empty: no trace (rank 0 writes it)
  std::string cluster = "cpu-local";  // the profile describing the machines, recorded in the trace
  std::function<void(const StepStats&)> on_step;  // every rank, after each step
};

struct TrainReport {
  int64_t first_step = 0;               // 0, or the checkpoint's step
  std::vector<double> losses;           // one per step run
  std::vector<double> step_seconds;
  double tokens_per_s = 0;              // global tokens / step time, over all steps but the first when > 1
  std::vector<int64_t> peak_memory_bytes;  // rank 0: every rank's high-water mark
  std::string params_checksum;          // rank 0: FNV-1a of the gathered model parameters
  double compute_seconds = 0;           // rank 0's host time inside compute instructions (runner.hpp StepStats)
  bool interrupted = false;             // stopped by `cancel` before the steps asked for
  std::vector<int64_t> saved_at;        // the steps (counted from 1, resumed steps included) checkpointed
  // fp16 (dynamic loss scaling): each step's loss scale, and the steps (counted from 1) whose
  // gradients overflowed, so their optimizer step was skipped; empty for other dtypes
  std::vector<double> loss_scales;
  std::vector<int64_t> skipped;
};

TrainReport train(const program::Program& prog, Communicator& comm, const Corpus& corpus, const TrainOptions& options);

}  // namespace stagecraft::executor
