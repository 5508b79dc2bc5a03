// stagecraft eval --weights DIR --data FILE [--model M] [--sequences N] [--seq-len T]
//                 [--data-format uint16|text] [--plan P] [--json]
// The mean cross-entropy of a Hugging Face checkpoint folder's model on the first N windows of
// T + 1 tokens of FILE (window j: tokens [j*T, j*T + T], the sequential order of `run
// --data-order sequential`), and each window's, forward only (executor/evaluate.hpp). Under
// mpirun the windows are dealt over the ranks, each holding the whole model; with --plan, the
// plan's layout (tp, pp, dp, ZeRO stage, schedule) runs a forward-only Program of it instead
// (program::LowerOptions::forward_only), one window per micro-batch, N / dp per replica, each
// rank reading only the checkpoint bytes it keeps. Bad input (a checkpoint that does not match the
// model, a data file with ids past the vocabulary) exits 2 before anything is computed.
#include <cmath>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "cli/memory_check.hpp"
#include "core/io/file.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/spec/plan.hpp"
#include "executor/errors.hpp"
#include "executor/evaluate.hpp"
#include "executor/hf_weights.hpp"
#include "executor/model/layers.hpp"
#include "executor/runner.hpp"
#include "executor/world.hpp"

namespace stagecraft::cli {

namespace {

struct EvalArgs {
  std::string model, weights, data, data_format, log_probs, plan;
  int64_t sequences = 8;
  int64_t seq_len = 0;
  bool json = false;
  bool skip_memory_check = false;
};

constexpr const char* kMemoryAdvice =
    "score it under a plan over more ranks (--plan with pp, tp or ZeRO-3, under mpirun), or --skip-memory-check";

int print_result(const EvalArgs& a, const spec::Model& m, const executor::EvalResult& r, int64_t ranks, int64_t bytes_read) {
  if (a.json) {
    const nlohmann::json j = {{"model", m.name},
                              {"weights", a.weights},
                              {"data", a.data},
                              {"windows", a.sequences},
                              {"seq_len", m.seq_len},
                              {"tokens", r.tokens},
                              {"mean_loss", r.mean},
                              {"perplexity", std::exp(r.mean)},
                              {"losses", r.losses},
                              {"ranks", ranks},
                              {"plan", a.plan.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.plan)},
                              {"bytes_read", bytes_read}};
    std::cout << j.dump(1) << "\n";
    return kOk;
  }
  std::cout << "stagecraft eval: " << m.name << " from " << a.weights << " on " << a.data << ": " << a.sequences
            << " window(s) of " << m.seq_len << " tokens, " << ranks << " rank(s)"
            << (a.plan.empty() ? "" : ", plan " + a.plan + " (forward only)") << "\n";
  std::cout.precision(6);
  std::cout << "mean cross-entropy " << r.mean << " nats/token over " << r.tokens << " tokens (perplexity "
            << std::exp(r.mean) << ")\n";
  for (std::size_t j = 0; j < r.losses.size(); ++j) std::cout << "  window " << j << "  " << r.losses[j] << "\n";
  return kOk;
}

// The plan's forward-only Program, one step: window j is sequence j of step 0 (dp rank j / m,
// micro-batch j mod m), so the micro-batch losses in dp-major order are the windows' losses.
int run_plan_eval(const EvalArgs& a, const executor::World& world, const program::Program& prog,
                  const executor::Corpus& corpus, std::shared_ptr<executor::hf::HfReader> reader) {
  executor::EvalResult r;
  int64_t bytes = 0;
  try {
    std::unique_ptr<executor::Communicator> comm = world.communicator(prog.placement);
    if (!a.skip_memory_check && !memory_fits_everywhere(*comm, memory_shortfall(prog, "cpu-local", world.size(), kMemoryAdvice))) {
      return kImpossible;
    }
    executor::RunnerOptions o;
    o.init_from = reader;
    executor::Runner runner(prog, *comm, corpus, o);
    const executor::StepStats s = runner.step();
    r.losses = s.micro_batch_losses;
    r.mean = s.loss;
    r.tokens = prog.tokens_per_step();
    bytes = static_cast<int64_t>(comm->all_reduce_sum(static_cast<double>(reader->bytes_read())));
  } catch (const executor::NonFiniteError& e) {
    rank_error(world.rank(), e.what());
    return world.abort(kImpossible);
  } catch (const std::exception& e) {
    rank_error(world.rank(), e.what());
    return world.abort(3);
  }
  if (world.rank() != 0) return kOk;
  return print_result(a, prog.model, r, world.size(), bytes);
}

// The forward-only Program of `plan`'s layout over `windows` windows, micro-batches of one window.
program::Program eval_program(const spec::Model& m, spec::Plan plan, int64_t windows) {
  if (windows % plan.dp != 0) {
    throw spec::SpecError("--sequences", "", "expected a multiple of the plan's dp " + std::to_string(plan.dp) + " (" +
                                                 plan.file + "), got " + std::to_string(windows));
  }
  plan.micro_batch = 1;
  plan.micro_batches = windows / plan.dp;
  spec::Training t;
  t.global_batch = windows;
  t.seq_len = m.seq_len;
  t.dtype = executor::kCpuDtype;
  t.attention = "unfused";
  t.source = "stagecraft eval: " + std::to_string(windows) + " windows";
  if (const std::string why = executor::plan_unsupported(m, plan); !why.empty()) throw spec::SpecError(plan.file, "", why);
  program::LowerOptions o;
  o.forward_only = true;
  return program::lower(m, t, plan, o);
}

int run_eval(const EvalArgs& a) {
  const executor::World world;
  auto fail = [&](const std::string& message) {
    if (world.rank() == 0) std::cerr << "stagecraft: error: " << message << std::endl;
    return kBadInput;
  };
  spec::Model m;
  std::optional<program::Program> prog;
  std::shared_ptr<executor::hf::HfReader> reader;
  std::vector<float> params;
  std::optional<executor::Corpus> corpus;
  std::unique_ptr<executor::Communicator> comm;  // the windows' ranks (no plan)
  int64_t bytes_read = 0;
  try {
    m = load_model_arg(a.model.empty() ? a.weights + "/config.json" : a.model);
    if (a.seq_len > 0) {
      if (m.max_positions > 0 && a.seq_len > m.max_positions) {
        throw spec::SpecError("--seq-len", "", "expected at most the model's " + std::to_string(m.max_positions) +
                                                   " positions (" + (m.file.empty() ? m.name : m.file) + "), got " +
                                                   std::to_string(a.seq_len));
      }
      m.seq_len = a.seq_len;
    }
    if (const std::vector<std::string> missing = executor::unsupported_features(m); !missing.empty()) {
      std::string list;
      for (const std::string& f : missing) list += (list.empty() ? "" : "; ") + f;
      throw spec::SpecError(m.file.empty() ? a.model : m.file, "", "the CPU executor does not run " + list);
    }
    if (!a.plan.empty()) {
      if (!a.log_probs.empty()) throw spec::SpecError("--log-probs", "", "writes one process's log-probabilities: drop --plan");
      const spec::Plan plan = spec::load_plan(spec::resolve_config(spec::ConfigKind::kPlan, a.plan));
      if (plan.world() != world.size()) {
        throw spec::SpecError(plan.file, "", "needs tp x pp x dp = " + std::to_string(plan.world()) + " ranks, this job has " +
                                                 std::to_string(world.size()) + "; start it with mpirun -n " +
                                                 std::to_string(plan.world()));
      }
      prog = eval_program(m, plan, a.sequences);
      reader = std::make_shared<executor::hf::HfReader>(prog->model, a.weights);
    }
    corpus = executor::Corpus::from_file(a.data, a.data_format, m.vocab, m.seq_len, 0);
    if (prog) return run_plan_eval(a, world, *prog, corpus->in_order(executor::DataOrder::kSequential, a.sequences), reader);
    if (!a.log_probs.empty() && world.size() != 1) {
      throw spec::SpecError("--log-probs", "", "writes one process's log-probabilities: run eval on one rank for it");
    }
    executor::hf::HfReader whole(m, a.weights);
    comm = world.communicator(program::Placement{1, 1, world.size()});
    if (!a.skip_memory_check) {
      // each rank holds the whole model and one window's forward: a one-rank plan's forward-only Program
      const program::Program one = eval_program(m, spec::plan_from_json(nlohmann::json::object(), "a one-rank plan"), 1);
      if (!memory_fits_everywhere(*comm, memory_shortfall(one, "cpu-local", world.size(), kMemoryAdvice))) return kImpossible;
    }
    const executor::ParamLayout layout(m);
    params.assign(static_cast<std::size_t>(layout.size()), 0.0f);
    for (const executor::TensorSlot& t : layout.tensors()) {
      whole.read(t, 0, t.size(), std::span<float>(params).subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size())));
    }
    bytes_read = whole.bytes_read();
  } catch (const spec::SpecError& e) {
    return fail(e.what());
  } catch (const executor::DataError& e) {
    return fail(e.what());
  } catch (const executor::NonFiniteError& e) {
    // weights holding NaN or inf: no answer to give (exit 1), and the error names the tensor
    if (world.rank() == 0) std::cerr << "stagecraft: error: " << e.what() << std::endl;
    return kImpossible;
  }
  executor::EvalResult r;
  try {
    std::vector<float> logp;
    r = executor::evaluate(m, params, *corpus, a.sequences, *comm, a.log_probs.empty() ? nullptr : &logp);
    if (!a.log_probs.empty()) {
      try {
        io::AtomicFile out(a.log_probs);
        out.write(logp.data(), logp.size() * sizeof(float));
        out.commit();
      } catch (const spec::SpecError& e) {
        std::cerr << "stagecraft: error: " << e.what() << std::endl;
        return kBadInput;
      }
    }
  } catch (const std::exception& e) {
    rank_error(world.rank(), e.what());
    return world.abort(3);
  }
  if (world.rank() != 0) return kOk;
  return print_result(a, m, r, world.size(), bytes_read);
}

}  // namespace

Subcommand add_eval(CLI::App& root) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* app = root.add_subcommand(
      "eval", "Score a Hugging Face checkpoint: the cross-entropy of the first windows of a token file (forward only)");
  app->add_option("--weights", args->weights, "Hugging Face checkpoint folder (config.json, model.safetensors or its index)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app->add_option("--data", args->data, "little-endian uint16 token ids, or text read as bytes")->required()->check(CLI::ExistingFile);
  app->add_option("--model", args->model, "model file or bundled name (default: the folder's config.json)");
  app->add_option("--data-format", args->data_format, "uint16 or text (default: text for a .txt file, else uint16)")
      ->check(CLI::IsMember({"uint16", "text"}));
  app->add_option("--sequences", args->sequences, "windows to score: window j is tokens [j*T, j*T + T] (default 8)")
      ->check(positive_int(int64_t{1} << 30));
  app->add_option("--seq-len", args->seq_len, "tokens per window T (default: the model's seq_len)")
      ->check(positive_int(int64_t{1} << 24));
  app->add_flag("--json", args->json, "print one JSON document: mean_loss, losses, tokens, ...");
  app->add_flag("--skip-memory-check", args->skip_memory_check,
                "start even when the simulator's memory estimate exceeds what the host has available");
  app->add_option("--plan", args->plan,
                  "score under this plan's layout (tp, pp, dp, ZeRO stage, schedule), forward only, one window per "
                  "micro-batch; run under mpirun -n tp x pp x dp");
  app->add_option("--log-probs", args->log_probs,
                  "also write log softmax of the logits here: float32 little-endian [sequences, T, vocab] (one rank)")
      ->check(writable_file());
  return {app, [args]() { return run_eval(*args); }};
}

}  // namespace stagecraft::cli
