// Shared by the traces tests: bundled configs lowered to a Program, and simulated traces of it.
#pragma once

#include <string>

#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"
#include "sim/simulator.hpp"
#include "traces/io/trace_io.hpp"

namespace stagecraft::test {

struct Scenario {
  spec::Model model;
  spec::Training training;
  spec::Plan plan;
  program::Program program;
};

inline Scenario bundled(const std::string& model, const std::string& training, const std::string& plan) {
  using spec::ConfigKind;
  Scenario s;
  s.model = spec::load_model(spec::resolve_config(ConfigKind::kModel, model));
  s.training = spec::load_training(spec::resolve_config(ConfigKind::kTraining, training));
  s.plan = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, plan));
  s.program = program::lower(s.model, s.training, s.plan);
  return s;
}

inline Scenario lowered(const spec::Model& m, const spec::Training& t, const spec::Plan& p) {
  return {m, t, p, program::lower(m, t, p)};
}

// cpu-local sized for the plan (as `simulate --nodes` does).
inline spec::Cluster cpu_cluster(int64_t gpus) {
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "cpu-local"));
  c.nodes = (gpus + c.gpus_per_node - 1) / c.gpus_per_node;
  return c;
}

inline sim::SimResult simulate(const Scenario& s, const spec::Cluster& c, bool full = false) {
  sim::SimOptions o;
  o.record_trace = true;
  o.full = full;
  return sim::simulate(s.program, c, o);
}

inline traces::Trace as_trace(const trace::Trace& t, const std::string& name) { return traces::from_core(t, name); }

}  // namespace stagecraft::test
