#include "executor/cpu_backend.hpp"

#include <algorithm>
#include <string>

#include "executor/errors.hpp"
#include "executor/index.hpp"
#include "executor/pool.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor {

namespace {

// A buffer from the host's caching pool (pool.hpp), zero-filled, back to the pool when dropped.
struct HostStorage final : Buffer::Storage {
  explicit HostStorage(int64_t elems) {
    auto* p = static_cast<float*>(host_pool().allocate(at(elems) * sizeof(float)));
    data = std::span<float>(p, at(elems));
    std::fill(data.begin(), data.end(), 0.0f);
  }
  ~HostStorage() override { host_pool().release(data.data()); }
  HostStorage(const HostStorage&) = delete;
  HostStorage& operator=(const HostStorage&) = delete;
};

void check_sizes(const char* what, std::size_t dst, std::size_t src) {
  if (dst != src) {
    throw ExecutorError(std::string("CpuBackend::") + what + ": " + std::to_string(src) + " elements into " +
                        std::to_string(dst));
  }
}

}  // namespace

CpuBackend::CpuBackend(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only, int64_t slots)
    : layout_(layout), state_(layout, offload, memory, forward_only), caches_(at(slots)) {
  kernels_.format = layout.precision().store;
  for (int64_t c = 0; c < layout.chunk_count(); ++c) {
    const ParamLayout& l = layout.chunk(c);
    std::vector<Unit> units;
    for (int64_t u = l.begin(); u < l.end(); ++u) units.emplace_back(l, u, kernels_);
    layers_.push_back(std::move(units));
  }
}

// ---- buffers ------------------------------------------------------------------------------------

Buffer CpuBackend::alloc(int64_t elems) { return Buffer(std::make_unique<HostStorage>(elems)); }

void CpuBackend::copy(std::span<float> dst, std::span<const float> src) {
  check_sizes("copy", dst.size(), src.size());
  std::copy(src.begin(), src.end(), dst.begin());
}

void CpuBackend::add(std::span<float> dst, std::span<const float> src) {
  check_sizes("add", dst.size(), src.size());
  for (std::size_t k = 0; k < dst.size(); ++k) dst[k] += src[k];
}

void CpuBackend::fill(std::span<float> dst, float value) { std::fill(dst.begin(), dst.end(), value); }

float CpuBackend::read(std::span<const float> src, int64_t index) { return src[at(index)]; }

// Each cached tensor at its format's width: the stored activations (and kept input gradients) in
// the storage format, what the kernels keep in fp32 (x̂, rstd, probabilities, log-sum-exp) at 4.
int64_t CpuBackend::cache_bytes() const {
  const int64_t stored = bytes_of(kernels_.format);
  int64_t bytes = 0;
  for (const std::vector<UnitCache<float>>& slot : caches_) {
    for (const UnitCache<float>& c : slot) {
      bytes += static_cast<int64_t>(c.tokens.capacity() * sizeof(int32_t));
      for (const std::vector<float>* v : {&c.input, &c.a, &c.qkv, &c.mid, &c.pre, &c.pre2, &c.d_out, &c.d_pre, &c.d_pre2,
                                          &c.d_a, &c.cp_qkv}) {
        bytes += static_cast<int64_t>(v->capacity()) * stored;
      }
      for (const std::vector<float>* v : {&c.xhat, &c.rstd, &c.probs, &c.lse}) {
        bytes += static_cast<int64_t>(v->capacity() * sizeof(float));
      }
    }
  }
  return bytes;
}

// ---- units --------------------------------------------------------------------------------------

const CpuBackend::Unit& CpuBackend::layer(int32_t chunk, int32_t unit) const {
  const std::vector<Unit>& units = layers_.at(at(chunk));
  return units.at(at(unit - units.front().unit()));
}

UnitCache<float>& CpuBackend::cache(int32_t chunk, int32_t unit, int64_t slot) {
  std::vector<UnitCache<float>>& caches = caches_.at(at(slot));
  const std::vector<Unit>& units = layers_.at(at(chunk));
  if (caches.empty()) caches.resize(units.size());
  return caches.at(at(unit - units.front().unit()));
}

Buffer CpuBackend::forward(int32_t chunk, int32_t unit, int64_t slot, const TokenBatch& batch, std::span<const float> x,
                           bool input_only) {
  const Unit& l = layer(chunk, unit);
  Buffer y = alloc(l.output_size(batch.dims));
  l.forward(batch, state_.chunk_params(chunk), x, y.view(), cache(chunk, unit, slot),
            input_only ? CacheMode::kInputOnly : CacheMode::kFull);
  return y;
}

void CpuBackend::recompute(int32_t chunk, int32_t unit, int64_t slot) {
  layer(chunk, unit).recompute(state_.chunk_params(chunk), cache(chunk, unit, slot));
}

Buffer CpuBackend::backward(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> dy, bool input_only) {
  const Unit& l = layer(chunk, unit);
  UnitCache<float>& c = cache(chunk, unit, slot);
  Buffer dx = alloc(l.input_size(c.dims));
  if (input_only) {
    l.backward_input(state_.chunk_params(chunk), dy, dx.view(), c);
  } else {
    l.backward(state_.chunk_params(chunk), dy, dx.view(), state_.chunk_grads(chunk), c);
    if (!c.input_grad_partial) c.clear();  // else the tp all-reduce after it finishes the gradients
  }
  return dx;
}

void CpuBackend::backward_weight(int32_t chunk, int32_t unit, int64_t slot) {
  UnitCache<float>& c = cache(chunk, unit, slot);
  layer(chunk, unit).backward_weight(state_.chunk_grads(chunk), c);
  c.clear();
}

Buffer CpuBackend::finish_input_grad(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> d_a, int64_t row0) {
  UnitCache<float>& c = cache(chunk, unit, slot);
  Buffer dx = alloc(static_cast<int64_t>(d_a.size()));
  if (layer(chunk, unit).finish_input_grad(state_.chunk_params(chunk), d_a, dx.view(), state_.chunk_grads(chunk), c, row0)) {
    c.clear();
  }
  return dx;
}

float CpuBackend::finish_loss(int32_t chunk, int32_t unit, int64_t slot, std::span<const float> reduced) {
  return layer(chunk, unit).finish_loss(reduced, cache(chunk, unit, slot));
}

Buffer CpuBackend::cp_attention(CpPhase phase, int32_t chunk, int32_t unit, int64_t slot, const Dims& dims,
                                std::span<const float> in, bool flag) {
  const Unit& l = layer(chunk, unit);
  UnitCache<float>& c = cache(chunk, unit, slot);
  const std::span<const float> params = state_.chunk_params(chunk);
  const bool fresh = phase == CpPhase::kProject && !in.empty();  // a forward's, not a Recompute's
  Buffer out = alloc(l.cp_sizes(fresh ? dims : c.dims, phase).out);
  switch (phase) {
    case CpPhase::kProject: l.cp_project(dims, params, in, flag, out.view(), c); break;
    case CpPhase::kAttend: l.cp_attend(params, in, out.view(), c); break;
    case CpPhase::kFinishForward: l.cp_finish_forward(params, in, out.view(), c); break;
    case CpPhase::kBackwardSend: l.cp_backward_send(params, in, out.view(), c); break;
    case CpPhase::kBackwardAttend: l.cp_backward_attend(params, in, out.view(), c); break;
    case CpPhase::kBackwardFinish:
      l.cp_backward_finish(params, in, out.view(), state_.chunk_grads(chunk), flag, c);
      if (!flag && !c.input_grad_partial) c.clear();  // else backward_weight or finish_input_grad reads it
      break;
  }
  return out;
}

std::vector<double> CpuBackend::moe_loss_counts(int32_t chunk, int32_t unit, int64_t slot) {
  const UnitCache<float>& c = cache(chunk, unit, slot);
  if (c.moe_loss_counts.empty()) {
    throw ExecutorError("unit " + std::to_string(unit) + " of chunk " + std::to_string(chunk) +
                        " has no balancing-loss counts: its route has not run in this pass");
  }
  return c.moe_loss_counts;
}

void CpuBackend::set_moe_loss_counts(int32_t chunk, int32_t unit, int64_t slot, std::span<const double> sums, int64_t ranks) {
  UnitCache<float>& c = cache(chunk, unit, slot);
  if (sums.size() != c.moe_loss_counts.size()) {
    throw ExecutorError("unit " + std::to_string(unit) + ": " + std::to_string(sums.size()) + " summed counts for " +
                        std::to_string(c.moe_loss_counts.size()) + " experts");
  }
  std::copy(sums.begin(), sums.end(), c.moe_loss_counts.begin());
  c.moe_loss_tokens *= static_cast<double>(ranks);
}

Buffer CpuBackend::moe(MoePhase phase, int32_t chunk, int32_t unit, int64_t slot, const TokenBatch& batch,
                       std::span<const float> in, std::span<int64_t> counts, bool flag) {
  const Unit& l = layer(chunk, unit);
  UnitCache<float>& c = cache(chunk, unit, slot);
  const std::span<const float> params = state_.chunk_params(chunk);
  const int64_t h = layout_.chunk(chunk).model().hidden;
  const int64_t routed = l.moe_rows(phase == MoePhase::kDispatch ? batch.dims : c.dims) * h;
  Buffer out;
  switch (phase) {
    case MoePhase::kDispatch:
      out = alloc(routed);
      l.moe_dispatch(batch, params, in, out.view(), counts, c, flag);
      break;
    case MoePhase::kExperts:
      out = alloc(static_cast<int64_t>(in.size()));
      l.moe_experts(params, in, counts, out.view(), c);
      break;
    case MoePhase::kCombine:
      out = alloc(l.output_size(c.dims));
      l.moe_combine(in, out.view(), c, flag);
      break;
    case MoePhase::kBackwardSend:
      out = alloc(routed);
      l.moe_backward_send(params, in, out.view(), c);
      break;
    case MoePhase::kExpertsBackward:
      out = alloc(static_cast<int64_t>(in.size()));
      l.moe_experts_backward(params, in, out.view(), state_.chunk_grads(chunk), flag, c);
      break;
    case MoePhase::kBackwardFinish:
      out = alloc(l.input_size(c.dims));
      l.moe_backward_finish(params, in, out.view(), state_.chunk_grads(chunk), flag, c);
      if (flag && !c.input_grad_partial) c.clear();  // else backward_weight reads it, or the tp collective finishes it
      break;
  }
  return out;
}

void CpuBackend::vocab_parallel_rescale(std::span<const float> local_stats, std::span<const float> global_max,
                                        std::span<float> out) {
  executor::vocab_parallel_rescale<float>(local_stats, global_max, out);
}

bool CpuBackend::slot_idle(int64_t slot) const {
  for (const UnitCache<float>& c : caches_.at(at(slot))) {
    if (c.dims.rows() != 0) return false;
  }
  return true;
}

void CpuBackend::clear_slot(int64_t slot) { caches_.at(at(slot)).clear(); }

}  // namespace stagecraft::executor
