// The Program interpreter's compute instructions: Forward, Recompute, Backward, BackwardInput,
// BackwardWeight over the segment's units, the optimizer step, offload copies, ZeRO-3 release
// (with hpZ's secondary copy and qwZ's exact shard, interpreter_zero.cpp).
#include "executor/interpreter.hpp"

#include <cmath>

#include "core/program/comm_rules.hpp"
#include "core/program/units.hpp"
#include "executor/errors.hpp"

namespace stagecraft::executor {

using namespace interp;  // the interpreter's own names (interpreter.hpp)

// ---- compute ----------------------------------------------------------------------------------------

Runner::Interpreter::MicroState& Runner::Interpreter::micro(const Instr& in) {
  const int64_t slot = in.chunk * prog_.plan.micro_batches + in.mb;
  MicroState& ms = micro_.at(at(slot));
  if (!ms.active) {
    ms.active = true;
    ms.slot = slot;
  }
  return ms;
}

void Runner::Interpreter::ensure_batch(MicroState& ms, const Instr& in) {
  const int32_t head = program::head_unit(prog_.model);
  const bool needs_tokens = in.unit_begin == 0 || in.unit_end == head + 1;
  if (!needs_tokens || ms.has_batch) return;
  const int64_t per_rank = prog_.plan.micro_batch * prog_.plan.micro_batches;
  const int64_t first = batch_index_ * per_rank + in.mb * prog_.plan.micro_batch;
  ms.batch = rank_batch(runner_.corpus_.sample(step_, first, prog_.plan.micro_batch));
  ms.has_batch = true;
}

TokenBatch Runner::Interpreter::tokens(const MicroState& ms) const {
  TokenBatch t = ms.has_batch ? ms.batch.view() : TokenBatch{};
  t.dims = dims_;
  // the balancing loss enters the objective as each micro-batch's loss does (the head's dy); with
  // cp > 1 the cp ranks' terms add up to the micro-batch's loss (their counts summed over the tp·cp
  // group), where their language-model losses are means over each rank's tokens (loss_weight_'s 1/cp)
  t.moe_aux_grad = prog_.training.moe_aux_loss_coeff * loss_weight_ * static_cast<double>(cp_) * loss_scale_;
  return t;
}

TokenBatch Runner::Interpreter::unit_tokens(const MicroState& ms, int32_t unit) const {
  TokenBatch t = tokens(ms);
  // sequence parallelism: a MoE unit takes its 1/tp of the tokens, or with shared experts (their
  // MLP tp-split) the whole rows the Program's all-gather brought, routing its own 1/tp of them
  if (tp_ > 1 && unit_kind(prog_.model, unit) == UnitKind::kMoe && prog_.model.moe.shared_ffn_hidden == 0) {
    t.dims = Dims{1, tokens_ / tp_};
  }
  return t;
}

void Runner::Interpreter::forward(const Instr& in) {
  if (ep_moe(in.unit_begin)) return ep_compute(in, false, false);  // interpreter_ep.cpp
  MicroState& ms = micro(in);
  ensure_batch(ms, in);
  const TokenBatch batch = tokens(ms);
  Buffer x = std::move(ms.act);
  for (int32_t u = in.unit_begin; u < in.unit_end; ++u) {
    const UnitKind kind = unit_kind(prog_.model, u);
    const bool block = kind == UnitKind::kAttention || kind == UnitKind::kMlp || kind == UnitKind::kMoe;
    if (cp_attention(u)) {  // the input went with the projection; a2a's output goes back over cp first
      x = cp_attend(in, u, ms);
    } else {
      const bool head = kind == UnitKind::kHead;  // its output: the loss (tp > 1: fp32 statistics)
      x = backend().forward(in.chunk, u, ms.slot, kind == UnitKind::kMoe ? unit_tokens(ms, u) : batch, x.view(),
                            full_recompute_ && block).as(head ? Format::kFp32 : store_);
    }
    poll();
  }
  if (in.unit_end == program::head_unit(prog_.model) + 1 && tp_ == 1) {
    const float loss = backend().read(x.view(), 0);
    if (!std::isfinite(loss)) {
      throw NonFiniteError("step " + std::to_string(step_ + 1) + ", micro-batch " + std::to_string(in.mb) + ", stage " +
                           std::to_string(prog_.placement.stage_of(runner_.rank_)) + " (rank " +
                           std::to_string(runner_.rank_) + "): the loss is " + std::to_string(loss) +
                           "; the training diverged (a smaller --lr?) and stops before the optimizer uses it");
    }
    weighted_loss_ += static_cast<double>(loss) * loss_weight_;
    micro_losses_.emplace_back(in.mb, static_cast<double>(loss) / static_cast<double>(cp_));
    x = {};
  }
  ms.act = std::move(x);
}

void Runner::Interpreter::recompute(const Instr& in) {
  if (ep_moe(in.unit_begin)) return ep_recompute(in);  // interpreter_ep.cpp
  MicroState& ms = micro(in);
  for (int32_t u = in.unit_begin; u < in.unit_end; ++u) {
    if (cp_attention(u)) {  // the projection ran when the gather (or a2a) was posted; y was the forward's
      cp_attend(in, u, ms);
    } else {
      backend().recompute(in.chunk, u, ms.slot);
    }
    poll();
  }
}

void Runner::Interpreter::backward(const Instr& in, bool input_only) {
  if (ep_moe(in.unit_begin)) return ep_compute(in, true, input_only);
  MicroState& ms = micro(in);
  Buffer dy = std::move(ms.grad);
  if (in.unit_end == program::head_unit(prog_.model) + 1) {
    dy = backend().alloc(1);
    backend().fill(dy.view(), static_cast<float>(loss_weight_ * loss_scale_));  // fp16: the loss scaled by S
  }
  for (int32_t u = in.unit_end - 1; u >= in.unit_begin; --u) {
    if (cp_attention(u)) {  // dy went with the cp collective before; the last one finishes the pass
      ms.cp_out = backend().cp_attention(CpPhase::kBackwardAttend, in.chunk, u, ms.slot, dims_, ms.cp_in.view(), false);
      ms.cp_in = {};
    } else {
      dy = backend().backward(in.chunk, u, ms.slot, dy.view(), input_only).as(store_);
    }
    poll();
  }
  ms.grad = std::move(dy);
  maybe_retire(ms);
}

void Runner::Interpreter::backward_weight(const Instr& in) {
  MicroState& ms = micro(in);
  for (int32_t u = in.unit_end - 1; u >= in.unit_begin; --u) {
    backend().backward_weight(in.chunk, u, ms.slot);
    poll();
  }
  maybe_retire(ms);
}

// A micro-batch is done on this chunk when every unit's cache is released and nothing waits to
// be sent.
void Runner::Interpreter::maybe_retire(MicroState& ms) {
  if (!ms.act.empty() || !ms.grad.empty() || !ms.cp_in.empty() || !ms.cp_out.empty() || !ms.ep_in.empty() ||
      !ms.ep_out.empty()) {
    return;
  }
  if (!backend().slot_idle(ms.slot)) return;
  backend().clear_slot(ms.slot);
  ms = MicroState{};
}

float Runner::Interpreter::clip_scale_now() {
  if (!norm_known_) {  // one rank alone: no GradNormAllReduce in its Program
    norm_sq_ = backend().owned_grad_norm_sq();
    routed_ = take_routed();
    norm_known_ = true;
  }
  if (!std::isfinite(norm_sq_) && runner_.scaler_) {  // fp16: an overflow, the step is skipped
    overflow_ = true;
    return 0;
  }
  if (!std::isfinite(norm_sq_)) {
    throw NonFiniteError("step " + std::to_string(step_ + 1) + ", stage " + std::to_string(prog_.placement.stage_of(runner_.rank_)) +
                         " (rank " + std::to_string(runner_.rank_) + "): the gradient norm is " +
                         std::to_string(std::sqrt(norm_sq_)) + "; the training diverged and stops before the optimizer step");
  }
  // the gradients are S times their value: the norm is clipped unscaled, Adam reads g · clip / S
  const double s = loss_scale_;
  return static_cast<float>(clip_scale(std::sqrt(norm_sq_) / s, runner_.options_.max_grad_norm) / s);
}

// This stage's MoE units: f(chunk, unit, block, ordinal), ordinal counting the model's MoE layers
// before the unit's (its place in the routed counts, comm_rules.hpp router_bias_counts).
template <typename F>
void Runner::Interpreter::for_each_stage_moe_unit(F&& f) const {
  const spec::Model& m = prog_.model;
  const int64_t stage = prog_.placement.stage_of(runner_.rank_);
  for (int32_t c = 0; c < static_cast<int32_t>(prog_.plan.virtual_stages); ++c) {
    const program::ChunkInfo& chunk = prog_.chunk(stage, c);
    for (int32_t u = chunk.unit_begin; u < chunk.unit_end; ++u) {
      if (unit_kind(m, u) != UnitKind::kMoe) continue;
      const int64_t block = unit_block(m, u);
      int64_t ordinal = 0;
      for (int64_t l = 0; l < block; ++l) ordinal += m.moe_layer(l);
      f(c, u, block, ordinal);
    }
  }
}

// Every MoE layer of the model, in order: its routed copies per expert from this rank's units
// (other stages' layers stay zero), for the sum over the world.
std::vector<double> Runner::Interpreter::take_routed() {
  const int64_t E = prog_.model.moe.experts;
  std::vector<double> out(static_cast<std::size_t>(program::router_bias_counts(prog_.model)), 0.0);
  if (out.empty()) return out;
  for_each_stage_moe_unit([&](int32_t c, int32_t u, int64_t, int64_t ordinal) {
    const std::vector<int64_t> routed = backend().take_moe_routed(c, u);
    for (int64_t e = 0; e < E; ++e) out[static_cast<std::size_t>(ordinal * E + e)] = static_cast<double>(routed[static_cast<std::size_t>(e)]);
  });
  return out;
}

// Each MoE layer of this stage: its expert biases moved by the step's summed counts
// (expert_bias_update, u the training's moe_router_bias_update_rate). Megatron-Core does it in
// finalize_model_grads, before the optimizer step and whether or not fp16 then skips it.
void Runner::Interpreter::update_expert_biases() {
  if (routed_.empty()) return;
  const std::size_t E = static_cast<std::size_t>(prog_.model.moe.experts);
  const double rate = prog_.training.moe_router_bias_update_rate;
  for_each_stage_moe_unit([&](int32_t c, int32_t, int64_t block, int64_t ordinal) {
    const std::vector<float> delta = expert_bias_update(std::span<const double>(routed_).subspan(static_cast<std::size_t>(ordinal) * E, E), rate);
    backend().nudge_params(runner_.layout_.tensor(c, "block." + std::to_string(block) + ".mlp.router.b"), delta);
  });
}

void Runner::Interpreter::optimizer(const Instr& in) {
  const float clip = clip_scale_now();
  update_expert_biases();
  restore_stashes();  // qwZ: the exact shard back under the dequantized copy before it is stepped
  if (overflow_) {     // fp16: skipped, as the frameworks skip it (the parameters stay as they are)
    drop_secondaries();
    return;
  }
  if (in.flags & program::kFlagOnHost) {
    backend().host_optimizer_step(runner_.options_.adam, step_ + 1, clip);
  } else {
    backend().optimizer_step(runner_.options_.adam, step_ + 1, clip);
  }
  drop_secondaries();  // hpZ: stale now (DeepSpeed's _post_step invalidates them)
}

void Runner::Interpreter::offload_copy(const Instr& in) {
  if (in.flags & program::kFlagToHost) {
    backend().copy_grads_to_host();
  } else {
    backend().copy_params_from_host();
  }
}

void Runner::Interpreter::release_params(const Instr& in) {
  keep_secondary(in);        // hpZ: this rank's slice of the gathered bucket, before it goes
  restore_stash(in.bucket);  // qwZ: the exact shard under the dequantized copy
  backend().release(runner_.layout_.param_bucket(in.bucket));
  runner_.memory_.add(MemoryKind::kBuffers, -in.elems * bytes_of(store_));
}

void Runner::Interpreter::update_activation_memory() {
  int64_t bytes = backend().cache_bytes();
  for (const MicroState& ms : micro_) {
    if (!ms.active) continue;
    bytes += ms.act.bytes() + ms.grad.bytes() + ms.cp_in.bytes() + ms.cp_out.bytes() + ms.ep_in.bytes() + ms.ep_out.bytes();
    bytes += static_cast<int64_t>((ms.batch.inputs.capacity() + ms.batch.targets.capacity()) * sizeof(int32_t));
  }
  runner_.memory_.set(MemoryKind::kActivations, bytes);
}

}  // namespace stagecraft::executor
