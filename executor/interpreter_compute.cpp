// The Program interpreter's compute instructions: Forward, Recompute, Backward, BackwardInput,
// BackwardWeight over the segment's units, the optimizer step, offload copies, ZeRO-3 release.
#include "executor/interpreter.hpp"

#include <cmath>

#include "core/program/units.hpp"
#include "executor/errors.hpp"

namespace stagecraft::executor {

using namespace interp;  // the interpreter's own names (interpreter.hpp)

// ---- compute ----------------------------------------------------------------------------------------

Runner::Interpreter::MicroState& Runner::Interpreter::micro(const Instr& in) {
  MicroState& ms = micro_.at(at(in.chunk * prog_.plan.micro_batches + in.mb));
  if (!ms.active) {
    ms.active = true;
    ms.caches.resize(layers_.at(at(in.chunk)).size());
  }
  return ms;
}

void Runner::Interpreter::ensure_batch(MicroState& ms, const Instr& in) {
  const int32_t head = program::head_unit(prog_.model);
  const bool needs_tokens = in.unit_begin == 0 || in.unit_end == head + 1;
  if (!needs_tokens || ms.has_batch) return;
  const int64_t per_rank = prog_.plan.micro_batch * prog_.plan.micro_batches;
  const int64_t first = dp_index_ * per_rank + in.mb * prog_.plan.micro_batch;
  ms.batch = runner_.corpus_.sample(step_, first, prog_.plan.micro_batch);
  ms.has_batch = true;
}

TokenBatch Runner::Interpreter::tokens(const MicroState& ms) const {
  if (ms.has_batch) return ms.batch.view();
  return TokenBatch{{prog_.plan.micro_batch, prog_.model.seq_len}, {}, {}};
}

const Layer<float>& Runner::Interpreter::layer(int32_t chunk, int32_t unit) const {
  const std::vector<Layer<float>>& units = layers_.at(at(chunk));
  return units.at(at(unit - units.front().unit()));
}

UnitCache<float>& Runner::Interpreter::cache(MicroState& ms, int32_t chunk, int32_t unit) {
  return ms.caches.at(at(unit - layers_.at(at(chunk)).front().unit()));
}

void Runner::Interpreter::forward(const Instr& in) {
  MicroState& ms = micro(in);
  ensure_batch(ms, in);
  const TokenBatch batch = tokens(ms);
  std::span<const float> params = runner_.state_.chunk_params(in.chunk);
  std::vector<float> x = std::move(ms.act);
  for (int32_t u = in.unit_begin; u < in.unit_end; ++u) {
    const Layer<float>& l = layer(in.chunk, u);
    std::vector<float> y(at(l.output_size(batch.dims)));
    const bool block = l.kind() == UnitKind::kAttention || l.kind() == UnitKind::kMlp;
    l.forward(batch, params, x, y, cache(ms, in.chunk, u), full_recompute_ && block ? CacheMode::kInputOnly : CacheMode::kFull);
    x = std::move(y);
    poll();
  }
  if (in.unit_end == program::head_unit(prog_.model) + 1 && tp_ == 1) {
    if (!std::isfinite(x.at(0))) {
      throw NonFiniteError("step " + std::to_string(step_ + 1) + ", micro-batch " + std::to_string(in.mb) + ", stage " +
                           std::to_string(prog_.placement.stage_of(runner_.rank_)) + " (rank " +
                           std::to_string(runner_.rank_) + "): the loss is " + std::to_string(x.at(0)) +
                           "; the training diverged (a smaller --lr?) and stops before the optimizer uses it");
    }
    weighted_loss_ += static_cast<double>(x.at(0)) * loss_weight_;
    micro_losses_.emplace_back(in.mb, static_cast<double>(x.at(0)));
    x.clear();
  }
  ms.act = std::move(x);
}

void Runner::Interpreter::recompute(const Instr& in) {
  MicroState& ms = micro(in);
  std::span<const float> params = runner_.state_.chunk_params(in.chunk);
  for (int32_t u = in.unit_begin; u < in.unit_end; ++u) {
    layer(in.chunk, u).recompute(params, cache(ms, in.chunk, u));
    poll();
  }
}

void Runner::Interpreter::backward(const Instr& in, bool input_only) {
  MicroState& ms = micro(in);
  std::span<const float> params = runner_.state_.chunk_params(in.chunk);
  std::span<float> grads = runner_.state_.chunk_grads(in.chunk);
  std::vector<float> dy = std::move(ms.grad);
  if (in.unit_end == program::head_unit(prog_.model) + 1) dy.assign(1, loss_weight_);
  for (int32_t u = in.unit_end - 1; u >= in.unit_begin; --u) {
    const Layer<float>& l = layer(in.chunk, u);
    UnitCache<float>& c = cache(ms, in.chunk, u);
    std::vector<float> dx(at(l.input_size(c.dims)));
    if (input_only) {
      l.backward_input(params, dy, dx, c);
    } else {
      l.backward(params, dy, dx, grads, c);
      if (!c.input_grad_partial) c.clear();  // else the tp all-reduce after it finishes the gradients
    }
    dy = std::move(dx);
    poll();
  }
  ms.grad = std::move(dy);
  maybe_retire(ms);
}

void Runner::Interpreter::backward_weight(const Instr& in) {
  MicroState& ms = micro(in);
  std::span<float> grads = runner_.state_.chunk_grads(in.chunk);
  for (int32_t u = in.unit_end - 1; u >= in.unit_begin; --u) {
    UnitCache<float>& c = cache(ms, in.chunk, u);
    layer(in.chunk, u).backward_weight(grads, c);
    c.clear();
    poll();
  }
  maybe_retire(ms);
}

// A micro-batch is done on this chunk when every unit's cache is released and nothing waits to
// be sent.
void Runner::Interpreter::maybe_retire(MicroState& ms) {
  if (!ms.act.empty() || !ms.grad.empty()) return;
  for (const UnitCache<float>& c : ms.caches) {
    if (c.dims.rows() != 0) return;
  }
  ms = MicroState{};
}

float Runner::Interpreter::clip_scale_now() {
  if (!norm_known_) {  // one rank alone: no GradNormAllReduce in its Program
    norm_sq_ = runner_.state_.owned_grad_norm_sq();
    norm_known_ = true;
  }
  if (!std::isfinite(norm_sq_)) {
    throw NonFiniteError("step " + std::to_string(step_ + 1) + ", stage " + std::to_string(prog_.placement.stage_of(runner_.rank_)) +
                         " (rank " + std::to_string(runner_.rank_) + "): the gradient norm is " +
                         std::to_string(std::sqrt(norm_sq_)) + "; the training diverged and stops before the optimizer step");
  }
  return clip_scale(std::sqrt(norm_sq_), runner_.options_.max_grad_norm);
}

void Runner::Interpreter::optimizer(const Instr& in) {
  const float clip = clip_scale_now();
  if (in.flags & program::kFlagOnHost) {
    runner_.state_.host_optimizer_step(runner_.options_.adam, step_ + 1, clip);
  } else {
    runner_.state_.optimizer_step(runner_.options_.adam, step_ + 1, clip);
  }
}

void Runner::Interpreter::offload_copy(const Instr& in) {
  if (in.flags & program::kFlagToHost) {
    runner_.state_.copy_grads_to_host();
  } else {
    runner_.state_.copy_params_from_host();
  }
}

void Runner::Interpreter::release_params(const Instr& in) {
  runner_.state_.release(runner_.layout_.param_bucket(in.bucket));
  runner_.memory_.add(MemoryKind::kBuffers, -in.elems * static_cast<int64_t>(sizeof(float)));
}

void Runner::Interpreter::update_activation_memory() {
  int64_t bytes = 0;
  auto add = [&](const auto& v) { bytes += static_cast<int64_t>(v.capacity() * sizeof(v[0])); };
  for (const MicroState& ms : micro_) {
    if (!ms.active) continue;
    add(ms.act);
    add(ms.grad);
    add(ms.batch.inputs);
    add(ms.batch.targets);
    for (const UnitCache<float>& c : ms.caches) {
      add(c.tokens);
      for (const std::vector<float>* v : {&c.input, &c.xhat, &c.rstd, &c.a, &c.qkv, &c.probs, &c.mid, &c.pre, &c.pre2,
                                          &c.d_out, &c.d_pre, &c.d_pre2, &c.d_a, &c.lse}) {
        add(*v);
      }
    }
  }
  runner_.memory_.set(MemoryKind::kActivations, bytes);
}

}  // namespace stagecraft::executor
