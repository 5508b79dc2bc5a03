#include "executor/runner.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/program/check.hpp"
#include "executor/cpu_backend.hpp"
#include "executor/errors.hpp"
#include "executor/interpreter.hpp"

namespace stagecraft::executor {

namespace {

// What this executor runs, checked before anything is allocated; returns the world rank.
int64_t checked_rank(const program::Program& prog, const Communicator& comm, const Corpus& corpus) {
  const int64_t world = prog.placement.world();
  if (comm.size() != world) {
    const std::string cp = prog.plan.cp > 1 ? " x cp " + std::to_string(prog.plan.cp) : "";
    throw ExecutorError("the plan needs " + std::to_string(world) + " ranks (tp " + std::to_string(prog.plan.tp) + cp +
                        " x pp " + std::to_string(prog.plan.pp) + " x dp " + std::to_string(prog.plan.dp) +
                        "), the communicator has " + std::to_string(comm.size()));
  }
  if (const std::string why = plan_unsupported(prog.model, prog.plan); !why.empty()) {
    throw ExecutorError("the plan: " + why);
  }
  if (const std::string why = training_unsupported(prog.model, prog.training); !why.empty()) {
    throw ExecutorError("the training: " + why);
  }
  if (prog.plan.zero.offload_param == spec::Offload::kCpu) {
    throw ExecutorError("offload_param \"cpu\" places ZeRO-3's parameter shards in a GPU host's memory; the CPU "
                        "executor's shards already are in host memory, so run the plan with \"offload_param\": \"none\"");
  }
  if (!executes_dtype(prog.training.dtype)) {
    throw ExecutorError(std::string("the CPU executor computes and communicates in fp32, bf16 or fp16, the Program was lowered for ") +
                        spec::to_string(prog.training.dtype) +
                        ": lower it with executor::executed_training(training), so its bytes describe the run");
  }
  if (corpus.vocab() != prog.model.vocab || corpus.seq_len() != prog.model.seq_len) {
    throw ExecutorError("the corpus has vocab " + std::to_string(corpus.vocab()) + " and sequences of " +
                        std::to_string(corpus.seq_len()) + ", the model '" + prog.model.name + "' vocab " +
                        std::to_string(prog.model.vocab) + " and seq_len " + std::to_string(prog.model.seq_len));
  }
  program::check(prog);
  return comm.rank();
}

std::unique_ptr<Backend> make_backend(const BackendFactory& factory, const StageLayout& layout, bool offload,
                                      MemoryTracker& memory, bool forward_only, int64_t slots) {
  if (factory) return factory(layout, offload, memory, forward_only, slots);
  return std::make_unique<CpuBackend>(layout, offload, memory, forward_only, slots);
}

}  // namespace

void fault_kill(int64_t rank, const std::string& where) {
  std::fprintf(stderr, "stagecraft: rank %lld: fault switch: SIGKILL %s\n", static_cast<long long>(rank), where.c_str());
  std::fflush(stderr);
  std::raise(SIGKILL);
  std::abort();  // not reached
}

std::string training_unsupported(const spec::Model& m, const spec::Training& t) {
  if (m.moe.on() && t.moe_capacity_factor > 0) {
    return "/moe_capacity_factor: the executor routes dropless (every copy to its expert); an expert capacity that drops "
           "or pads copies is simulated and searched, not run yet";
  }
  return "";
}

std::string plan_unsupported(const spec::Model& m, const spec::Plan& p) {
  if (m.moe.on() && p.etp > 1 && m.mlp_bias) {
    return "/etp: " + std::to_string(p.etp) + " with biased experts (a row-parallel down-projection bias added once after the "
           "scatter) is not run by the executor yet; simulate and search model it";
  }
  if (m.moe.on() && p.etp > 1 && p.moe_dispatcher == spec::MoeDispatcher::kFlex) {
    return "/moe_dispatcher: \"flex\" with etp " + std::to_string(p.etp) + " (each token to every etp rank of its "
           "experts' place) is not run by the executor yet; simulate and search model it, and the executor runs it with etp 1";
  }
  if (m.qk_norm && p.cp > 1) {
    return "/cp: query and key norms (qk_norm) with cp > 1 are not run by the executor yet (its context-parallel attention "
           "phases project without them)";
  }
  if (m.qk_norm_whole && p.tp > 1) {
    return "/tp: query and key norms over the whole projections (qk_norm_whole, OLMoE) with tp > 1 are not run by the "
           "executor yet (each row's norm spans every tp rank's heads: a sum of squares over tp in the forward)";
  }
  if (p.tp == 1) return "";
  const std::string t = std::to_string(p.tp);
  if (m.heads % p.tp != 0) return "/tp: " + t + " does not divide the model's " + std::to_string(m.heads) + " heads";
  if (m.kv_heads % p.tp != 0) {
    return "/tp: " + t + " does not divide the model's " + std::to_string(m.kv_heads) +
           " kv_heads; the executor, like Megatron-LM, splits the key/value heads over the tp ranks";
  }
  if (m.ffn_hidden % p.tp != 0) return "/tp: " + t + " does not divide the model's ffn_hidden " + std::to_string(m.ffn_hidden);
  const int64_t tokens = spec::rank_tokens(p, m.seq_len);  // a rank's: micro_batch x seq_len / cp
  if ((tokens * m.hidden) % p.tp != 0) {
    return "/tp: " + t + " does not divide a micro-batch's activation (micro_batch x seq_len / cp x hidden = " +
           std::to_string(tokens * m.hidden) + " elements), which pipeline messages split over tp";
  }
  if (p.sequence_parallel && tokens % p.tp != 0) {
    return "/sequence_parallel: tp " + t + " does not divide a micro-batch's " + std::to_string(tokens) +
           " tokens on a rank (micro_batch x seq_len / cp), which sequence parallelism splits over tp";
  }
  return "";
}

bool executes_dtype(spec::Dtype dtype) {
  return dtype == spec::Dtype::kFp32 || dtype == spec::Dtype::kBf16 || dtype == spec::Dtype::kFp16;
}

spec::Training executed_training(const spec::Training& requested) {
  spec::Training t = requested;
  if (!executes_dtype(t.dtype)) t.dtype = kCpuDtype;
  t.attention = "unfused";  // the CPU layers keep the probabilities (executor/model/attention.cpp)
  return t;
}

Runner::Runner(const program::Program& prog, Communicator& comm, const Corpus& corpus, RunnerOptions options)
    : prog_(prog),
      comm_(comm),
      corpus_(corpus),
      options_(options),
      rank_(checked_rank(prog, comm, corpus)),
      tracer_(options.trace),
      layout_(prog, prog.placement.stage_of(rank_), prog.placement.dp_index_of(rank_), prog.placement.tp_index_of(rank_)),
      backend_(make_backend(options_.make_backend, layout_, prog.plan.zero.offload_optimizer == spec::Offload::kCpu, memory_,
                            prog.forward_only, prog.plan.virtual_stages * prog.plan.micro_batches)) {
  if (layout_.precision().store == Format::kFp16) scaler_.emplace(loss_scaling(prog.training.framework));
  comm_.set_progress_deadline(options_.stall_timeout_s);
  tracer_.start(comm_);
  memory_.start(rank_, [this] { return tracer_.now_ns(); }, options_.trace);
  if (options_.init_from) {
    backend_->init_params(*options_.init_from);
  } else {
    backend_->init_params(options_.init_seed);
  }
  interpreter_ = std::make_unique<Interpreter>(*this);
}

Runner::~Runner() = default;

std::vector<double> Runner::gather_micro_losses(const std::vector<std::pair<int32_t, double>>& mine) {
  // a batch replica's micro-batch: its cp ranks' shares sum to its loss
  const int64_t m = prog_.plan.micro_batches, replica = prog_.placement.batch_index_of(rank_);
  std::vector<std::pair<int64_t, double>> slots;
  for (const auto& [mb, loss] : mine) slots.emplace_back(replica * m + mb, loss);
  return all_gather_slots(comm_, slots, prog_.plan.dp * m);
}

StepStats Runner::step() {
  const auto t0 = std::chrono::steady_clock::now();
  const Interpreter::Outcome out = interpreter_->run(steps_done_);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  StepStats s;
  s.step = steps_done_;
  s.loss = comm_.all_reduce_sum(out.weighted_loss);
  s.seconds = comm_.all_reduce_max(seconds);
  s.grad_norm = std::sqrt(out.grad_norm_sq);
  s.compute_seconds = out.compute_seconds;
  s.loss_scale = loss_scale();
  s.skipped = out.overflow;
  if (scaler_) scaler_->update(out.overflow);
  if (prog_.forward_only) s.micro_batch_losses = gather_micro_losses(out.micro_losses);
  ++steps_done_;
  return s;
}

}  // namespace stagecraft::executor
