#include "executor/zero/stage_state.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "executor/errors.hpp"
#include "executor/index.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor {

namespace {

constexpr float kReleased = std::numeric_limits<float>::quiet_NaN();

int64_t bytes_of(const std::vector<float>& v) { return static_cast<int64_t>(v.size() * sizeof(float)); }

}  // namespace

StageState::StageState(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only)
    : layout_(layout), offload_(offload && !forward_only), memory_(memory) {
  const int64_t padded = layout.padded_elems();
  params_.assign(at(padded), 0.0f);
  if (!forward_only) {
    const int64_t opt = layout.optimizer_range().size(), persistent = layout.persistent_elems();
    grads_.assign(at(padded), 0.0f);
    if (reduces_into_shard()) shard_grads_.assign(at(layout.shard_elems()), 0.0f);
    m_.assign(at(opt), 0.0f);
    v_.assign(at(opt), 0.0f);
    persistent_grads_.assign(at(persistent), 0.0f);
    persistent_m_.assign(at(persistent), 0.0f);
    persistent_v_.assign(at(persistent), 0.0f);
    if (offload_) {
      host_params_.assign(at(opt), 0.0f);
      host_grads_.assign(at(opt), 0.0f);
    }
  }
  // ZeRO-3 keeps its shard and the persistent tensors; gathered buckets count when gathered.
  int64_t kept = padded;
  if (layout.zero3_gathers()) kept = layout.shard_elems() + total(subtract(layout.persistent(), {layout.own_shard()}));
  memory_.set(MemoryKind::kParams, kept * static_cast<int64_t>(sizeof(float)));
  memory_.set(MemoryKind::kGrads, bytes_of(grads_) + bytes_of(shard_grads_) + bytes_of(persistent_grads_));
  memory_.set(MemoryKind::kOptimizer, bytes_of(m_) + bytes_of(v_) + bytes_of(persistent_m_) + bytes_of(persistent_v_) +
                                       bytes_of(host_params_) + bytes_of(host_grads_));
}

void StageState::init_params(uint64_t seed) {
  for (int64_t c = 0; c < layout_.chunk_count(); ++c) layout_.chunk(c).init<float>(chunk_params(c), seed);
  finish_init();
}

void StageState::init_params(ParamSource& source) {
  std::vector<Range> kept;
  if (layout_.zero3_gathers()) {
    kept = subtract(layout_.persistent(), {layout_.own_shard()});  // each position read once
    kept.push_back(layout_.own_shard());
  }
  for (int64_t c = 0; c < layout_.chunk_count(); ++c) {
    for (const TensorSlot& t : layout_.chunk(c).tensors()) {
      const Range tr{layout_.chunk_offset(c) + t.offset, layout_.chunk_offset(c) + t.offset + t.size()};
      const std::vector<Range> pieces = layout_.zero3_gathers() ? [&] {
        std::vector<Range> out;
        for (const Range& k : kept) {
          if (const Range i = intersect(tr, k); i.size() > 0) out.push_back(i);
        }
        return out;
      }() : std::vector<Range>{tr};
      for (const Range& r : pieces) {
        source.read(t, r.begin - tr.begin, r.end - tr.begin, std::span<float>(params_).subspan(at(r.begin), at(r.size())));
      }
    }
  }
  finish_init();
}

void StageState::finish_init() {
  if (layout_.zero3_gathers()) release({0, layout_.padded_elems()});
  if (offload_) {
    const Range opt = layout_.optimizer_range();
    std::copy(params_.begin() + opt.begin, params_.begin() + opt.end, host_params_.begin());
  }
}

std::span<float> StageState::chunk_params(int64_t c) {
  const Range r = layout_.chunk_range(c);
  return std::span<float>(params_).subspan(at(r.begin), at(r.size()));
}

std::span<float> StageState::chunk_grads(int64_t c) {
  const Range r = layout_.chunk_range(c);
  return std::span<float>(grads_).subspan(at(r.begin), at(r.size()));
}

void StageState::zero_grads() {
  for (std::vector<float>* v : {&grads_, &shard_grads_, &persistent_grads_}) std::fill(v->begin(), v->end(), 0.0f);
}

float StageState::grad_at(int64_t pos) const {
  if (reduces_into_shard()) return shard_grads_[at(pos - layout_.own_shard().begin)];
  return grads_[at(pos)];
}

namespace {
// Calls f(pos, where) for every position of `ranges`, with a pointer to where this rank keeps its
// reduced gradient, or null where it keeps none.
template <typename P, typename F>
void for_reduced(const StageLayout& layout, bool into_shard, const std::vector<Range>& ranges, P grads, P shard,
                 P persistent, F f) {
  const Range own = layout.own_shard();
  const std::vector<Range>& kept = layout.persistent();
  std::size_t k = 0;  // the persistent range at or after pos
  for (const Range& r : ranges) {
    for (int64_t pos = r.begin; pos < r.end; ++pos) {
      while (k < kept.size() && kept[k].end <= pos) ++k;
      P where = nullptr;
      if (k < kept.size() && kept[k].begin <= pos) {
        where = persistent + layout.persistent_index(pos);
      } else if (!into_shard) {
        where = grads + pos;
      } else if (pos >= own.begin && pos < own.end) {
        where = shard + (pos - own.begin);
      }
      f(where);
    }
  }
}
}  // namespace

std::vector<float> StageState::pack_reduced_grads(const std::vector<Range>& ranges) const {
  std::vector<float> out;
  for_reduced(layout_, reduces_into_shard(), ranges, grads_.data(), shard_grads_.data(), persistent_grads_.data(),
              [&](const float* where) { out.push_back(where ? *where : 0.0f); });
  return out;
}

void StageState::unpack_reduced_grads(const std::vector<Range>& ranges, std::span<const float> values) {
  std::size_t k = 0;
  for_reduced(layout_, reduces_into_shard(), ranges, grads_.data(), shard_grads_.data(), persistent_grads_.data(),
              [&](float* where) {
                if (k >= values.size()) throw ExecutorError("StageState: fewer values than positions to unpack");
                if (where) *where = values[k];
                ++k;
              });
  if (k != values.size()) throw ExecutorError("StageState: more values than positions to unpack");
}

double StageState::owned_grad_norm_sq() const {
  const Range own = layout_.own_shard();
  double sum = 0;
  for (const Range& r : subtract(subtract(own, layout_.persistent()), layout_.norm_excluded())) {
    for (int64_t p = r.begin; p < r.end; ++p) {
      const double g = grad_at(p);
      sum += g * g;
    }
  }
  for (const Range& r : subtract(clip(layout_.persistent(), own), layout_.norm_excluded())) {
    for (int64_t p = r.begin; p < r.end; ++p) {
      const double g = persistent_grads_[at(layout_.persistent_index(p))];
      sum += g * g;
    }
  }
  return sum;
}

std::vector<Range> StageState::sharded_ranges() const {
  return subtract(layout_.optimizer_range(), layout_.persistent());
}

// AdamW over the sharded ranges; params_base and grads_base cover optimizer_range().
void StageState::step_ranges(const AdamWConfig& cfg, int64_t step, float clip_scale, std::span<float> params_base,
                             std::span<const float> grads_base) {
  const int64_t first = layout_.optimizer_range().begin;
  for (const Range& r : sharded_ranges()) {
    const std::size_t off = at(r.begin - first), n = at(r.size());
    const AdamWShard shard{r.begin, params_base.subspan(off, n), grads_base.subspan(off, n),
                           std::span<float>(m_).subspan(off, n), std::span<float>(v_).subspan(off, n)};
    adamw_step(cfg, step, shard, layout_.decayed(), clip_scale);
  }
}

void StageState::step_persistent(const AdamWConfig& cfg, int64_t step, float clip_scale) {
  for (const Range& r : layout_.persistent()) {
    const std::size_t k = at(layout_.persistent_index(r.begin)), n = at(r.size());
    const AdamWShard shard{r.begin, std::span<float>(params_).subspan(at(r.begin), n),
                           std::span<const float>(persistent_grads_).subspan(k, n),
                           std::span<float>(persistent_m_).subspan(k, n), std::span<float>(persistent_v_).subspan(k, n)};
    adamw_step(cfg, step, shard, layout_.decayed(), clip_scale);
  }
}

void StageState::optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale) {
  const Range opt = layout_.optimizer_range();
  std::span<float> params = std::span<float>(params_).subspan(at(opt.begin), at(opt.size()));
  std::span<const float> grads = reduces_into_shard()
                                     ? std::span<const float>(shard_grads_)
                                     : std::span<const float>(grads_).subspan(at(opt.begin), at(opt.size()));
  step_ranges(cfg, step, clip_scale, params, grads);
  step_persistent(cfg, step, clip_scale);
}

void StageState::copy_grads_to_host() {
  if (!offload_) throw ExecutorError("StageState: OffloadCopy in a plan without optimizer offload");
  const Range opt = layout_.optimizer_range();
  for (int64_t p = opt.begin; p < opt.end; ++p) host_grads_[at(p - opt.begin)] = grad_at(p);
}

void StageState::host_optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale) {
  if (!offload_) throw ExecutorError("StageState: host optimizer step in a plan without optimizer offload");
  step_ranges(cfg, step, clip_scale, host_params_, host_grads_);
  step_persistent(cfg, step, clip_scale);
}

void StageState::copy_params_from_host() {
  if (!offload_) throw ExecutorError("StageState: OffloadCopy in a plan without optimizer offload");
  const int64_t first = layout_.optimizer_range().begin;
  for (const Range& r : sharded_ranges()) {
    std::copy(host_params_.begin() + (r.begin - first), host_params_.begin() + (r.end - first), params_.begin() + r.begin);
  }
}

void StageState::release(Range r) {
  if (!layout_.zero3_gathers()) throw ExecutorError("StageState: ReleaseParams outside ZeRO-3 with dp > 1");
  for (const Range& d : subtract(subtract(r, {layout_.own_shard()}), layout_.persistent())) {
    std::fill(params_.begin() + d.begin, params_.begin() + d.end, kReleased);
  }
}

// ---- checkpoint -----------------------------------------------------------------------------------

int64_t StageState::owned_state_elems() const {
  return 3 * layout_.optimizer_range().size() + 3 * layout_.persistent_elems();
}

std::vector<float> StageState::owned_state() const {
  const Range opt = layout_.optimizer_range();
  std::vector<float> out(params_.begin() + opt.begin, params_.begin() + opt.end);
  out.insert(out.end(), m_.begin(), m_.end());
  out.insert(out.end(), v_.begin(), v_.end());
  for (const Range& r : layout_.persistent()) out.insert(out.end(), params_.begin() + r.begin, params_.begin() + r.end);
  out.insert(out.end(), persistent_m_.begin(), persistent_m_.end());
  out.insert(out.end(), persistent_v_.begin(), persistent_v_.end());
  return out;
}

void StageState::load_owned_state(std::span<const float> state) {
  if (static_cast<int64_t>(state.size()) != owned_state_elems()) {
    throw CheckpointError("stage " + std::to_string(layout_.stage()) + ", dp rank " +
                          std::to_string(layout_.dp_index()) + ": checkpoint state has " +
                          std::to_string(state.size()) + " values, expected " + std::to_string(owned_state_elems()));
  }
  const Range opt = layout_.optimizer_range();
  const std::size_t n = at(opt.size()), pn = at(layout_.persistent_elems());
  if (layout_.zero3_gathers()) std::fill(params_.begin(), params_.end(), kReleased);
  auto next = state.begin();
  std::copy(next, next + n, params_.begin() + opt.begin);
  std::copy(next + n, next + 2 * n, m_.begin());
  std::copy(next + 2 * n, next + 3 * n, v_.begin());
  next += 3 * n;
  for (const Range& r : layout_.persistent()) {
    std::copy(next, next + r.size(), params_.begin() + r.begin);
    next += r.size();
  }
  std::copy(next, next + pn, persistent_m_.begin());
  std::copy(next + pn, next + 2 * pn, persistent_v_.begin());
  if (offload_) std::copy(params_.begin() + opt.begin, params_.begin() + opt.end, host_params_.begin());
}

void StageState::load_peer_shard(int64_t dp_index, std::span<const float> peer_state) {
  const Range r = layout_.shard(dp_index);
  if (static_cast<int64_t>(peer_state.size()) < r.size()) {
    throw CheckpointError("stage " + std::to_string(layout_.stage()) + ": dp rank " + std::to_string(dp_index) +
                          "'s checkpoint holds fewer values than its shard of " + std::to_string(r.size()));
  }
  std::copy(peer_state.begin(), peer_state.begin() + r.size(), params_.begin() + r.begin);
}

}  // namespace stagecraft::executor
