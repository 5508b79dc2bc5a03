// Metrics: what a simulation says about one plan — the one result type that the simulator
// returns, the planner ranks, exchanges between ranks as bytes and stores as SQLite columns, and
// every reporter prints (google/benchmark's habit: one result model, several reporters):
//   * JSON: to_json, the SCHEMAS.md "simulate --json" keys (also each plan's
//     "metrics" in "search --json" and the results store);
//   * text: sim/report.hpp (the `simulate` report and the cells of the planner's tables);
//   * SQLite: planner/store.cpp, one column per number.
// Trivially copyable. Units: seconds, bytes, TFLOP/s per GPU; fractions in [0, 1].
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/spec/plan.hpp"
#include "core/trace/memory.hpp"

namespace stagecraft::sim {

// Where a step's time goes, mean over the simulated ranks (a partition of the step:
// compute + exposed communication + bubble = step time), and how long each communication lane
// was busy.
struct TimeBreakdown {
  double compute_s = 0, exposed_comm_s = 0, bubble_s = 0;
  double tp_s = 0, pp_s = 0, dp_s = 0, cp_s = 0, ep_s = 0;
};

struct Metrics {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0;      // 72-formula FLOPs (Narayanan et al.), no recompute
  double hardware_tflops_per_gpu = 0;   // what the GPUs execute, recompute included
  double mfu = 0;                       // model FLOP/s over the dtype's peak
  double bubble_fraction = 0;           // time.bubble_s / step_time_s
  TimeBreakdown time;
  int64_t peak_memory_bytes = 0;        // max over ranks and time
  int64_t peak_rank = 0;
  trace::MemoryBytes memory;            // by kind, at the peak rank and moment
  int64_t capacity_bytes = 0;           // the GPU's memory
  int64_t simulated_ranks = 0;
  int64_t events = 0;                   // instructions the simulation executed
  bool fits = false;                    // peak_memory_bytes <= capacity_bytes
  bool failed = false;                  // lowering or simulation threw (never expected)
  // data-parallel bytes a GPU sends to other nodes per micro-batch (costs.hpp
  // dp_internode_bytes_per_micro_batch): what ZeRO across nodes cuts
  double dp_internode_bytes = 0;
  // expert-parallel all-to-all bytes a GPU sends a step to GPUs of its own node and of other
  // nodes (costs.hpp ep_bytes_per_step): what the ep size moves between NVLink and the network
  double ep_intranode_bytes = 0, ep_internode_bytes = 0;
};

// Why a plan does not fit, naming the largest memory term; empty when it fits or failed.
std::string fit_reason(const Metrics& m);

// SCHEMAS.md keys: step_time_s, tokens_per_s, model_tflops_per_gpu, hardware_tflops_per_gpu,
// mfu, bubble_fraction, fits, peak_memory_bytes, memory{...}, time{...}, plan, and fit_reason
// when it does not fit.
nlohmann::json to_json(const Metrics& m, const spec::Plan& plan);

}  // namespace stagecraft::sim
