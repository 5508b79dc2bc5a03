// Runner: the Program interpreter (ARCHITECTURE.md, "one Program, two interpreters"). Each rank
// executes its own instruction list, prog.rank(r), for one training step per step() call:
//  * lanes run their instructions in Program order and an instruction also waits for its
//    explicit dependencies, as docs/program.md says; a simple deterministic loop starts every
//    instruction that is ready — communication as non-blocking requests (Communicator),
//    compute inline — and tests the pending ones, so communication lanes overlap compute;
//  * a receive or a collective occupies its lane until it completes; a send does not (sends are
//    asynchronous), but an instruction that depends on a send (plans with overlap_p2p false)
//    waits for it to complete, and the step ends only when every send completed;
//  * compute is executor::Layer (model/layers.hpp) over the segment's units, activations and
//    their gradients travel between stages as point-to-point messages tagged by (kind,
//    micro-batch, chunk); ZeRO 0-3 is exactly the Program's GatherParams / ReleaseParams /
//    ReduceScatterGrads / AllReduceGrads / GradNormAllReduce / OptimizerStep / OffloadCopy /
//    AllGatherParams over the model state (zero/stage_state.hpp), over the group each names:
//    hierarchical partitions (shard groups and their replicas, MiCS's two-level gather, hpZ's
//    secondary partition) and ZeRO++'s quantized gathers (qwZ) and gradient all-to-alls (qgZ,
//    AllToAll) included (interpreter_zero.cpp);
//  * tensors live in a Backend (backend.hpp) and its arithmetic runs there: the interpreter
//    moves no element itself. The CPU backend (cpu_backend.hpp) is Eigen over host memory.
// Numerics: the loss of every micro-batch is weighted 1 / (micro_batches * dp) and reductions
// sum, so gradients equal the single-rank average over the global batch; clipping to a global
// norm of max_grad_norm; AdamW (with cp > 1 the weight is 1 / (micro_batches * dp * cp): each rank
// averages its tokens). Sequence j of step t's global batch goes to batch replica (dp index / cp)
// j / (micro_batch * micro_batches), micro-batch (j mod (micro_batch * micro_batches)) / micro_batch.
//
// Tensor parallelism (tp > 1) is Megatron-LM's: column-parallel QKV and MLP up/gate,
// row-parallel attention output and MLP down, a vocabulary-parallel embedding and cross-entropy,
// the f/g all-reduces at the Program's TpAllReduce instructions (docs/program.md), pipeline
// messages scattered over the tp ranks and all-gathered by the receiver. Context parallelism
// (cp > 1) is Megatron-Core's: each rank holds a load-balanced chunk pair of every sequence, and
// attention exchanges K/V or heads at the Program's cp instructions (interpreter_cp.cpp);
// gradients are reduced over dp x cp. Not supported
// (constructor throws ExecutorError): what plan_unsupported names, a Program lowered for a dtype
// other than fp32, bf16 and fp16 (executed_training). bf16 and fp16 are mixed precision as the
// frameworks run it (precision.hpp): 16-bit working parameters, activations and messages, fp32
// masters, Adam state and gradient accumulation, reductions in the Program's reduce dtype; fp16
// with the framework's dynamic loss scaling (LossScaler: overflowing steps skipped). Selective
// recompute runs with full activation caches (same math, no memory saving); full recompute
// keeps only each block's input and re-runs it at the Program's Recompute instructions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/program/program.hpp"
#include "executor/backend.hpp"
#include "executor/comm/communicator.hpp"
#include "executor/data/corpus.hpp"
#include "executor/memory.hpp"
#include "executor/precision.hpp"
#include "executor/model/adamw.hpp"
#include "executor/tracer.hpp"
#include "executor/zero/quantize.hpp"
#include "executor/zero/stage_layout.hpp"

namespace stagecraft::executor {

// The CPU executor runs a bf16 or fp16 training in that dtype (mixed precision, precision.hpp) and
// every other dtype in fp32: fp8 needs Transformer Engine's scaled GEMMs and tf32 its
// reduced-mantissa GEMMs, which it does not run. Attention is unfused (the probabilities kept
// for backward). It runs the Program lowered with executed_training(requested), so that the bytes
// of its instructions (and of its measured trace) describe what it did; a Program lowered for
// another dtype is refused. The CUDA backend runs the same Programs (executor/cuda/backend.hpp).
inline constexpr spec::Dtype kCpuDtype = spec::Dtype::kFp32;
bool executes_dtype(spec::Dtype dtype);
spec::Training executed_training(const spec::Training& requested);

// Why this executor cannot run `plan` on `model`, as "/field: reason" (the plan field's JSON
// pointer first): tensor parallelism the layers cannot split; empty when it can (always for tp = 1).
// `training`, when given, for what depends on it (the balancing loss with experts over tp or cp).
std::string plan_unsupported(const spec::Model& model, const spec::Plan& plan);
// Why the executor cannot run `training`'s options for `model`, as "/field: reason", or "".
std::string training_unsupported(const spec::Model& model, const spec::Training& training);

// What the test-only fault switch does (STAGECRAFT_FAULT_KIND, cli/run.cpp).
enum class FaultKind {
  kThrow,                  // throw InjectedFault at the first compute instruction of the step
  kKill,                   // SIGKILL itself there: the rank vanishes mid-step, peers blocked on it
  kKillWritingCheckpoint,  // SIGKILL itself halfway through writing its checkpoint file
  kKillWritingManifest,    // (rank 0) SIGKILL itself halfway through writing the manifest
};

// The kill of the fault switch: says "stagecraft: rank R: fault switch: SIGKILL <where>" on stderr
// first, so that a test can time what follows, then sends this process SIGKILL.
[[noreturn]] void fault_kill(int64_t rank, const std::string& where);

// Makes the backend a rank runs on (layout, optimizer offload, memory tracker, forward-only,
// micro-batch slots); unset: the CPU backend. The command line sets it for --backend cuda.
using BackendFactory =
    std::function<std::unique_ptr<Backend>(const StageLayout&, bool offload, MemoryTracker&, bool forward_only, int64_t slots)>;

struct RunnerOptions {
  AdamWConfig adam{1e-3, 0.9, 0.95, 1e-8, 0.1};
  double max_grad_norm = 1.0;
  uint64_t init_seed = 1;   // parameter initialisation (ParamLayout::init)
  // When set, the initial parameters come from here instead (a Hugging Face checkpoint).
  std::shared_ptr<ParamSource> init_from;
  bool trace = false;
  // Test-only fault switch: on world rank fault_rank, during step index fault_step (0-based;
  // messages number steps from 1) or in the checkpoint written at the end, do fault_kind.
  int64_t fault_rank = -1;
  int64_t fault_step = -1;
  FaultKind fault_kind = FaultKind::kThrow;
  // The watchdog's deadline (run --watchdog): a step in which nothing progresses for this long, or
  // a wait of the communicator's control plane, throws naming what waits and the ranks that
  // stopped answering (Communicator::set_progress_deadline, ask_watchdog).
  double stall_timeout_s = 300;
  BackendFactory make_backend;
};

// ZeRO++: what this rank's quantizations lost so far — qwZ's int8 pieces of gathered parameters
// (each against its exact values), qgZ's int4 gradients (each quantization against its input:
// the first against the rank's gradient, the requantization against the node's sum).
struct QuantizationReport {
  QuantizationError weights, gradients;
};

struct StepStats {
  int64_t step = 0;        // 0-based index of the step just run
  double loss = 0;         // mean loss over the global batch (every rank has it)
  double grad_norm = 0;    // global gradient norm before clipping
  double seconds = 0;      // wall time of the step, the slowest rank's
  // this rank's host time inside compute instructions: the compute itself on a backend that runs
  // each call to its end (the CPU's); on one that enqueues (the CUDA backend), the issue only,
  // and the device's times are the trace's (instr_clock.hpp)
  double compute_seconds = 0;
  double loss_scale = 1;       // fp16: the loss scale S this step ran with (LossScaler), else 1
  bool skipped = false;        // fp16: the gradients overflowed and the optimizer step was skipped
  // A forward-only Program (scoring): every micro-batch's mean loss, micro-batch m of dp rank d
  // at d * micro_batches + m (every rank has them); empty for a training step.
  std::vector<double> micro_batch_losses;
};

class Runner {
 public:
  // Collective over `comm` (aligns trace clocks). `prog`, `comm` and `corpus` must outlive it.
  Runner(const program::Program& prog, Communicator& comm, const Corpus& corpus, RunnerOptions options);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // Executes the Program once: one optimizer step on step `steps_done()`'s global batch.
  StepStats step();
  int64_t steps_done() const { return steps_done_; }
  // After loading a checkpoint: the next step() runs step `steps` (data and Adam's step count).
  void set_steps_done(int64_t steps) { steps_done_ = steps; }

  const program::Program& program() const { return prog_; }
  const RunnerOptions& options() const { return options_; }
  Communicator& comm() { return comm_; }
  const StageLayout& layout() const { return layout_; }
  // The rank's tensors and arithmetic (model state for checkpoints and export).
  Backend& backend() { return *backend_; }
  const MemoryTracker& memory() const { return memory_; }
  const Tracer& tracer() const { return tracer_; }
  const QuantizationReport& quantization() const { return quantization_; }
  // fp16's dynamic loss scaling (precision.hpp): the next step's S (1 without fp16) and the
  // scaler's state, which checkpoints keep.
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  std::optional<LossScaler::State> loss_scale_state() const {
    return scaler_ ? std::optional<LossScaler::State>(scaler_->state()) : std::nullopt;
  }
  void restore_loss_scale(const LossScaler::State& s) {
    if (scaler_) scaler_->restore(s);
  }

 private:
  class Interpreter;  // one step's lanes, in-flight requests and micro-batch activations
  std::vector<double> gather_micro_losses(const std::vector<std::pair<int32_t, double>>& mine);

  const program::Program& prog_;
  Communicator& comm_;
  const Corpus& corpus_;
  RunnerOptions options_;
  int64_t rank_ = 0;
  Tracer tracer_;
  MemoryTracker memory_;
  StageLayout layout_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Interpreter> interpreter_;
  QuantizationReport quantization_;
  std::optional<LossScaler> scaler_;  // fp16 only
  int64_t steps_done_ = 0;
};

}  // namespace stagecraft::executor
