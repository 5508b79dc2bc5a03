#include "core/count/count.hpp"

#include <algorithm>

#include "core/count/tensors.hpp"

namespace stagecraft::count {

using spec::Model;
using spec::Recompute;

int64_t kv_heads_per_rank(const Model& m, int64_t tp) { return m.kv_heads >= tp ? m.kv_heads / tp : 1; }

Shard shard(const Model& m, const Linear& l, int64_t tp) {
  switch (l.split) {
    case Split::kColumn: return {l.in, l.out / tp, l.bias ? l.out / tp : 0};
    case Split::kRow: return {l.in / tp, l.out, l.bias ? l.out : 0};
    case Split::kQkv: {
      const int64_t out = m.q_dim() / tp + 2 * kv_heads_per_rank(m, tp) * m.head_dim();
      return {l.in, out, l.bias ? out : 0};
    }
    case Split::kReplicated:
    case Split::kVocabRows:
    case Split::kVocabColumns: break;  // not a block linear's split
  }
  return {l.in, l.out, l.bias ? l.out : 0};
}

std::vector<Linear> attention_linears(const Model& m) {
  const int64_t h = m.hidden;
  if (m.mla.on()) {  // DeepSeek-V2/V3 (modeling_deepseek.py: q_proj and the b projections without bias)
    const spec::Mla& a = m.mla;
    const int64_t heads = m.heads;
    std::vector<Linear> out;
    if (a.q_lora_rank > 0) {
      out.push_back({"attn.q_a", h, a.q_lora_rank, m.qkv_bias, Split::kReplicated});
      out.push_back({"attn.q_b", a.q_lora_rank, heads * a.qk_head_dim(), false, Split::kColumn});
    } else {
      out.push_back({"attn.q", h, heads * a.qk_head_dim(), false, Split::kColumn});
    }
    out.push_back({"attn.kv_a", h, a.kv_lora_rank + a.qk_rope_head_dim, m.qkv_bias, Split::kReplicated});
    out.push_back({"attn.kv_b", a.kv_lora_rank, heads * (a.qk_nope_head_dim + a.v_head_dim), false, Split::kColumn});
    out.push_back({"attn.out", heads * a.v_head_dim, h, m.out_bias, Split::kRow});
    return out;
  }
  const int64_t q = m.q_dim();
  return {{"attn.qkv", h, q + 2 * m.kv_dim(), m.qkv_bias, Split::kQkv}, {"attn.out", q, h, m.out_bias, Split::kRow}};
}

std::vector<Linear> mlp_linears(const Model& m, const std::string& prefix, int64_t f) {
  const int64_t h = m.hidden;
  std::vector<Linear> linears;
  if (spec::gated(m.mlp)) {
    linears.push_back({prefix + ".gate", h, f, m.mlp_bias, Split::kColumn});
    linears.push_back({prefix + ".up", h, f, m.mlp_bias, Split::kColumn});
  } else {
    linears.push_back({prefix + ".up", h, f, m.mlp_bias, Split::kColumn});
  }
  linears.push_back({prefix + ".down", f, h, m.mlp_bias, Split::kRow});
  return linears;
}

std::vector<Linear> block_linears(const Model& m) {
  std::vector<Linear> linears = attention_linears(m);
  for (Linear& l : mlp_linears(m, "mlp", m.ffn_hidden)) linears.push_back(std::move(l));
  return linears;
}

int64_t norm_parameters(const Model& m) { return m.norm_has_bias() ? 2 * m.hidden : m.hidden; }

int64_t qk_norm_parameters(const Model& m) {
  if (!m.qk_norm) return 0;
  const int64_t widths = m.q_norm_width() + m.k_norm_width();
  return m.norm_has_bias() ? 2 * widths : widths;
}

// The counts sum the tensor table (tensors.hpp) at tp = 1, so they and the layouts cannot disagree.
namespace {
int64_t table_sum(const Model& m, int32_t unit) {
  int64_t total = 0;
  for (const TensorSpec& t : unit_tensors(m, unit, 1)) total += t.elems();
  return total;
}
}  // namespace

int64_t block_parameters(const Model& m, int64_t layer) {
  return table_sum(m, static_cast<int32_t>(1 + 2 * layer)) + table_sum(m, static_cast<int32_t>(2 + 2 * layer));
}

int64_t embedding_parameters(const Model& m) { return table_sum(m, 0); }

int64_t head_parameters(const Model& m) { return table_sum(m, static_cast<int32_t>(2 * m.layers + 1)); }

int64_t parameters(const Model& m) {
  if (!m.moe.on()) return embedding_parameters(m) + m.layers * block_parameters(m) + head_parameters(m);
  int64_t total = embedding_parameters(m) + head_parameters(m);
  for (int64_t l = 0; l < m.layers; ++l) total += block_parameters(m, l);
  return total;
}

int64_t expert_parameters(const Model& m) {
  const int64_t matrices = spec::gated(m.mlp) ? 3 : 2;
  return matrices * m.hidden * m.moe.ffn_hidden + (m.mlp_bias ? (matrices - 1) * m.moe.ffn_hidden + m.hidden : 0);
}

int64_t moe_layers(const Model& m) {
  int64_t n = 0;
  for (int64_t l = 0; l < m.layers; ++l) n += m.moe_layer(l) ? 1 : 0;
  return n;
}

int64_t active_parameters(const Model& m) {
  return parameters(m) - moe_layers(m) * (m.moe.experts - m.moe.top_k) * expert_parameters(m);
}

bool windowed_layer(const Model& m, int64_t layer) {
  return m.sliding_window > 0 &&
         (m.sliding_window_layers.empty() ||
          std::binary_search(m.sliding_window_layers.begin(), m.sliding_window_layers.end(), layer));
}

int64_t attention_keys(const Model& m, int64_t layer) {
  return windowed_layer(m, layer) ? std::min(m.seq_len, m.sliding_window) : m.seq_len;
}

double attention_flops_per_token_fwd(const Model& m, int64_t layer) {
  const double s = static_cast<double>(attention_keys(m, layer));
  if (m.mla.on()) {  // q.k^T over the nope and rope parts, p.v over v_head_dim, every head
    const double heads = static_cast<double>(m.heads);
    return 2.0 * s * heads * static_cast<double>(m.mla.qk_head_dim()) + 2.0 * s * heads * static_cast<double>(m.mla.v_head_dim);
  }
  return 4.0 * s * static_cast<double>(m.q_dim());
}

double block_flops_per_token_fwd(const Model& m, int64_t layer) {
  double total = attention_flops_per_token_fwd(m, layer);
  for (const Linear& l : attention_linears(m)) total += l.forward_flops_per_token();
  if (!m.moe_layer(layer)) {
    for (const Linear& l : mlp_linears(m, "mlp", m.ffn_hidden)) total += l.forward_flops_per_token();
    return total;
  }
  const double h = static_cast<double>(m.hidden);
  total += 2.0 * h * static_cast<double>(m.moe.experts);  // the router
  for (const Linear& l : mlp_linears(m, "mlp.experts", m.moe.ffn_hidden)) {
    total += static_cast<double>(m.moe.top_k) * l.forward_flops_per_token();
  }
  if (m.moe.shared_ffn_hidden > 0) {
    for (const Linear& l : mlp_linears(m, "mlp.shared", m.moe.shared_ffn_hidden)) total += l.forward_flops_per_token();
  }
  if (m.moe.shared_gate) total += 2.0 * h;
  return total;
}

double head_flops_per_token_fwd(const Model& m) {
  return 2.0 * static_cast<double>(m.hidden) * static_cast<double>(m.vocab);
}

double flops_per_token_fwd(const Model& m) {
  if (!m.moe.on()) return static_cast<double>(m.layers) * block_flops_per_token_fwd(m) + head_flops_per_token_fwd(m);
  double total = head_flops_per_token_fwd(m);
  for (int64_t l = 0; l < m.layers; ++l) total += block_flops_per_token_fwd(m, l);
  return total;
}

double model_flops_per_token_train(const Model& m) { return 3.0 * flops_per_token_fwd(m); }

double hardware_flops_per_token_train(const Model& m, Recompute r) {
  double scores = 0;  // what selective recompute re-runs: every block's attention scores
  for (int64_t l = 0; l < m.layers; ++l) scores += attention_flops_per_token_fwd(m, l);
  switch (r) {
    case Recompute::kNone: return model_flops_per_token_train(m);
    case Recompute::kSelective: return model_flops_per_token_train(m) + scores;
    case Recompute::kFull: return model_flops_per_token_train(m) + flops_per_token_fwd(m) - head_flops_per_token_fwd(m);
  }
  return model_flops_per_token_train(m);
}

std::vector<LayerCount> layer_counts(const Model& m) {
  std::vector<LayerCount> out;
  out.reserve(static_cast<std::size_t>(m.layers) + 2);
  out.push_back({"embedding", embedding_parameters(m), 0.0});
  for (int64_t i = 0; i < m.layers; ++i) {
    out.push_back({"block." + std::to_string(i), block_parameters(m, i), block_flops_per_token_fwd(m, i)});
  }
  out.push_back({"head", head_parameters(m), head_flops_per_token_fwd(m)});
  return out;
}

}  // namespace stagecraft::count
