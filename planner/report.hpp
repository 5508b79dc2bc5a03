// Reporters of one search result (google/benchmark's habit: one result model, several
// reporters): the top-K table and the Pareto table for a terminal, and the SCHEMAS.md
// "search --json" document:
//   {"plans": [{"plan": {…}, "metrics": {…simulate --json keys…}}, …], "evaluated": N,
//    "pruned": N, "seconds": S, …}
// best first by tokens_per_s, only plans that fit; evaluated + pruned = the candidates. Added
// fields: "counts" (every counter), "pareto", "explanation", "baseline", "interrupted", "reason".
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/explain.hpp"
#include "planner/search.hpp"

namespace stagecraft::planner {

// A user's own plan (a DeepSpeed import), simulated for comparison.
struct Baseline {
  std::string name;     // where it came from, e.g. the ds_config path
  spec::Plan plan;
  Metrics metrics;
};

// Rows: rank, plan (one line), step time, tokens/s, MFU, bubble, exposed comm, peak memory /
// capacity. Plans that differ only in bucket sizes and simulate to the same step time share a
// row ("+N bucket variants").
std::string format_table(const std::vector<Evaluated>& plans);
// The index in `plans` of each row's plan (its first), in row order.
std::vector<std::size_t> table_rows(const std::vector<Evaluated>& plans);
// What the search did: candidates, pruned by each rule, simulated, time.
std::string format_counts(const SearchResult& r);
// "The best plan is 23.4% faster than <baseline> (x s → y s)."
std::string compare_with_baseline(const SearchResult& r, const Baseline& b);

nlohmann::json to_json(const SearchResult& r, const std::optional<Baseline>& baseline);

}  // namespace stagecraft::planner
