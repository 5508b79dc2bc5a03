// LayerT's and UnitCacheT's members, over any kernel set (layers.hpp); layers.cpp instantiates
// them for the host kernels, executor/cuda for the device's. Internal: include layers.hpp.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/model/layers.hpp"
#include "executor/model/units_impl.hpp"
#include "executor/model/attention_cp_impl.hpp"
#include "executor/model/moe_impl.hpp"

namespace stagecraft::executor {

namespace detail {

template <typename V>
void release(V& v) {
  V().swap(v);
}

// One forward of the unit's math; the head returns the loss (written to y[0]).
template <typename S, typename K>
void run_forward(K& k, const spec::Model& m, UnitKind kind, const UnitSlots& s, const S* params, const S* x, S* y,
                 UnitCacheT<S, K>& c) {
  switch (kind) {
    case UnitKind::kEmbedding: detail::embedding_forward(k, m, s, params, y, c); return;
    case UnitKind::kAttention: detail::attention_forward(k, m, s, params, x, y, c); return;
    case UnitKind::kMlp: detail::mlp_forward(k, m, s, params, x, y, c); return;
    case UnitKind::kMoe: detail::moe_forward(k, m, s, params, x, y, c); return;
    case UnitKind::kHead:
      if (s.tp > 1) {
        detail::head_forward_partial(k, m, s, params, x, y, c);
      } else {
        k.store(y, detail::head_forward(k, m, s, params, x, c));
      }
      return;
  }
}


}  // namespace detail

template <typename Scalar, typename K>
void UnitCacheT<Scalar, K>::release_intermediates() {
  for (Vec<Scalar>* v : {&xhat, &rstd, &a, &qkv, &probs, &mid, &pre, &pre2, &d_out, &d_pre, &d_pre2, &d_a, &lse, &cp_qkv,
                         &qn_hat, &qn_rstd, &kn_hat, &kn_rstd, &qn_dy, &kn_dy,
                         &moe_gate, &moe_x, &moe_y, &moe_dy, &moe_xe, &moe_dye, &moe_dlogits, &sh_pre, &sh_pre2, &sh_mid,
                         &sh_out, &sh_gate, &sh_dout, &sh_d_pre, &sh_d_pre2, &sh_dgate}) {
    detail::release(*v);
  }
  for (Vec<int32_t>* v : {&moe_route, &moe_order, &moe_offsets, &moe_eperm, &moe_eoffsets}) detail::release(*v);
  full = false;
  input_grad_done = false;
  input_grad_partial = false;
  norm_grad_pending = false;
  norm_row0 = 0;
}

template <typename Scalar, typename K>
void UnitCacheT<Scalar, K>::clear() {
  release_intermediates();
  detail::release(tokens);
  detail::release(input);
  dims = {};
  moe_aux_grad = 0;
  moe_aux_loss = 0;
  moe_loss_counts.clear();
  moe_loss_tokens = 0;
}

template <typename Scalar, typename K>
LayerT<Scalar, K>::LayerT(const ParamLayout& layout, int64_t unit, K& kernels)
    : k_(&kernels),
      model_(layout.model()), layout_size_(layout.size()), unit_(unit), kind_(unit_kind(layout.model(), unit)) {
  if (!layout.holds(unit)) {
    throw std::invalid_argument("Layer: unit " + std::to_string(unit) + " (" + unit_name(model_, unit) +
                                ") is not in the layout's units [" + std::to_string(layout.begin()) + ", " +
                                std::to_string(layout.end()) + ")");
  }
  if (const std::vector<std::string> missing = unsupported_features(model_); !missing.empty()) {
    std::string list;
    for (const std::string& f : missing) list += (list.empty() ? "" : ", ") + f;
    throw std::invalid_argument("Layer: model '" + model_.name + "' has what the CPU executor does not run: " + list);
  }
  if (kind_ == UnitKind::kAttention && (model_.kv_heads <= 0 || model_.heads % model_.kv_heads != 0 ||
                                       (model_.position == spec::Position::kRope && model_.head_dim() % 2 != 0))) {
    throw std::invalid_argument("Layer " + unit_name(model_, unit) + ": heads " + std::to_string(model_.heads) +
                                " need a kv_heads divisor (got " + std::to_string(model_.kv_heads) +
                                ") and, with RoPE, an even head_dim (got " + std::to_string(model_.head_dim()) + ")");
  }
  if (const int64_t t = layout.tp(); t > 1 && (model_.heads % t != 0 || model_.kv_heads % t != 0 || model_.ffn_hidden % t != 0)) {
    throw std::invalid_argument("Layer " + unit_name(model_, unit) + ": tp " + std::to_string(t) +
                                " must divide heads " + std::to_string(model_.heads) + ", kv_heads " +
                                std::to_string(model_.kv_heads) + " and ffn_hidden " + std::to_string(model_.ffn_hidden));
  }
  slots_ = detail::resolve_slots(layout, unit);
}

template <typename Scalar, typename K>
int64_t LayerT<Scalar, K>::input_size(Dims d) const {
  return kind_ == UnitKind::kEmbedding ? 0 : d.rows() * model_.hidden;
}

template <typename Scalar, typename K>
int64_t LayerT<Scalar, K>::output_size(Dims d) const {
  if (kind_ == UnitKind::kHead) return slots_.tp > 1 ? 3 * d.rows() : 1;
  return d.rows() * model_.hidden;
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::check_buffer(const char* what, std::size_t got, int64_t want) const {
  if (static_cast<int64_t>(got) != want) {
    throw std::invalid_argument("Layer " + unit_name(model_, unit_) + ": " + what + " has " + std::to_string(got) +
                                " elements, expected " + std::to_string(want));
  }
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::check_tokens(std::span<const int32_t> ids, const char* what, int64_t rows) const {
  check_buffer(what, ids.size(), rows);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= model_.vocab) {
      throw std::out_of_range("Layer " + unit_name(model_, unit_) + ": " + what + "[" + std::to_string(i) +
                              "] = " + std::to_string(ids[i]) + " is outside the vocab [0, " +
                              std::to_string(model_.vocab) + ")");
    }
  }
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::forward(const TokenBatch& batch, std::span<const Scalar> params, std::span<const Scalar> x,
                            std::span<Scalar> y, UnitCacheT<Scalar, K>& cache, CacheMode mode) const {
  const Dims d = batch.dims;
  // a MoE unit takes any rows (under sequence parallelism its 1/tp of the micro-batch's tokens)
  if (d.batch <= 0 || d.seq <= 0 || (d.seq > model_.seq_len && kind_ != UnitKind::kMoe)) {
    throw std::invalid_argument("Layer " + unit_name(model_, unit_) + ": micro-batch " + std::to_string(d.batch) +
                                " x " + std::to_string(d.seq) + " needs positive sizes and seq <= seq_len " +
                                std::to_string(model_.seq_len));
  }
  if (kind_ == UnitKind::kAttention && d.cp.size > 1) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": context-parallel attention runs in phases (cp_project ...)");
  }
  check_buffer("params", params.size(), layout_size_);
  check_buffer("input", x.size(), input_size(d));
  check_buffer("output", y.size(), output_size(d));
  cache.release_intermediates();
  cache.dims = d;
  cache.moe_aux_grad = batch.moe_aux_grad;
  cache.tokens.clear();
  if (kind_ == UnitKind::kEmbedding) check_tokens(batch.inputs, "inputs", d.rows());
  if (kind_ == UnitKind::kHead) check_tokens(batch.targets, "targets", d.rows());
  if (kind_ == UnitKind::kEmbedding) k_->upload(cache.tokens, batch.inputs.data(), d.rows());
  if (kind_ == UnitKind::kHead) k_->upload(cache.tokens, batch.targets.data(), d.rows());
  const bool keep_input = mode == CacheMode::kInputOnly && kind_ != UnitKind::kEmbedding;
  if (keep_input) {
    k_->assign(cache.input, x.data(), static_cast<int64_t>(x.size()));
  } else {
    cache.input.clear();
  }
  detail::run_forward(*k_, model_, kind_, slots_, params.data(), x.data(), y.data(), cache);
  cache.full = true;
  count_routed(cache);
  if (keep_input) cache.release_intermediates();
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::count_routed(const Cache& cache) const {
  if (kind_ != UnitKind::kMoe || !model_.moe.router_bias) return;
  if constexpr (K::kHost) {
    routed_.resize(static_cast<std::size_t>(model_.moe.experts), 0);
    for (int64_t e = 0; e < model_.moe.experts; ++e) routed_[static_cast<std::size_t>(e)] += static_cast<int64_t>(detail::expert_count(cache, e));
  }
}

template <typename Scalar, typename K>
std::vector<int64_t> LayerT<Scalar, K>::take_routed() const {
  std::vector<int64_t> out(static_cast<std::size_t>(model_.moe.experts), 0);
  if (!routed_.empty()) out.swap(routed_);
  routed_.assign(static_cast<std::size_t>(model_.moe.experts), 0);
  return out;
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::recompute(std::span<const Scalar> params, UnitCacheT<Scalar, K>& cache) const {
  if (cache.full) return;
  check_buffer("params", params.size(), layout_size_);
  if (cache.dims.rows() == 0 || static_cast<int64_t>(cache.input.size()) != input_size(cache.dims)) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": recompute without a forward that kept the input");
  }
  typename K::template Vec<Scalar> scratch;
  scratch.resize(static_cast<std::size_t>(output_size(cache.dims)));
  detail::run_forward(*k_, model_, kind_, slots_, params.data(), cache.input.data(), scratch.data(), cache);
  cache.full = true;
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::backward_input(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> dx,
                                   UnitCacheT<Scalar, K>& cache) const {
  if (cache.dims.rows() == 0) throw std::logic_error("Layer " + unit_name(model_, unit_) + ": backward before forward");
  if (kind_ == UnitKind::kAttention && cache.dims.cp.size > 1) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": context-parallel attention runs in phases (cp_backward_send ...)");
  }
  check_buffer("params", params.size(), layout_size_);
  check_buffer("output gradient", dy.size(), kind_ == UnitKind::kHead ? 1 : output_size(cache.dims));  // dL/dloss
  check_buffer("input gradient", dx.size(), input_size(cache.dims));
  recompute(params, cache);
  const Scalar* p = params.data();
  switch (kind_) {
    case UnitKind::kEmbedding: detail::embedding_backward_input(*k_, model_, dy.data(), cache); break;
    case UnitKind::kAttention: detail::attention_backward_input(*k_, model_, slots_, p, dy.data(), dx.data(), cache); break;
    case UnitKind::kMlp: detail::mlp_backward_input(*k_, model_, slots_, p, dy.data(), dx.data(), cache); break;
    case UnitKind::kHead: detail::head_backward_input(*k_, model_, slots_, p, k_->load(dy.data()), dx.data(), cache); break;
    case UnitKind::kMoe: detail::moe_backward_input(*k_, model_, slots_, p, dy.data(), dx.data(), cache); break;
  }
  cache.input_grad_done = true;
  cache.input_grad_partial = reduces_input_grad();
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::backward_weight(std::span<Scalar> grads, UnitCacheT<Scalar, K>& cache) const {
  check_buffer("grads", grads.size(), layout_size_);
  if (!cache.input_grad_done) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": backward_weight before backward_input");
  }
  Scalar* g = grads.data();
  switch (kind_) {
    case UnitKind::kEmbedding: detail::embedding_backward_weight(*k_, model_, slots_, g, cache); break;
    case UnitKind::kAttention: detail::attention_backward_weight(*k_, model_, slots_, g, cache); break;
    case UnitKind::kMlp: detail::mlp_backward_weight(*k_, model_, slots_, g, cache); break;
    case UnitKind::kHead: detail::head_backward_weight(*k_, model_, slots_, g, cache); break;
    case UnitKind::kMoe: detail::moe_backward_weight(*k_, model_, slots_, g, cache); break;
  }
  if (kind_ != UnitKind::kEmbedding) {
    if (cache.input_grad_partial) {
      cache.norm_grad_pending = true;  // finish_input_grad adds it
    } else {
      detail::norm_backward_weight(*k_, model_, slots_, g, cache);
    }
  }
  cache.input_grad_done = false;
}

template <typename Scalar, typename K>
bool LayerT<Scalar, K>::finish_input_grad(std::span<const Scalar> params, std::span<const Scalar> d_a, std::span<Scalar> dx,
                                      std::span<Scalar> grads, UnitCacheT<Scalar, K>& cache, int64_t row0) const {
  if (!cache.input_grad_partial) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": finish_input_grad without a partial input gradient");
  }
  check_buffer("params", params.size(), layout_size_);
  check_buffer("grads", grads.size(), layout_size_);
  const int64_t h = model_.hidden, rows = static_cast<int64_t>(d_a.size()) / h;
  if (row0 < 0 || rows <= 0 || rows * h != static_cast<int64_t>(d_a.size()) || row0 + rows > cache.dims.rows()) {
    throw std::invalid_argument("Layer " + unit_name(model_, unit_) + ": a reduced input gradient of " +
                                std::to_string(d_a.size()) + " elements from row " + std::to_string(row0) +
                                " does not fit " + std::to_string(cache.dims.rows()) + " rows of " + std::to_string(h));
  }
  check_buffer("input gradient", dx.size(), rows * h);
  k_->assign(cache.d_a, d_a.data(), static_cast<int64_t>(d_a.size()));
  cache.norm_row0 = row0;
  const Scalar* residual = kind_ == UnitKind::kHead ? nullptr : cache.d_out.data();
  detail::norm_backward_input(*k_, model_, slots_, params.data(), residual, dx.data(), cache);
  cache.input_grad_partial = false;
  if (!cache.norm_grad_pending) return false;  // backward_weight (zero-bubble W) is still to come
  detail::norm_backward_weight(*k_, model_, slots_, grads.data(), cache);
  cache.norm_grad_pending = false;
  return true;
}

template <typename Scalar, typename K>
Scalar LayerT<Scalar, K>::finish_loss(std::span<const Scalar> reduced, UnitCacheT<Scalar, K>& cache) const {
  if (kind_ != UnitKind::kHead || slots_.tp == 1) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": finish_loss is the tensor-parallel head's");
  }
  const int64_t n = cache.dims.rows();
  check_buffer("reduced loss statistics", reduced.size(), 3 * n);
  return detail::head_finish_loss(reduced.data(), n, cache);
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::backward(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> dx,
                             std::span<Scalar> grads, UnitCacheT<Scalar, K>& cache) const {
  check_buffer("grads", grads.size(), layout_size_);
  backward_input(params, dy, dx, cache);
  backward_weight(grads, cache);
}

// ---- context parallelism (attention_cp_impl.hpp) ------------------------------------------------

template <typename Scalar, typename K>
CpSizes LayerT<Scalar, K>::cp_sizes(const Dims& d, CpPhase phase) const {
  const ops::AttentionShape a = detail::attention_shape(model_, slots_, d);
  const int64_t n = d.rows(), k2 = 2 * a.kv_dim(), c = model_.hidden, cp = d.cp.size;
  const bool gather = detail::gathers_kv(d);
  switch (phase) {
    case CpPhase::kProject: return {n * c, n * (gather ? k2 : a.qkv_cols())};
    case CpPhase::kAttend: return {gather ? cp * n * k2 : n * a.qkv_cols(), n * (gather ? c : a.hidden())};
    case CpPhase::kFinishForward: return {n * a.hidden(), n * c};
    case CpPhase::kBackwardSend: return {n * c, n * (gather ? k2 : a.hidden())};
    case CpPhase::kBackwardAttend: return {gather ? cp * n * k2 : n * a.hidden(), gather ? cp * n * k2 : n * a.qkv_cols()};
    case CpPhase::kBackwardFinish: return {n * (gather ? k2 : a.qkv_cols()), n * c};
  }
  return {};
}

namespace detail {
// The checks every cp phase makes: an attention unit, host kernels, a cp split whose a2a head
// groups are whole, the buffers' sizes.
template <typename Scalar, typename K>
void cp_check(const LayerT<Scalar, K>& l, const spec::Model& m, const UnitSlots& s, const Dims& d, CpPhase phase,
              std::size_t in, std::size_t out) {
  const std::string name = "Layer " + unit_name(m, l.unit()) + ": ";
  if constexpr (!K::kHost) cp_on_device();
  if (l.kind() != UnitKind::kAttention || d.cp.size < 2 || d.cp.rank < 0 || d.cp.rank >= d.cp.size || d.rows() <= 0) {
    throw std::logic_error(name + "context-parallel phases are an attention unit's, with cp > 1");
  }
  if (!gathers_kv(d) && (s.heads % d.cp.size != 0 || s.kv_heads % d.cp.size != 0)) {
    throw std::invalid_argument(name + "a2a needs cp " + std::to_string(d.cp.size) + " to divide the rank's " +
                                std::to_string(s.heads) + " heads and " + std::to_string(s.kv_heads) + " K/V heads");
  }
  const CpSizes want = l.cp_sizes(d, phase);
  const int64_t want_in = want.in, want_out = want.out;
  if (static_cast<int64_t>(in) != want_in || static_cast<int64_t>(out) != want_out) {
    throw std::invalid_argument(name + "a cp phase got " + std::to_string(in) + " elements in and " + std::to_string(out) +
                                " out, expected " + std::to_string(want_in) + " and " + std::to_string(want_out));
  }
}
}  // namespace detail

template <typename Scalar, typename K>
void LayerT<Scalar, K>::cp_project(const Dims& d, std::span<const Scalar> params, std::span<const Scalar> x, bool input_only,
                                   std::span<Scalar> send, Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  const bool recompute = x.empty();
  if (recompute) {
    if (cache.dims.rows() == 0 || static_cast<int64_t>(cache.input.size()) != input_size(cache.dims)) {
      throw std::logic_error("Layer " + unit_name(model_, unit_) + ": recompute without a forward that kept the input");
    }
  }
  const Dims dims = recompute ? cache.dims : d;
  detail::cp_check(*this, model_, slots_, dims, CpPhase::kProject, recompute ? input_size(dims) : x.size(), send.size());
  if constexpr (K::kHost) {
    if (!recompute) {
      cache.clear();
      cache.dims = dims;
      k_->assign(cache.input, x.data(), static_cast<int64_t>(x.size()));
    }
    cache.cp_input_only = !recompute && input_only;
    detail::cp_project(*k_, model_, slots_, params.data(), send.data(), cache);
  }
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::cp_attend(std::span<const Scalar> params, std::span<const Scalar> received, std::span<Scalar> out,
                                  Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  detail::cp_check(*this, model_, slots_, cache.dims, CpPhase::kAttend, received.size(), out.size());
  if constexpr (K::kHost) detail::cp_attend(*k_, model_, slots_, params.data(), received.data(), out.data(), cache);
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::cp_finish_forward(std::span<const Scalar> params, std::span<const Scalar> received, std::span<Scalar> y,
                                          Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  detail::cp_check(*this, model_, slots_, cache.dims, CpPhase::kFinishForward, received.size(), y.size());
  if (detail::gathers_kv(cache.dims)) throw std::logic_error("Layer " + unit_name(model_, unit_) + ": only a2a has a forward finish");
  if constexpr (K::kHost) detail::cp_finish_forward(*k_, model_, slots_, params.data(), received.data(), y.data(), cache);
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::cp_backward_send(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> send,
                                         Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  detail::cp_check(*this, model_, slots_, cache.dims, CpPhase::kBackwardSend, dy.size(), send.size());
  if (!cache.full) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": a context-parallel backward before its forward (or recompute)");
  }
  if constexpr (K::kHost) detail::cp_backward_send(*k_, model_, slots_, params.data(), dy.data(), send.data(), cache);
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::cp_backward_attend(std::span<const Scalar> params, std::span<const Scalar> received,
                                           std::span<Scalar> send, Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  detail::cp_check(*this, model_, slots_, cache.dims, CpPhase::kBackwardAttend, received.size(), send.size());
  if constexpr (K::kHost) detail::cp_backward_attend(*k_, model_, slots_, params.data(), received.data(), send.data(), cache);
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::cp_backward_finish(std::span<const Scalar> params, std::span<const Scalar> received,
                                           std::span<Scalar> dx, std::span<Scalar> grads, bool input_only,
                                           Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  check_buffer("grads", grads.size(), layout_size_);
  detail::cp_check(*this, model_, slots_, cache.dims, CpPhase::kBackwardFinish, received.size(), dx.size());
  if constexpr (K::kHost) {
    detail::cp_backward_finish(*k_, model_, slots_, params.data(), received.data(), dx.data(), cache);
    cache.input_grad_done = true;
    cache.input_grad_partial = reduces_input_grad();
    if (!input_only) backward_weight(grads, cache);
  }
}

// ---- expert parallelism (moe_impl.hpp) ---------------------------------------------------------

namespace detail {
template <typename Scalar, typename K>
void moe_check(const LayerT<Scalar, K>& l, const spec::Model& m, const UnitSlots& s, const char* what, std::size_t got,
               int64_t want) {
  const std::string name = "Layer " + unit_name(m, l.unit()) + ": ";
  if constexpr (!K::kHost) moe_on_device();
  if (l.kind() != UnitKind::kMoe || (s.experts >= m.moe.experts && s.expert_ffn >= m.moe.ffn_hidden)) {
    throw std::logic_error(name + "expert-parallel phases are a MoE unit's, with ep > 1 or etp > 1 in its layout");
  }
  if (static_cast<int64_t>(got) != want) {
    throw std::invalid_argument(name + what + " has " + std::to_string(got) + " elements, expected " + std::to_string(want));
  }
}
}  // namespace detail

template <typename Scalar, typename K>
void LayerT<Scalar, K>::moe_dispatch(const TokenBatch& batch, std::span<const Scalar> params, std::span<const Scalar> x,
                                     std::span<Scalar> send, std::span<int64_t> expert_counts, Cache& cache,
                                     bool recompute) const {
  const Dims d = batch.dims;
  check_buffer("params", params.size(), layout_size_);
  typename K::template Vec<Scalar> kept;
  if (recompute) {  // the forward's input, which the clear below would drop
    if (static_cast<int64_t>(cache.input.size()) != input_size(d)) {
      throw std::logic_error("Layer " + unit_name(model_, unit_) + ": recompute without a forward that kept the input");
    }
    kept.swap(cache.input);
    x = std::span<const Scalar>(kept.data(), kept.size());
  }
  check_buffer("input", x.size(), input_size(d));
  detail::moe_check(*this, model_, slots_, "the send buffer", send.size(), moe_rows(d) * model_.hidden);
  detail::moe_check(*this, model_, slots_, "the expert counts", expert_counts.size(), model_.moe.experts);
  if constexpr (K::kHost) {
    cache.clear();
    cache.dims = d;
    cache.moe_aux_grad = batch.moe_aux_grad;
    k_->assign(cache.input, x.data(), static_cast<int64_t>(x.size()));  // the residual, for the combine
    detail::moe_route_phase(*k_, model_, slots_, params.data(), x.data(), cache);
    if (!recompute) count_routed(cache);
    std::copy(cache.moe_x.begin(), cache.moe_x.end(), send.begin());
    detail::release(cache.moe_x);  // the experts' side keeps what it receives (moe_xe)
    for (int64_t e = 0; e < model_.moe.experts; ++e) {
      expert_counts[static_cast<std::size_t>(e)] = static_cast<int64_t>(detail::expert_count(cache, e));
    }
  }
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::moe_experts(std::span<const Scalar> params, std::span<const Scalar> received,
                                    std::span<const int64_t> counts, std::span<Scalar> out, Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  int64_t rows = 0;
  for (int64_t c : counts) rows += c;
  detail::moe_check(*this, model_, slots_, "the received rows", received.size(), rows * model_.hidden);
  detail::moe_check(*this, model_, slots_, "the output", out.size(), rows * model_.hidden);
  if (slots_.experts <= 0 || counts.size() % static_cast<std::size_t>(slots_.experts) != 0) {
    throw std::invalid_argument("Layer " + unit_name(model_, unit_) + ": " + std::to_string(counts.size()) +
                                " counts for " + std::to_string(slots_.experts) + " local experts");
  }
  if constexpr (K::kHost) detail::moe_experts_phase(*k_, model_, slots_, params.data(), received.data(), counts, out.data(), cache);
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::moe_combine(std::span<const Scalar> received, std::span<Scalar> y, Cache& cache,
                                    bool input_only) const {
  detail::moe_check(*this, model_, slots_, "the received rows", received.size(), moe_rows(cache.dims) * model_.hidden);
  check_buffer("output", y.size(), output_size(cache.dims));
  if constexpr (K::kHost) {
    detail::moe_combine_phase(*k_, model_, slots_, cache.input.data(), received.data(), y.data(), cache);
    if (input_only) {  // full recompute: the input alone until the Recompute pass
      cache.release_intermediates();
      return;
    }
    detail::release(cache.input);
    cache.full = true;
  }
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::moe_backward_send(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> send,
                                          Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  check_buffer("output gradient", dy.size(), output_size(cache.dims));
  detail::moe_check(*this, model_, slots_, "the send buffer", send.size(), moe_rows(cache.dims) * model_.hidden);
  if (!cache.full) throw std::logic_error("Layer " + unit_name(model_, unit_) + ": an expert-parallel backward before its forward");
  if constexpr (K::kHost) {
    detail::moe_backward_send_phase(*k_, model_, slots_, params.data(), dy.data(), cache);
    std::copy(cache.moe_dy.begin(), cache.moe_dy.end(), send.begin());
    detail::release(cache.moe_dy);  // likewise (moe_dye)
  }
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::moe_experts_backward(std::span<const Scalar> params, std::span<const Scalar> received,
                                             std::span<Scalar> out, std::span<Scalar> grads, bool weights,
                                             Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  check_buffer("grads", grads.size(), layout_size_);
  const int64_t rows = static_cast<int64_t>(cache.moe_eperm.size());
  detail::moe_check(*this, model_, slots_, "the received gradient rows", received.size(), rows * model_.hidden);
  detail::moe_check(*this, model_, slots_, "the output", out.size(), rows * model_.hidden);
  if constexpr (K::kHost) {
    detail::moe_experts_backward_phase(*k_, model_, slots_, params.data(), received.data(), out.data(), cache);
    if (weights) detail::moe_expert_weights(*k_, model_, slots_, grads.data(), cache);
  }
}

template <typename Scalar, typename K>
void LayerT<Scalar, K>::moe_backward_finish(std::span<const Scalar> params, std::span<const Scalar> received,
                                            std::span<Scalar> dx, std::span<Scalar> grads, bool weights,
                                            Cache& cache) const {
  check_buffer("params", params.size(), layout_size_);
  check_buffer("grads", grads.size(), layout_size_);
  detail::moe_check(*this, model_, slots_, "the received gradient rows", received.size(), moe_rows(cache.dims) * model_.hidden);
  check_buffer("input gradient", dx.size(), input_size(cache.dims));
  if constexpr (K::kHost) {
    detail::moe_backward_finish_phase(*k_, model_, slots_, params.data(), received.data(), dx.data(), cache);
    cache.input_grad_done = true;
    cache.input_grad_partial = reduces_input_grad();  // tp > 1 with shared experts: finish_input_grad follows
    if (!weights) return;  // backward_weight adds them all
    detail::moe_source_weights(*k_, model_, slots_, grads.data(), cache);
    if (cache.input_grad_partial) {
      cache.norm_grad_pending = true;  // finish_input_grad adds it
    } else {
      detail::norm_backward_weight(*k_, model_, slots_, grads.data(), cache);
    }
    cache.input_grad_done = false;
  }
}

}  // namespace stagecraft::executor
