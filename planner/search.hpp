// Search: the fastest plans that fit, for one Space.
//
//   1. Enumerate every candidate (in groups of (tp, pp, micro-batch), across threads and MPI
//      ranks) and prune with the analytic bounds of prune.hpp: identical Programs and useless
//      offload (dominated), memory lower bound above the GPU (memory). Survivors keep their
//      step-time lower bound; they are sorted by (bound, enumeration order).
//   2. Branch and bound, best bound first, in batches of a fixed size: at the start of a batch
//      the K-th best simulated step time T_K, the best T_1 and the Pareto front are frozen; a
//      survivor is pruned when its bound exceeds T_K and it cannot join the Pareto front within
//      the window (bound above (1 + w)·T_1, or a front plan is at least as fast as its bound and
//      at least as small as its memory bound); the rest of the batch is lowered and simulated in
//      parallel (plans already in the results store are reused); a plan whose contention-free
//      step time (sim::contention_free_step_s, after lowering) already rules it out is not
//      simulated.
//      The search stops at the first batch whose smallest bound exceeds both T_K and (1 + w)·T_1.
//   Because the pruning decisions depend only on results of earlier batches, the results and
//   the counts are the same whatever the number of threads or ranks. Pruning is exact: a pruned
//   plan's simulated time would be at least its bound, above the K-th best.
//   3. Results: the top K (tokens/s descending, plan key ascending), the Pareto front of step
//      time vs peak memory over the simulated plans that fit (exact for step times within
//      (1 + w)·T_1), the counts, and per-axis statistics for the explanation.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "planner/result.hpp"
#include "planner/shard.hpp"
#include "sim/model_error.hpp"
#include "sim/uncertainty.hpp"
#include "planner/space.hpp"

namespace stagecraft::planner {

struct Progress {
  int64_t evaluated = 0;        // simulated so far (incl. reused)
  int64_t remaining = 0;        // survivors still under the current cut-off (an upper bound on work left)
  int64_t survivors = 0;
  double elapsed_s = 0;
  double rate = 0;              // simulations per second
  double eta_s = 0;
  double best_step_time_s = 0;  // 0 before the first plan that fits
  Counts counts;                // the search's counters so far: candidates, pruned by each rule, simulated
};

struct SearchOptions {
  int64_t top_k = 10;
  int threads = 0;                      // 0: one per hardware thread
  int64_t batch = 64;                   // fixed: the results must not depend on the thread count
  double pareto_window = 0.1;           // the Pareto front is exact up to (1 + w) × the best step time
  std::string db;                       // results store ("" for none)
  bool resume = false;
  std::string version = "unknown";      // recorded in the store
  const std::atomic<bool>* cancel = nullptr;           // set (e.g. by SIGINT) to stop after the batch in flight
  std::function<void(const Progress&)> on_progress;    // rank 0, after every batch
  // Rank 0, after every batch, before on_progress: the plans that batch simulated (or reused from
  // the store), in evaluation order — what a live view appends. The span is valid during the call.
  // Both callbacks run on the thread that called search().
  std::function<void(std::span<const Evaluated> fresh, const Progress&)> on_batch;
  Shard* shard = nullptr;               // null: this process alone
};

// Per axis value ("tp" -> "8"): how much of the space it holds and how far it got.
struct AxisCell {
  int64_t candidates = 0;
  int64_t pruned_memory = 0;
  int64_t min_memory_lb = INT64_MAX;      // over candidates not dominated
  double min_step_lb = 0;                 // over survivors (0: none survived)
  bool has_survivor = false;
};
using AxisStats = std::map<std::string, std::map<std::string, AxisCell>>;
// The value a candidate takes on each axis the explanation compares.
std::vector<std::pair<std::string, std::string>> axis_values(const Candidate& c);

struct SearchResult {
  std::vector<Evaluated> top;        // best first, only plans that fit
  std::vector<Evaluated> pareto;     // increasing step time, decreasing peak memory
  std::vector<Evaluated> evaluated;  // every simulated plan, in evaluation order
  Counts counts;
  AxisStats axes;
  double seconds = 0, enumerate_seconds = 0;
  int64_t survivors = 0;
  bool interrupted = false;
  int64_t capacity_bytes = 0;
  int64_t min_memory_lb = 0;         // the smallest memory bound over the space (non-dominated)
  std::string min_memory_key;        // the plan that has it
  std::string reason;                // when `top` is empty: why, in words
  std::vector<std::string> warnings; // plans that could not be lowered or simulated, and why (never expected)
  int64_t search_id = -1;            // in the store
  bool resumed = false;
};

SearchResult search(const Space& space, const SearchOptions& options);

// The Pareto front of step time against peak memory over the plans that fit (increasing step time,
// decreasing memory), by the rule the search keeps its front with (a results store's plans, read
// back, get the front the search had).
std::vector<Evaluated> pareto_front(const std::vector<Evaluated>& plans);
void add_to_front(std::vector<Evaluated>& front, const Evaluated& e);

// Lowers and simulates one plan on the space's model, training and cluster.
Metrics simulate_plan(const Space& space, const spec::Plan& plan);

// Error bars (sim/uncertainty.hpp) of the plans heading the first `n` rows of the top table
// (planner/report.hpp table_rows: bucket variants of one step time share a row), from the cluster
// profile's parameter uncertainties; empty bars when the profile carries none. Whether the best
// plan is distinguishable from another is sim::distinguishable(rows[0].bars, rows[i].bars).
struct RowErrorBars {
  std::size_t index = 0;   // into `top`
  int row = 0;             // 1-based, as the table numbers it
  sim::ErrorBars bars;
};
std::vector<RowErrorBars> top_error_bars(const Space& space, const std::vector<Evaluated>& top, std::size_t n);
// The best plan's range, and which of the next rows it cannot be told apart from.
std::vector<std::string> error_bar_lines(const std::vector<Evaluated>& top, const std::vector<RowErrorBars>& bars);
// What published runs measured against their simulation (sim/model_error.hpp), for the framework
// and each ZeRO class among the first 5 rows of `top`, with the rows each line speaks for; the runs
// on `gpu`'s family first (the cluster's gpu.name; empty: every GPU alike). A mixture-of-experts
// `model`'s rows are their own class (spec::validation_class).
std::vector<std::string> model_error_lines(const std::vector<Evaluated>& top, const spec::Model& model, spec::Framework framework,
                                           const sim::ValidationRecord& record, const std::string& gpu = "");

}  // namespace stagecraft::planner
