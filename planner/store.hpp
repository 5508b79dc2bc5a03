// Results store: a search and every plan it evaluated, in SQLite (docs/planner.md, "Results
// store"). Each batch of evaluated plans is written in one transaction (WAL journal), so a process
// killed mid-search loses only the batch in flight; --resume reuses every committed plan.
//
// Schema (schema_version 1):
//   meta(key TEXT PRIMARY KEY, value TEXT)                       schema_version, created_by
//   searches(id INTEGER PRIMARY KEY, status 'running'|'complete'|'interrupted', version,
//            started_at, updated_at, finished_at (UTC ISO 8601), inputs_hash, inputs (JSON: model,
//            cluster, training, gpus, limits), model, cluster, gpus, global_batch, top_k,
//            candidates, dominated, pruned_memory, pruned_bound, evaluated, reused, fitting, seconds)
//   plans(search_id, key, tp, pp, dp, micro_batch, micro_batches, schedule, virtual_stages,
//         sequence_parallel, recompute, zero_stage, offload, overlap_comm, reduce_bucket,
//         prefetch_bucket, max_live_parameters, split, fits, failed, step_time_s, tokens_per_s,
//         mfu, model_tflops_per_gpu, hardware_tflops_per_gpu, bubble_fraction, compute_s,
//         exposed_comm_s, bubble_s, tp_comm_s, pp_comm_s, dp_comm_s, peak_memory_bytes, peak_rank,
//         mem_params, mem_grads, mem_optimizer, mem_activations, mem_buffers, mem_reserved,
//         capacity_bytes, lower_bound_s, memory_lower_bound_bytes, plan (JSON), metrics (JSON,
//         "simulate --json"), evaluated_at;  PRIMARY KEY (search_id, key))
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/result.hpp"

struct sqlite3;

namespace stagecraft::planner {

// A store that cannot be opened, read or written; names the file and what failed.
class StoreError : public std::runtime_error {
 public:
  StoreError(const std::string& file, const std::string& detail);
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

struct StoredSearch {
  int64_t id = 0;
  std::string status, version, started_at, finished_at, model, cluster;
  int64_t gpus = 0, global_batch = 0, top_k = 0;
  Counts counts;
  double seconds = 0;
  nlohmann::json inputs;
};

struct StoredPlan {
  std::string key;
  nlohmann::json plan, metrics;
  Metrics numbers;
};

class Store {
 public:
  // Opens (creating the schema when writable) the database at `path`.
  Store(const std::string& path, bool read_only);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // A new search row, or with `resume` the latest one with the same inputs hash (its id;
  // *resumed says which). inputs: Space::to_json().
  int64_t start_search(const nlohmann::json& inputs, const std::string& version, int64_t top_k, bool resume,
                       bool* resumed);
  // key -> metrics of every plan stored for a search.
  std::unordered_map<std::string, Metrics> load_metrics(int64_t search_id);
  // One transaction: the rows (ignored when the key is already stored) and the counters.
  void record(int64_t search_id, const std::vector<const Evaluated*>& rows, const Counts& counts, double seconds);
  void finish(int64_t search_id, const std::string& status, const Counts& counts, double seconds);

  std::vector<StoredSearch> searches();
  // Plans of a search ordered best first (fits, tokens_per_s desc, key); `where` is an SQL
  // expression over the plans columns (empty: all), `limit` <= 0: all.
  std::vector<StoredPlan> plans(int64_t search_id, const std::string& where, int64_t limit);

  const std::string& path() const { return path_; }
  static std::string hash(const std::string& text);   // FNV-1a 64, hex

 private:
  void exec(const std::string& sql);
  void open(const std::string& target, int flags);
  void init(bool read_only);
  nlohmann::json parse_column(const std::string& text, const char* column) const;
  int64_t check_identity();
  [[noreturn]] void fail(const std::string& what) const;

  // The columns a plan row is read with: kPlanColumns, the cp time given as 0 on a version-1
  // store opened read-only (writing migrates it)
  std::string plan_columns() const;

  std::string path_;
  sqlite3* db_ = nullptr;
  int64_t schema_ = 0;   // the store's schema version once opened
};

}  // namespace stagecraft::planner
