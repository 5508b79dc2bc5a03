#include "executor/train.hpp"

#include "core/spec/error.hpp"
#include "executor/errors.hpp"
#include "executor/hf_weights.hpp"
#include "executor/model_params.hpp"

namespace stagecraft::executor {

namespace {

double tokens_per_second(const program::Program& prog, const std::vector<double>& seconds) {
  const std::size_t first = seconds.size() > 1 ? 1 : 0;  // the first step warms caches and allocators
  double total = 0;
  for (std::size_t i = first; i < seconds.size(); ++i) total += seconds[i];
  const double tokens = static_cast<double>(prog.tokens_per_step());
  return total > 0 ? tokens * static_cast<double>(seconds.size() - first) / total : 0;
}

}  // namespace

TrainReport train(const program::Program& prog, Communicator& comm, const Corpus& corpus, const TrainOptions& options) {
  if (!options.save_dir.empty()) check_save_target(prog, options.save_dir, options.data);  // before any work
  RunnerOptions ro = options.runner;
  ro.trace = !options.trace_path.empty();
  Runner runner(prog, comm, corpus, ro);
  if (!options.resume_dir.empty()) load_checkpoint(runner, options.resume_dir, options.data);
  TrainReport report;
  report.first_step = runner.steps_done();
  for (int64_t s = 0; s < options.steps; ++s) {
    const StepStats stats = runner.step();
    report.losses.push_back(stats.loss);
    report.step_seconds.push_back(stats.seconds);
    report.compute_seconds += stats.compute_seconds;
    if (runner.loss_scale_state()) report.loss_scales.push_back(stats.loss_scale);
    if (stats.skipped) report.skipped.push_back(stats.step + 1);
    if (options.on_step) options.on_step(stats);
    const bool last = s + 1 == options.steps;
    // whether any rank was asked to stop: collective, so every rank stops after the same step
    if (!last && options.cancel != nullptr) {
      report.interrupted = comm.all_reduce_max(options.cancel->load() ? 1.0 : 0.0) > 0;
      if (report.interrupted) break;
    }
    if (!last && options.save_every > 0 && !options.save_dir.empty() && (s + 1) % options.save_every == 0) {
      save_checkpoint(runner, options.save_dir, options.data);
      report.saved_at.push_back(runner.steps_done());
    }
  }
  report.tokens_per_s = tokens_per_second(prog, report.step_seconds);
  for (int64_t peak : comm.all_gather(runner.memory().peak())) report.peak_memory_bytes.push_back(peak);
  const ModelParams params = gather_model_params(runner);
  if (comm.rank() == 0) report.params_checksum = checksum(params.values);
  if (!options.save_dir.empty()) {
    save_checkpoint(runner, options.save_dir, options.data);
    report.saved_at.push_back(runner.steps_done());
  }
  if (ro.trace) {
    const trace::Trace t = runner.tracer().gather(comm, runner.memory().samples(), prog, options.cluster);
    if (comm.rank() == 0) {
      try {
        trace::write_trace(t, options.trace_path);
      } catch (const spec::SpecError& e) {
        throw OutputError(std::string("cannot write the trace: ") + e.what());
      }
    }
  }
  // After every collective of the run: a failure here is rank 0's alone (OutputError).
  if (comm.rank() == 0 && !options.save_hf_dir.empty()) {
    try {
      hf::write_folder(prog.model, params.values, options.save_hf_dir, options.save_hf_dtype);
    } catch (const spec::SpecError& e) {
      throw OutputError(std::string("cannot write the Hugging Face folder: ") + e.what());
    }
  }
  return report;
}

}  // namespace stagecraft::executor
