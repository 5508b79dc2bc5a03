// stagecraft run --model M --training T --plan P [--steps S] [--backend cpu|cuda] [--trace out.json]
//                [--json] [--save DIR [--save-every N]] [--resume DIR] [--seed N] [--lr X] [--init-from HF_DIR]
//                [--save-hf DIR [--save-hf-dtype fp32|bf16]]
// --init-from starts from a Hugging Face checkpoint folder (executor/hf_weights.hpp; --model then
// defaults to its config.json), --save-hf writes the trained parameters as one at the end.
// Real training of the plan on the CPU executor, one process per rank under mpirun (SCHEMAS.md
// "run --json"). Errors found before training (bad files, a world of the wrong size, a checkpoint
// that does not match) are printed once, by rank 0, and every rank exits 2; an error during
// training is printed by the rank that hit it, which then aborts the whole job (exit 3), so no
// rank waits forever for a peer that is gone.
// Test-only: STAGECRAFT_FAULT_RANK=r STAGECRAFT_FAULT_STEP=s makes rank r throw during step s
// (numbered from 1 as printed).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "cli/cuda_link.hpp"
#include "cli/memory_check.hpp"
#include "core/count/count.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/spec/cluster.hpp"
#include "executor/errors.hpp"
#include "executor/hf_weights.hpp"
#include "executor/model/layers.hpp"
#include "executor/train.hpp"
#include "executor/world.hpp"
#include "sim/models/compute.hpp"

namespace stagecraft::cli {

namespace {

struct RunArgs {
  std::string model, training, plan;
  int64_t steps = 10;
  std::string backend = "cpu";
  std::string trace, save, resume;
  int64_t save_every = 0;
  std::string init_from, save_hf, save_hf_dtype = "fp32";  // Hugging Face folders in and out
  std::string cluster = "cpu-local";
  bool json = false;
  uint64_t seed = 1;
  std::string data, data_format, data_order = "hashed";  // --data FILE; empty: the synthetic corpus
  double lr = 1e-3;
  bool skip_memory_check = false;
  double watchdog_s = 300;
  TrainingArgs training_args;
};

// The process's place in the job: MPI or a world of one, as the executable was linked.
using executor::World;

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::atoll(v);
}

// Checks done identically on every rank before anything is allocated; the message or empty.
std::string precheck(const RunArgs& a, const spec::Model& m, const spec::Training& t, const spec::Plan& p, int64_t world) {
  if (a.backend == "cuda") {
    if (const std::string why = cuda_plan_unsupported(p); !why.empty()) return "--backend cuda: " + why;
  }
  if (const std::string why = executor::plan_unsupported(m, p); !why.empty()) {
    return (p.file.empty() ? std::string("the plan") : p.file) + ": " + why;
  }
  if (const std::string why = executor::training_unsupported(m, t); !why.empty()) {
    return (t.file.empty() ? std::string("the training") : t.file) + ": " + why;
  }
  if (world != p.world()) {
    const std::string split = p.cp > 1 ? "tp x cp x pp x dp = " + std::to_string(p.tp) + " x " + std::to_string(p.cp) + " x "
                                       : "tp x pp x dp = " + std::to_string(p.tp) + " x ";
    return (p.file.empty() ? std::string("the plan") : p.file) + " needs " + split + std::to_string(p.pp) + " x " +
           std::to_string(p.dp) + " = " + std::to_string(p.world()) + " ranks, but this job has " + std::to_string(world) +
           "; start it with mpirun -n " + std::to_string(p.world());
  }
  if (a.steps < 1) return "--steps: expected at least 1, got " + std::to_string(a.steps);
  if (a.data.empty() && a.data_order == "sequential") {
    return "--data-order sequential: reads a file's windows in turn; give the file with --data";
  }
  if (a.data.empty() && !a.data_format.empty()) return "--data-format: describes a --data file; give one";
  return "";
}

// A loss scale as frameworks print it: 2^k when it is a power of two (they all are, from powers of
// two by halving and doubling), else the number.
std::string loss_scale_text(double scale) {
  int e = 0;
  if (std::frexp(scale, &e) == 0.5) return "2^" + std::to_string(e - 1);
  std::ostringstream o;
  o << scale;
  return o.str();
}

void print_step(const executor::StepStats& s, int64_t total_steps, int64_t first_step, double tokens_per_step,
                std::ostream& out) {
  out << "step " << s.step + 1 << "/" << first_step + total_steps << "  loss " << std::fixed;
  out.precision(4);
  out << s.loss << "  grad-norm " << s.grad_norm << "  time " << s.seconds << " s  tokens/s "
      << text::plain_number(tokens_per_step / s.seconds) << std::defaultfloat;
  if (s.skipped) {
    out << "  loss scale " << loss_scale_text(s.loss_scale) << ": the gradients overflowed fp16, optimizer step skipped";
  } else if (s.loss_scale != 1) {
    out << "  loss scale " << loss_scale_text(s.loss_scale);
  }
  out << "\n";
  out.precision(6);
}

// Model FLOP/s per GPU the run reached (count.hpp's model FLOPs per token: 6N and attention's, no
// recompute), and its MFU against the peak the simulator measures MFU against (sim/models/
// compute.hpp) on the --cluster profile, when the profile has it.
struct Achieved {
  double model_tflops_per_gpu = 0;
  std::optional<double> mfu;
};
Achieved achieved(const executor::TrainReport& r, const program::Program& prog, const std::string& cluster) {
  Achieved a;
  a.model_tflops_per_gpu = r.tokens_per_s * count::model_flops_per_token_train(prog.model) /
                           static_cast<double>(prog.placement.world()) / 1e12;
  const spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, cluster));
  if (c.gpu.peak_flops.count(spec::storage_dtype(prog.training.dtype)) > 0) {
    a.mfu = a.model_tflops_per_gpu * 1e12 / sim::mfu_peak_flops(c, prog.training.dtype);
  }
  return a;
}

nlohmann::json report_json(const executor::TrainReport& r, const program::Program& prog, const Achieved& a) {
  nlohmann::json out = {{"losses", r.losses},
                        {"step_time_s", r.step_seconds},
                        {"tokens_per_s", r.tokens_per_s},
                        {"peak_memory_bytes", r.peak_memory_bytes},
                        {"world", prog.placement.world()},
                        {"plan", spec::to_json(prog.plan)},
                        {"model", prog.model.name},
                        {"first_step", r.first_step},
                        {"interrupted", r.interrupted},
                        {"saved_at_steps", r.saved_at},
                        {"dtype", spec::to_string(prog.training.dtype)},
                        {"params_checksum", r.params_checksum},
                        {"model_tflops_per_gpu", a.model_tflops_per_gpu}};
  if (a.mfu) out["mfu"] = *a.mfu;
  if (!r.loss_scales.empty()) {  // fp16: dynamic loss scaling
    out["loss_scales"] = r.loss_scales;
    out["skipped_steps"] = r.skipped;
  }
  return out;
}

// The test-only fault switch's action (executor::FaultKind); unset: throw.
executor::FaultKind fault_kind_from_env() {
  const char* v = std::getenv("STAGECRAFT_FAULT_KIND");
  const std::string kind = v == nullptr ? "throw" : v;
  if (kind == "throw") return executor::FaultKind::kThrow;
  if (kind == "kill") return executor::FaultKind::kKill;
  if (kind == "kill-writing-checkpoint") return executor::FaultKind::kKillWritingCheckpoint;
  if (kind == "kill-writing-manifest") return executor::FaultKind::kKillWritingManifest;
  throw spec::SpecError("STAGECRAFT_FAULT_KIND", "",
                        "expected throw, kill, kill-writing-checkpoint or kill-writing-manifest, got \"" + kind + "\"");
}

executor::TrainOptions train_options(const RunArgs& a, const program::Program& prog, int64_t rank,
                                     std::shared_ptr<executor::ParamSource> init) {
  executor::TrainOptions o;
  o.runner.init_from = std::move(init);
  o.steps = a.steps;
  o.runner.adam.lr = a.lr;
  o.runner.init_seed = a.seed;
  o.runner.stall_timeout_s = a.watchdog_s;
  o.runner.fault_rank = env_int("STAGECRAFT_FAULT_RANK", -1);
  o.runner.fault_step = env_int("STAGECRAFT_FAULT_STEP", 0) - 1;
  o.runner.fault_kind = fault_kind_from_env();
  o.data = {a.data.empty() ? "synthetic" : a.data, a.seed, a.data_order};
  o.resume_dir = a.resume;
  o.save_dir = a.save;
  o.save_every = a.save_every;
  o.cancel = &interrupted();
  o.save_hf_dir = a.save_hf;
  o.save_hf_dtype = a.save_hf_dtype == "bf16" ? io::safetensors::Dtype::kBF16 : io::safetensors::Dtype::kF32;
  o.trace_path = a.trace;
  // the profile's own name (a file given by path records its name, which calibrate matches)
  o.cluster = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, a.cluster)).name;
  const double tokens = static_cast<double>(prog.tokens_per_step());
  if (rank == 0) {
    // "step 47/48" after a resume from step 46 with --steps 2: the k-th step of this run is step
    // s.step + 1 of the whole training, which ends at s.step + 1 - k + steps
    auto done = std::make_shared<int64_t>(0);
    o.on_step = [&a, tokens, done](const executor::StepStats& s) {
      ++*done;
      print_step(s, a.steps, s.step + 1 - *done, tokens, a.json ? std::cerr : std::cout);
    };
  }
  return o;
}

// The tokens the run reads: the synthetic corpus, or --data as uint16 ids or text bytes
// (--data-format; by default text for a .txt file, else uint16), in --data-order.
executor::Corpus corpus_of(const RunArgs& a, const program::Program& prog) {
  const int64_t v = prog.model.vocab, t = prog.model.seq_len;
  if (a.data.empty()) return executor::Corpus::synthetic(v, t, a.seed);
  const executor::Corpus file = executor::Corpus::from_file(a.data, a.data_format, v, t, a.seed);
  const auto order = a.data_order == "sequential" ? executor::DataOrder::kSequential : executor::DataOrder::kHashed;
  return file.in_order(order, prog.training.global_batch);
}

int run_training(const RunArgs& a, const World& world, const program::Program& prog, const executor::Corpus& corpus,
                 std::shared_ptr<executor::ParamSource> init) {
  std::unique_ptr<executor::Communicator> control = world.communicator(prog.placement);
  executor::Communicator* comm = control.get();
  std::unique_ptr<executor::Communicator> nccl;  // --backend cuda: NCCL over the world's communicator
  executor::TrainOptions options = train_options(a, prog, world.rank(), std::move(init));
  if (a.backend == "cuda") {
    // the GPU's free memory against the simulator's model of this Program, before any allocation
    const double needed = a.skip_memory_check ? 0.0 : cuda_device_bytes(prog, a.cluster);
    // the transport first: it picks this rank's GPU, whose free memory the backend check reads
    std::string why;
    try {
      nccl = make_cuda_communicator(prog, *control, why);
    } catch (const std::exception& e) {
      rank_error(world.rank(), std::string("--backend cuda: the NCCL communicators: ") + e.what());
      return world.abort(3);
    }
    if (!nccl) {  // no CUDA in this build, or no device: alike on every rank
      std::cerr << "stagecraft: error: --backend cuda: " << why << std::endl;
      return kBadInput;
    }
    why = use_cuda_backend(prog, needed, options.runner);  // each rank's GPU; agreed before any allocation
    if (!memory_fits_everywhere(*control, why.empty() ? why : "--backend cuda: " + why)) return kBadInput;
    comm = nccl.get();
  } else if (!a.skip_memory_check) {
    const std::string why = memory_shortfall(prog, a.cluster, world.size(),
                                             "use a smaller model or batch, more ranks (ZeRO, pp), or --skip-memory-check");
    if (!memory_fits_everywhere(*comm, why)) return kImpossible;
  }
  if (world.rank() == 0) {
    std::ostream& log = a.json ? std::cerr : std::cout;
    log << "stagecraft run: " << prog.model.name << ", " << spec::summary(prog.plan) << ", " << world.size()
        << " rank(s), " << (a.backend == "cuda" ? "CUDA" : "CPU") << " executor (" << spec::to_string(prog.training.dtype) << ")"
        << (a.init_from.empty() ? "" : ", parameters from " + a.init_from) << "\n";
  }
  executor::TrainReport r;
  install_interrupt_handler();
  try {
    r = executor::train(prog, *comm, corpus, options);
  } catch (const executor::CheckpointError&) {
    throw;  // agreed on by every rank (resuming before training, saving after): a clean exit 2
  } catch (const executor::OutputError& e) {
    // The run is done and every rank past its last collective: this rank's output failed (exit 2).
    rank_error(world.rank(), e.what());
    return kBadInput;
  } catch (const executor::NonFiniteError& e) {
    // The training diverged: the request cannot be met as given (exit 1), and the job ends now.
    rank_error(world.rank(), e.what());
    return world.abort(kImpossible);
  } catch (const std::exception& e) {
    // One rank failed mid-training; its peers may be waiting on it forever: end the whole job
    // now, before any collective cleanup (the communicator's destructor) could block.
    rank_error(world.rank(), e.what());
    return world.abort(3);
  }
  // interrupted: 128 + this rank's signal (a rank it did not reach stopped with its peers: SIGINT's)
  const int done = !r.interrupted ? kOk : interrupted_exit_code() != 0 ? interrupted_exit_code() : 128 + SIGINT;
  if (world.rank() != 0) return done;
  if (r.interrupted) {
    std::cerr << "stagecraft: interrupted after step " << r.first_step + static_cast<int64_t>(r.losses.size()) << " of "
              << r.first_step + a.steps
              << (a.save.empty() ? "; nothing saved (--save DIR keeps the state)" : "; saved to " + a.save + ", --resume " + a.save + " continues")
              << " (exit status 128 + the signal)\n";
  }
  const Achieved got = achieved(r, prog, a.cluster);
  if (a.json) {
    std::cout << report_json(r, prog, got).dump(1) << "\n";
  } else {
    std::cout << "tokens/s " << text::plain_number(r.tokens_per_s) << " (steps after the first), model "
              << text::plain_number(got.model_tflops_per_gpu) << " TFLOP/s per GPU"
              << (got.mfu ? ", MFU " + text::plain_number(100 * *got.mfu) + "% of " + a.cluster + "'s " +
                                spec::to_string(spec::storage_dtype(prog.training.dtype)) + " peak"
                          : std::string())
              << ", peak memory " << short_bytes(static_cast<double>(r.peak_memory_bytes.empty() ? 0 : r.peak_memory_bytes[0]))
              << " on rank 0, parameters " << r.params_checksum << "\n";
  }
  return done;
}

int run_run(const RunArgs& a) {
  const World world;
  auto fail_before_training = [&](const std::string& message) {
    if (world.rank() == 0) std::cerr << "stagecraft: error: " << message << std::endl;
    return kBadInput;
  };
  std::optional<program::Program> prog;
  std::shared_ptr<executor::ParamSource> init;
  try {
    using spec::ConfigKind;
    if (a.model.empty() && a.init_from.empty()) {
      throw spec::SpecError("--model", "", "required (or --init-from DIR, whose config.json then gives the model)");
    }
    const spec::Model m = load_model_arg(a.model.empty() ? a.init_from + "/config.json" : a.model);
    if (const std::vector<std::string> missing = executor::unsupported_features(m); !missing.empty()) {
      std::string list;
      for (const std::string& f : missing) list += (list.empty() ? "" : "; ") + f;
      throw spec::SpecError(m.file.empty() ? a.model : m.file, "",
                            "the CPU executor does not run " + list + " (simulate and search model them)");
    }
    const spec::Training t =
        with_training_args(spec::load_training(spec::resolve_config(ConfigKind::kTraining, a.training)), a.training_args);
    if (world.rank() == 0) warn_training_length(m, &t);
    const spec::Plan p = spec::load_plan(spec::resolve_config(ConfigKind::kPlan, a.plan));
    if (const std::string why = precheck(a, m, t, p, world.size()); !why.empty()) return fail_before_training(why);
    prog = program::lower(m, executor::executed_training(t), p);
    // Both checked before anything runs, so a bad checkpoint or an unexportable model writes nothing.
    if (!a.save_hf.empty()) executor::hf::family_of(prog->model);
    if (!a.init_from.empty() && !a.resume.empty()) {
      throw spec::SpecError("--init-from", "", "starts a run from a Hugging Face checkpoint; --resume continues one: give one of them");
    }
    if (!a.init_from.empty()) init = std::make_shared<executor::hf::HfReader>(prog->model, a.init_from);
    if (t.dtype != prog->training.dtype && world.rank() == 0) {
      const std::string why = "the executor runs fp32, bf16 and fp16 (fp8's scaled GEMMs and tf32's GEMMs are not run "
                              "here)";
      (a.json ? std::cerr : std::cout) << "stagecraft run: " << t.label() << " asks for " << spec::to_string(t.dtype)
                                       << "; " << why << ": it computes and communicates in "
                                       << spec::to_string(prog->training.dtype) << ", and runs (and traces) that Program\n";
    }
  } catch (const spec::SpecError& e) {
    return fail_before_training(e.what());
  }
  std::optional<executor::Corpus> corpus;
  try {
    corpus = corpus_of(a, *prog);  // every rank reads the file alike: a bad one is refused by all
  } catch (const executor::DataError& e) {
    return fail_before_training(e.what());
  }
  try {
    return run_training(a, world, *prog, *corpus, std::move(init));
  } catch (const executor::CheckpointError& e) {
    return fail_before_training(e.what());  // agreed on by every rank
  } catch (const spec::SpecError& e) {
    return fail_before_training(e.what());  // the environment's switches, read alike on every rank
  } catch (const std::exception& e) {
    rank_error(world.rank(), e.what());
    return world.abort(3);
  }
}

}  // namespace

Subcommand add_run(CLI::App& root) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* app = root.add_subcommand("run", "Train the plan for real on the CPU executor (one process per rank, under mpirun)");
  app->add_option("--model", args->model, "model file or bundled name (default with --init-from: its config.json)");
  app->add_option("--training", args->training, "training file or bundled name")->required();
  app->add_option("--plan", args->plan, "plan file or bundled name")->required();
  add_training_options(app, args->training_args);
  app->add_option("--steps", args->steps, "optimizer steps to run (default 10)")->check(positive_int(int64_t{1} << 40));
  app->add_option("--backend", args->backend, "cpu (MPI + Eigen) or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app->add_option("--trace", args->trace, "write the measured trace (Chrome trace JSON) here")->check(writable_file());
  app->add_option("--cluster", args->cluster,
                  "the cluster profile that describes these machines, recorded in the trace (default cpu-local)");
  app->add_flag("--json", args->json, "print one JSON document (SCHEMAS.md run --json); progress goes to stderr");
  CLI::Option* save = app->add_option("--save", args->save,
                                      "write a checkpoint to this directory at the end (and when interrupted by SIGINT or "
                                      "SIGTERM: the run stops after the step in flight, saves, and exits 128 + the signal)")
                          ->check(writable_dir());
  app->add_option("--save-every", args->save_every, "with --save: also a checkpoint after every N-th step (each replaces the last)")
      ->check(positive_int(int64_t{1} << 40))
      ->needs(save);
  app->add_option("--resume", args->resume, "continue from the checkpoint in this directory");
  app->add_option("--init-from", args->init_from,
                  "start from this Hugging Face checkpoint folder (config.json + model.safetensors or its index): "
                  "GPT-2, LLaMA, Mistral, Qwen2")
      ->check(CLI::ExistingDirectory);
  app->add_option("--save-hf", args->save_hf,
                  "write the trained parameters here at the end as a Hugging Face folder (config.json, "
                  "model.safetensors, generation_config.json)")
      ->check(writable_dir());
  app->add_option("--save-hf-dtype", args->save_hf_dtype, "fp32 (default) or bf16: the dtype of --save-hf's tensors")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app->add_option("--seed", args->seed, "parameter initialisation and synthetic data seed (default 1)");
  app->add_option("--data", args->data, "train on this file: little-endian uint16 token ids, or text read as bytes")
      ->check(CLI::ExistingFile);
  app->add_option("--data-format", args->data_format, "uint16 or text (default: text for a .txt file, else uint16)")
      ->check(CLI::IsMember({"uint16", "text"}));
  app->add_option("--data-order", args->data_order,
                  "hashed (default: each sequence a window at a hashed offset) or sequential (step t reads the "
                  "global batch's windows of seq_len + 1 tokens from token t x batch x seq_len on, wrapping)")
      ->check(CLI::IsMember({"hashed", "sequential"}));
  app->add_option("--lr", args->lr, "AdamW learning rate (default 1e-3)")->check(positive_finite());
  app->add_flag("--skip-memory-check", args->skip_memory_check,
                "start even when the simulator's memory estimate exceeds what the host has available");
  app->add_option("--watchdog", args->watchdog_s,
                  "seconds without progress after which a rank ends the job, naming the ranks that stopped answering "
                  "(default 300)")
      ->check(positive_finite());
  return {app, [args]() { return run_run(*args); }};
}

}  // namespace stagecraft::cli
