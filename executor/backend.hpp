// Backend: where one rank's tensors live and its arithmetic runs, behind the Program interpreter
// (ARCHITECTURE.md, "one Program, two interpreters"; runner.hpp has the semantics). The
// interpreter keeps the lanes, dependencies, requests in flight, tracing and memory accounting,
// and never reads or writes a tensor element itself: it asks the backend for buffers, for the
// element moves the communication instructions need (copy, add, fill on views of them), for the
// units' forward and backward and for the model state's updates (StageState's operations).
// Views it gets from the backend go only back to the backend or to the Communicator, which moves
// the same memory between ranks.
//
//   CpuBackend (cpu_backend.hpp)  host memory, Layer<float> (Eigen) and StageState: the oracle.
//   a device backend               device memory; its views are spans over device addresses,
//                                  which a device communicator (NCCL) takes as they are.
//
// Micro-batch slots: a unit's forward leaves a cache for its backward per (chunk, micro-batch) in
// flight; the interpreter names it by a slot index (chunk * micro_batches + micro-batch) and the
// backend keeps the caches of every slot's units.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "executor/errors.hpp"
#include "executor/instr_clock.hpp"
#include "executor/model/adamw.hpp"
#include "executor/model/layers.hpp"
#include "executor/model/params.hpp"
#include "executor/precision.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor {

// Elements one backend allocated (fp32 storage). Move-only; empty when default-constructed or
// moved from. `view()` spans the backend's memory: host memory for the CPU backend, device memory
// for a GPU one, so only the backend and the Communicator may touch what it points to. `format()`
// is what the elements stand for (precision.hpp): a bf16 activation's values are bf16 values, and
// bytes() counts them at 2 bytes, as a device holds them and as they travel.
class Buffer {
 public:
  struct Storage {
    virtual ~Storage() = default;
    std::span<float> data;
  };

  Buffer() = default;
  explicit Buffer(std::unique_ptr<Storage> s) : storage_(std::move(s)) {}
  Buffer(Buffer&&) noexcept = default;
  Buffer& operator=(Buffer&&) noexcept = default;

  std::span<float> view() const { return storage_ ? storage_->data : std::span<float>{}; }
  int64_t size() const { return static_cast<int64_t>(view().size()); }
  bool empty() const { return size() == 0; }
  Format format() const { return format_; }
  Buffer&& as(Format f) && {
    format_ = f;
    return std::move(*this);
  }
  int64_t bytes() const { return size() * bytes_of(format_); }

 private:
  std::unique_ptr<Storage> storage_;
  Format format_ = Format::kFp32;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // ---- timing (instr_clock.hpp) ----------------------------------------------------------------
  // The device's clock of this backend's work, or null (the host's clock times it: the CPU).
  virtual InstrClock* clock() { return nullptr; }
  // The Program instruction (RoleProgram::first_id + index) the next calls belong to; -1 when the
  // calls that follow belong to none (the interpreter's moves for a communication instruction).
  virtual void label_next(int32_t /*instr*/) {}
  // Returns once every call made so far has done its work. A backend may return from a call with
  // its work still queued (a device's stream: only what the host reads, read() and the host copies,
  // waits); the interpreter calls this at the end of every step, so a step's time is its work's.
  virtual void finish_step() {}

  // ---- buffers and element moves (views of this backend's memory) ---------------------------
  virtual Buffer alloc(int64_t elems) = 0;  // zero-filled
  virtual void copy(std::span<float> dst, std::span<const float> src) = 0;  // equal sizes
  virtual void add(std::span<float> dst, std::span<const float> src) = 0;   // dst += src, equal sizes
  virtual void fill(std::span<float> dst, float value) = 0;
  // One element, read back to the host (the loss of a tp = 1 head).
  virtual float read(std::span<const float> src, int64_t index) = 0;
  // Host copies of views of this backend's memory, and back (ZeRO++'s quantizers run on the host,
  // zero/quantize.hpp, on the values the quantized collectives move).
  virtual void download(std::span<const float> src, std::span<float> host) = 0;
  virtual void upload(std::span<const float> host, std::span<float> dst) = 0;
  // Bytes the backend holds for micro-batch caches (the units' saved activations).
  virtual int64_t cache_bytes() const = 0;

  // ---- model state (zero/stage_state.hpp says what each buffer holds) -------------------------
  virtual void init_params(uint64_t seed) = 0;
  virtual void init_params(ParamSource& source) = 0;
  virtual std::span<float> params() = 0;
  virtual std::span<float> grads() = 0;
  virtual std::span<float> shard_grads() = 0;
  virtual std::span<float> persistent_grads() = 0;
  virtual void zero_grads() = 0;
  virtual double owned_grad_norm_sq() = 0;
  virtual void optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale) = 0;
  virtual void copy_grads_to_host() = 0;
  virtual void host_optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale) = 0;
  virtual void copy_params_from_host() = 0;
  virtual void release(Range r) = 0;
  virtual Buffer pack_reduced_grads(const std::vector<Range>& ranges) = 0;
  virtual void unpack_reduced_grads(const std::vector<Range>& ranges, std::span<const float> values) = 0;
  // Host copies for checkpoints and model export.
  virtual std::vector<float> owned_state() = 0;
  virtual void load_owned_state(std::span<const float> state) = 0;
  virtual void load_peer_shard(int64_t set, int64_t shard, std::span<const float> peer_state) = 0;
  virtual int64_t owned_state_elems() const = 0;
  virtual std::vector<float> params_host() = 0;

  // ---- units (model/layers.hpp has the math; `unit` is a model unit of chunk `chunk`) --------
  // y = unit(x); `input_only` keeps only the unit's input in its cache (full recompute).
  virtual Buffer forward(int32_t chunk, int32_t unit, int64_t slot, const TokenBatch& batch, std::span<const float> x,
                         bool input_only) = 0;
  virtual void recompute(int32_t chunk, int32_t unit, int64_t slot) = 0;
  // dx from dy; adds the parameter gradients unless `input_only` (zero-bubble split). The cache
  // is released when nothing more reads it (a tp > 1 unit keeps it for finish_input_grad).
  virtual Buffer backward(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> dy, bool input_only) = 0;
  virtual void backward_weight(int32_t chunk, int32_t unit, int64_t slot) = 0;
  // tp > 1: dx from the summed d(norm output) (rows from row0 under sequence parallelism).
  virtual Buffer finish_input_grad(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> d_a,
                                   int64_t row0) = 0;
  // tp > 1 head: the loss from the all-reduced [max | sum of exp | target logit].
  virtual float finish_loss(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> reduced) = 0;
  virtual void vocab_parallel_rescale(std::span<const float> local_stats, std::span<const float> global_max,
                                      std::span<float> out) = 0;
  // Context parallelism (cp > 1): an attention unit's pass in the phases its cp collectives
  // separate (model/layers.hpp, LayerT::cp_*). `in` is the unit input (kProject; empty for a
  // Recompute, which re-projects the input its forward kept), dy (kBackwardSend) or what the
  // phase's collective delivered; returns what the phase makes: the next collective's send buffer,
  // y, or dx (tp > 1: the partial d(norm output) finish_input_grad completes). `flag`: kProject
  // keeps only the input once the forward is done (full recompute); kBackwardFinish leaves the
  // weight gradients to backward_weight (zero-bubble). `dims` is read by a forward's kProject only.
  // A backend that does not run context parallelism keeps this refusal.
  virtual Buffer cp_attention(CpPhase /*phase*/, int32_t /*chunk*/, int32_t /*unit*/, int64_t /*slot*/, const Dims& /*dims*/,
                              std::span<const float> /*in*/, bool /*flag*/) {
    throw ExecutorError("this backend does not run context parallelism (cp > 1); the CPU backend does");
  }
  // Expert parallelism (ep > 1): a MoE unit's pass in the phases its all-to-alls separate
  // (model/layers.hpp, LayerT::moe_*). `in` is x (kDispatch, with `batch`'s dims and balancing
  // weight), dy (kBackwardSend) or what the phase's all-to-all delivered; `counts`: kDispatch
  // writes the routed rows of each expert [E], kExperts reads the received rows [ep x E/ep];
  // `flag`: kExpertsBackward and kBackwardFinish add their weight gradients (false: zero-bubble,
  // backward_weight adds them); kDispatch recomputes the route from the input the forward kept (full
  // recompute: `in` is not read); kCombine then keeps only that input (a forward under full
  // recompute). Returns the next all-to-all's send buffer, y or dx. A backend that does not run
  // expert parallelism keeps this refusal.
  virtual Buffer moe(MoePhase /*phase*/, int32_t /*chunk*/, int32_t /*unit*/, int64_t /*slot*/, const TokenBatch& /*batch*/,
                     std::span<const float> /*in*/, std::span<int64_t> /*counts*/, bool /*flag*/) {
    throw ExecutorError("this backend does not run expert parallelism (ep > 1); the CPU backend does");
  }
  // Bias-based balancing (moe.router_bias): the copies this rank's forwards of MoE unit `unit`
  // routed to each of the E experts since the last call (LayerT::take_routed). A backend that does
  // not run experts keeps this refusal.
  virtual std::vector<int64_t> take_moe_routed(int32_t /*chunk*/, int32_t /*unit*/) {
    throw ExecutorError("this backend does not run mixtures of experts; the CPU backend does");
  }
  // The balancing loss over tp or cp ranks (comm_rules.hpp, moe_aux_counts_bytes): MoE unit
  // `unit`'s routed copies per expert as its loss counts them [E], after the pass's route; and
  // their sums over the `ranks` of the tp·cp group put in their place (the loss's tokens the
  // group's). A backend that does not run experts keeps these refusals.
  virtual std::vector<double> moe_loss_counts(int32_t /*chunk*/, int32_t /*unit*/, int64_t /*slot*/) {
    throw ExecutorError("this backend does not run mixtures of experts; the CPU backend does");
  }
  virtual void set_moe_loss_counts(int32_t /*chunk*/, int32_t /*unit*/, int64_t /*slot*/, std::span<const double> /*sums*/,
                                   int64_t /*ranks*/) {
    throw ExecutorError("this backend does not run mixtures of experts; the CPU backend does");
  }
  // A parameter moved by a rule of its own rather than its gradient (the expert biases): `delta`
  // added to the positions of `r` this rank steps (StageState::nudge).
  virtual void nudge_params(Range r, std::span<const float> delta) = 0;
  // Whether every unit cache of the slot is released; and dropping them all.
  virtual bool slot_idle(int64_t slot) const = 0;
  virtual void clear_slot(int64_t slot) = 0;
};

}  // namespace stagecraft::executor
