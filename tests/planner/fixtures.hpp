// Small, fast search cases for the planner tests, from the bundled configs (configs/) plus a
// training made in code, and helpers to run a search and simulate a candidate.
#pragma once

#include <string>
#include <vector>

#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "planner/prune.hpp"
#include "planner/search.hpp"
#include "planner/space.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::test {

inline spec::Model bundled_model(const std::string& name) {
  return spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, name));
}

inline spec::Cluster bundled_cluster(const std::string& name, int64_t nodes) {
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, name));
  c.nodes = nodes;
  return c;
}

inline spec::Training training(int64_t global_batch, spec::Dtype dtype = spec::Dtype::kBf16) {
  spec::Training t;
  t.attention = "unfused";  // the hand derivations time the score GEMMs
  t.global_batch = global_batch;
  t.dtype = dtype;
  t.file = "test-training";
  return t;
}

// GPT-3 1.3B on one H100 node (8 GPUs), global batch 64: ~150,000 candidates where memory,
// dominance and both step-time bounds all prune something.
inline planner::Space medium_space(planner::SpaceLimits limits = {}) {
  return planner::Space(bundled_model("gpt3-1.3b"), bundled_cluster("dgx-h100-ndr", 1), training(64), 8, std::move(limits));
}

// Every candidate of a space with its verdict and bounds, in enumeration order.
struct Scored {
  planner::Candidate candidate;
  planner::Verdict verdict;
  planner::Estimate estimate;
};

inline std::vector<Scored> enumerate(const planner::Space& space) {
  std::vector<Scored> out;
  planner::Pruner pruner(space);
  for (const planner::Group& g : planner::groups(space)) {
    pruner.enumerate(g, [&](const planner::Candidate& c, planner::Verdict v, const planner::Estimate& e) {
      out.push_back({c, v, e});
    });
  }
  return out;
}

inline sim::SimResult simulate(const planner::Space& space, const planner::Candidate& c) {
  return sim::simulate(program::lower(space.model(), space.training(), space.plan(c)), space.cluster());
}

inline std::vector<std::string> keys(const std::vector<planner::Evaluated>& list) {
  std::vector<std::string> out;
  for (const planner::Evaluated& e : list) out.push_back(e.key);
  return out;
}

}  // namespace stagecraft::test
