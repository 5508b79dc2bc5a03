// The MPI tests' harness around the single-rank oracle (STYLE.md, llm.c): lower a test plan for
// the tiny model, train it for some steps on a fresh MpiCommunicator (or, for the oracle, in-process
// on one rank with a LocalCommunicator), and compare losses and gathered parameters.
#pragma once

#include <cmath>
#include <vector>

#include "core/program/lower.hpp"
#include "core/trace/trace.hpp"
#include "executor/comm/local.hpp"
#include "executor/comm/mpi.hpp"
#include "executor/model_params.hpp"
#include "executor/runner.hpp"
#include "plans.hpp"

namespace stagecraft::executor::test {

// The sanitized build (3-5x slower) runs every plan for 2 steps: the second is the first with
// optimizer state, moments and updated weights, so every code path of a step runs; it checks memory
// and undefined behaviour. The normal build checks the equivalence over 5 steps, to 1e-5 relative.
#if defined(STAGECRAFT_SANITIZED)
inline constexpr int kSteps = 2;
#else
inline constexpr int kSteps = 5;
#endif
inline constexpr double kTolerance = 1e-5;

struct Outcome {
  std::vector<double> losses;
  ModelParams params;
};

inline program::Program lower(const PlanSpec& spec, const spec::Model& model = tiny_model()) {
  return program::lower(model, tiny_training(spec.framework), make_plan(spec));
}

inline Corpus corpus_for(const program::Program& prog) { return Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 11); }

// Two traced steps of `prog` on `comm`, every rank's events and memory gathered (the trace on rank 0).
inline trace::Trace traced_two_steps(const program::Program& prog, MpiCommunicator& comm) {
  const Corpus corpus = corpus_for(prog);
  RunnerOptions o;
  o.trace = true;
  Runner runner(prog, comm, corpus, o);
  runner.step();
  runner.step();
  return runner.tracer().gather(comm, runner.memory().samples(), prog, "cpu-local");
}

inline Outcome train(Runner& runner, int steps) {
  Outcome out;
  for (int s = 0; s < steps; ++s) out.losses.push_back(runner.step().loss);
  out.params = gather_model_params(runner);
  return out;
}

inline Outcome run_distributed(const PlanSpec& spec, int steps, const spec::Model& model = tiny_model()) {
  const program::Program prog = lower(spec, model);
  const Corpus corpus = corpus_for(prog);
  MpiCommunicator comm(prog.placement);
  Runner runner(prog, comm, corpus, {});
  return train(runner, steps);
}

inline Outcome run_single_rank(int steps, const spec::Model& model = tiny_model()) {
  const program::Program prog = lower(reference_plan(), model);
  const Corpus corpus = corpus_for(prog);
  LocalCommunicator comm;
  Runner runner(prog, comm, corpus, {});
  return train(runner, steps);
}

struct Errors {
  double loss = 0;     // largest relative loss difference over the steps
  double params = 0;   // ||p - ref|| / ||ref||
  double tied = 0;     // ||copy - table|| / ||table|| of the tied embedding copy
  bool nan = false;
};

inline double relative_norm(const std::vector<float>& a, const std::vector<float>& b, bool& nan) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (std::isnan(a[i])) nan = true;
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

inline Errors compare(const Outcome& got, const Outcome& ref, const spec::Model& model) {
  Errors e;
  for (std::size_t s = 0; s < ref.losses.size(); ++s) {
    const double d = std::abs(got.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]);
    if (!(d <= e.loss)) e.loss = d;  // a NaN loss is the worst error
    if (std::isnan(got.losses[s])) e.nan = true;
  }
  e.params = relative_norm(got.params.values, ref.params.values, e.nan);
  if (!got.params.tied_copy.empty()) {
    const ParamLayout layout(model);  // named: find() returns a reference into it
    const TensorSlot& wte = layout.find("embedding.wte");
    const std::vector<float> table(got.params.values.begin() + wte.offset,
                                   got.params.values.begin() + wte.offset + wte.size());
    e.tied = relative_norm(got.params.tied_copy, table, e.nan);
  }
  return e;
}

}  // namespace stagecraft::executor::test
