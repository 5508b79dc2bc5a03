#include "executor/model/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/count/count.hpp"
#include "executor/model/units.hpp"

namespace stagecraft::executor {

namespace {

template <typename S>
void release(std::vector<S>& v) {
  std::vector<S>().swap(v);
}

UnitSlots resolve_slots(const ParamLayout& layout, int64_t unit) {
  const spec::Model& m = layout.model();
  auto offset = [&](const std::string& name) { return layout.contains(name) ? layout.find(name).offset : -1; };
  UnitSlots s;
  s.tp = layout.tp();
  s.heads = m.heads / s.tp;
  s.kv_heads = count::kv_heads_per_rank(m, s.tp);
  s.ffn = m.ffn_hidden / s.tp;
  s.vocab_rows = count::vocab_per_rank(m, s.tp);
  s.vocab0 = layout.tp_index() * s.vocab_rows;
  s.vocab = std::clamp<int64_t>(m.vocab - s.vocab0, 0, s.vocab_rows);
  s.adds_residual = layout.tp_index() == 0;
  const UnitKind kind = unit_kind(m, unit);
  if (kind == UnitKind::kEmbedding) {
    s.wte = offset("embedding.wte");
    s.wpe = offset("embedding.wpe");
    return s;
  }
  if (kind == UnitKind::kHead) {
    s.norm_w = offset("head.normf.w");
    s.norm_b = offset("head.normf.b");
    s.lm_head = offset("head.lm_head.w");
    if (m.tied_embeddings) s.wte = layout.find("embedding.wte").offset;
    return s;
  }
  const bool attn = kind == UnitKind::kAttention;
  const std::string prefix = "block." + std::to_string(unit_block(m, unit)) + ".";
  const std::string group = attn ? "attn." : "mlp.";
  s.norm_w = offset(prefix + group + (attn ? "norm1.w" : "norm2.w"));
  s.norm_b = offset(prefix + group + (attn ? "norm1.b" : "norm2.b"));
  for (const count::Linear& l : count::block_linears(m)) {
    if (l.name.rfind(group, 0) != 0) continue;
    const TensorSlot& w = layout.find(prefix + l.name + ".w");  // this rank's shard
    s.linears.push_back({w.offset, offset(prefix + l.name + ".b"), w.rows, w.cols});
  }
  return s;
}

// One forward of the unit's math; the head returns the loss (written to y[0]).
template <typename S>
void run_forward(const spec::Model& m, UnitKind kind, const UnitSlots& s, const S* params, const S* x, S* y,
                 UnitCache<S>& c) {
  switch (kind) {
    case UnitKind::kEmbedding: detail::embedding_forward(m, s, params, y, c); return;
    case UnitKind::kAttention: detail::attention_forward(m, s, params, x, y, c); return;
    case UnitKind::kMlp: detail::mlp_forward(m, s, params, x, y, c); return;
    case UnitKind::kHead:
      if (s.tp > 1) {
        detail::head_forward_partial(m, s, params, x, y, c);
      } else {
        y[0] = detail::head_forward(m, s, params, x, c);
      }
      return;
  }
}

}  // namespace

std::vector<std::string> unsupported_features(const spec::Model& m) {
  std::vector<std::string> out;
  if (m.parallel_attention) out.push_back("attention and MLP in parallel (parallel_attention)");
  if (m.position == spec::Position::kAlibi) out.push_back("ALiBi positions");
  if (m.rotary_fraction != 1) {
    char share[32];
    std::snprintf(share, sizeof share, "%g", m.rotary_fraction);
    out.push_back(std::string("RoPE on part of each head (rotary_fraction ") + share + ")");
  }
  if (m.qk_norm) out.push_back("query and key norms (qk_norm)");
  if (m.attn_norms == 2 || m.mlp_norms == 2) out.push_back("norms after the sublayers (attn_norms / mlp_norms)");
  if (m.embedding_norm) out.push_back("an embedding norm (embedding_norm)");
  if (m.lm_head_bias) out.push_back("an LM head bias (lm_head_bias)");
  if (!m.rope_scaling.empty()) out.push_back("a RoPE scaling (rope_scaling \"" + m.rope_scaling + "\")");
  if (m.sliding_window > 0 && m.seq_len > m.sliding_window) {
    out.push_back("sliding-window attention shorter than the sequence (sliding_window " + std::to_string(m.sliding_window) +
                  " < seq_len " + std::to_string(m.seq_len) + ")");
  }
  return out;
}

template <typename Scalar>
void UnitCache<Scalar>::release_intermediates() {
  for (std::vector<Scalar>* v : {&xhat, &rstd, &a, &qkv, &probs, &mid, &pre, &pre2, &d_out, &d_pre, &d_pre2, &d_a, &lse}) {
    release(*v);
  }
  full = false;
  input_grad_done = false;
  input_grad_partial = false;
  norm_grad_pending = false;
  norm_row0 = 0;
}

template <typename Scalar>
void UnitCache<Scalar>::clear() {
  release_intermediates();
  release(tokens);
  release(input);
  dims = {};
}

template <typename Scalar>
Layer<Scalar>::Layer(const ParamLayout& layout, int64_t unit)
    : model_(layout.model()), layout_size_(layout.size()), unit_(unit), kind_(unit_kind(layout.model(), unit)) {
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
  slots_ = resolve_slots(layout, unit);
}

template <typename Scalar>
int64_t Layer<Scalar>::input_size(Dims d) const {
  return kind_ == UnitKind::kEmbedding ? 0 : d.rows() * model_.hidden;
}

template <typename Scalar>
int64_t Layer<Scalar>::output_size(Dims d) const {
  if (kind_ == UnitKind::kHead) return slots_.tp > 1 ? 3 * d.rows() : 1;
  return d.rows() * model_.hidden;
}

template <typename Scalar>
void Layer<Scalar>::check_buffer(const char* what, std::size_t got, int64_t want) const {
  if (static_cast<int64_t>(got) != want) {
    throw std::invalid_argument("Layer " + unit_name(model_, unit_) + ": " + what + " has " + std::to_string(got) +
                                " elements, expected " + std::to_string(want));
  }
}

template <typename Scalar>
void Layer<Scalar>::check_tokens(std::span<const int32_t> ids, const char* what, int64_t rows) const {
  check_buffer(what, ids.size(), rows);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= model_.vocab) {
      throw std::out_of_range("Layer " + unit_name(model_, unit_) + ": " + what + "[" + std::to_string(i) +
                              "] = " + std::to_string(ids[i]) + " is outside the vocab [0, " +
                              std::to_string(model_.vocab) + ")");
    }
  }
}

template <typename Scalar>
void Layer<Scalar>::forward(const TokenBatch& batch, std::span<const Scalar> params, std::span<const Scalar> x,
                            std::span<Scalar> y, UnitCache<Scalar>& cache, CacheMode mode) const {
  const Dims d = batch.dims;
  if (d.batch <= 0 || d.seq <= 0 || d.seq > model_.seq_len) {
    throw std::invalid_argument("Layer " + unit_name(model_, unit_) + ": micro-batch " + std::to_string(d.batch) +
                                " x " + std::to_string(d.seq) + " needs positive sizes and seq <= seq_len " +
                                std::to_string(model_.seq_len));
  }
  check_buffer("params", params.size(), layout_size_);
  check_buffer("input", x.size(), input_size(d));
  check_buffer("output", y.size(), output_size(d));
  cache.release_intermediates();
  cache.dims = d;
  cache.tokens.clear();
  if (kind_ == UnitKind::kEmbedding) check_tokens(batch.inputs, "inputs", d.rows());
  if (kind_ == UnitKind::kHead) check_tokens(batch.targets, "targets", d.rows());
  if (kind_ == UnitKind::kEmbedding) cache.tokens.assign(batch.inputs.begin(), batch.inputs.end());
  if (kind_ == UnitKind::kHead) cache.tokens.assign(batch.targets.begin(), batch.targets.end());
  const bool keep_input = mode == CacheMode::kInputOnly && kind_ != UnitKind::kEmbedding;
  if (keep_input) {
    cache.input.assign(x.begin(), x.end());
  } else {
    cache.input.clear();
  }
  run_forward(model_, kind_, slots_, params.data(), x.data(), y.data(), cache);
  cache.full = true;
  if (keep_input) cache.release_intermediates();
}

template <typename Scalar>
void Layer<Scalar>::recompute(std::span<const Scalar> params, UnitCache<Scalar>& cache) const {
  if (cache.full) return;
  check_buffer("params", params.size(), layout_size_);
  if (cache.dims.rows() == 0 || static_cast<int64_t>(cache.input.size()) != input_size(cache.dims)) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": recompute without a forward that kept the input");
  }
  std::vector<Scalar> scratch(static_cast<std::size_t>(output_size(cache.dims)));
  run_forward(model_, kind_, slots_, params.data(), cache.input.data(), scratch.data(), cache);
  cache.full = true;
}

template <typename Scalar>
void Layer<Scalar>::backward_input(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> dx,
                                   UnitCache<Scalar>& cache) const {
  if (cache.dims.rows() == 0) throw std::logic_error("Layer " + unit_name(model_, unit_) + ": backward before forward");
  check_buffer("params", params.size(), layout_size_);
  check_buffer("output gradient", dy.size(), kind_ == UnitKind::kHead ? 1 : output_size(cache.dims));  // dL/dloss
  check_buffer("input gradient", dx.size(), input_size(cache.dims));
  recompute(params, cache);
  const Scalar* p = params.data();
  switch (kind_) {
    case UnitKind::kEmbedding: detail::embedding_backward_input(model_, dy.data(), cache); break;
    case UnitKind::kAttention: detail::attention_backward_input(model_, slots_, p, dy.data(), dx.data(), cache); break;
    case UnitKind::kMlp: detail::mlp_backward_input(model_, slots_, p, dy.data(), dx.data(), cache); break;
    case UnitKind::kHead: detail::head_backward_input(model_, slots_, p, dy[0], dx.data(), cache); break;
  }
  cache.input_grad_done = true;
  cache.input_grad_partial = reduces_input_grad();
}

template <typename Scalar>
void Layer<Scalar>::backward_weight(std::span<Scalar> grads, UnitCache<Scalar>& cache) const {
  check_buffer("grads", grads.size(), layout_size_);
  if (!cache.input_grad_done) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": backward_weight before backward_input");
  }
  Scalar* g = grads.data();
  switch (kind_) {
    case UnitKind::kEmbedding: detail::embedding_backward_weight(model_, slots_, g, cache); break;
    case UnitKind::kAttention: detail::attention_backward_weight(model_, slots_, g, cache); break;
    case UnitKind::kMlp: detail::mlp_backward_weight(model_, slots_, g, cache); break;
    case UnitKind::kHead: detail::head_backward_weight(model_, slots_, g, cache); break;
  }
  if (kind_ != UnitKind::kEmbedding) {
    if (cache.input_grad_partial) {
      cache.norm_grad_pending = true;  // finish_input_grad adds it
    } else {
      detail::norm_backward_weight(model_, slots_, g, cache);
    }
  }
  cache.input_grad_done = false;
}

template <typename Scalar>
bool Layer<Scalar>::finish_input_grad(std::span<const Scalar> params, std::span<const Scalar> d_a, std::span<Scalar> dx,
                                      std::span<Scalar> grads, UnitCache<Scalar>& cache, int64_t row0) const {
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
  cache.d_a.assign(d_a.begin(), d_a.end());
  cache.norm_row0 = row0;
  const Scalar* residual = kind_ == UnitKind::kHead ? nullptr : cache.d_out.data();
  detail::norm_backward_input(model_, slots_, params.data(), residual, dx.data(), cache);
  cache.input_grad_partial = false;
  if (!cache.norm_grad_pending) return false;  // backward_weight (zero-bubble W) is still to come
  detail::norm_backward_weight(model_, slots_, grads.data(), cache);
  cache.norm_grad_pending = false;
  return true;
}

template <typename Scalar>
Scalar Layer<Scalar>::finish_loss(std::span<const Scalar> reduced, UnitCache<Scalar>& cache) const {
  if (kind_ != UnitKind::kHead || slots_.tp == 1) {
    throw std::logic_error("Layer " + unit_name(model_, unit_) + ": finish_loss is the tensor-parallel head's");
  }
  const int64_t n = cache.dims.rows();
  check_buffer("reduced loss statistics", reduced.size(), 3 * n);
  return detail::head_finish_loss(reduced.data(), n, cache);
}

template <typename Scalar>
void vocab_parallel_rescale(std::span<const Scalar> local_stats, std::span<const Scalar> global_max,
                            std::span<Scalar> out) {
  const std::size_t n = global_max.size();
  if (local_stats.size() != 3 * n || out.size() != n) {
    throw std::invalid_argument("vocab_parallel_rescale: " + std::to_string(local_stats.size()) +
                                " statistics for " + std::to_string(n) + " rows (want 3 per row), " +
                                std::to_string(out.size()) + " outputs");
  }
  for (std::size_t i = 0; i < n; ++i) out[i] = local_stats[n + i] * std::exp(local_stats[i] - global_max[i]);
}
template void vocab_parallel_rescale<float>(std::span<const float>, std::span<const float>, std::span<float>);
template void vocab_parallel_rescale<double>(std::span<const double>, std::span<const double>, std::span<double>);

template <typename Scalar>
void Layer<Scalar>::backward(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> dx,
                             std::span<Scalar> grads, UnitCache<Scalar>& cache) const {
  check_buffer("grads", grads.size(), layout_size_);
  backward_input(params, dy, dx, cache);
  backward_weight(grads, cache);
}

template struct UnitCache<float>;
template struct UnitCache<double>;
template class Layer<float>;
template class Layer<double>;

}  // namespace stagecraft::executor
