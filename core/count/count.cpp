#include "core/count/count.hpp"

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

std::vector<Linear> block_linears(const Model& m) {
  const int64_t h = m.hidden, f = m.ffn_hidden, q = m.q_dim();
  std::vector<Linear> linears = {
      {"attn.qkv", h, q + 2 * m.kv_dim(), m.qkv_bias, Split::kQkv},
      {"attn.out", q, h, m.out_bias, Split::kRow},
  };
  if (spec::gated(m.mlp)) {
    linears.push_back({"mlp.gate", h, f, m.mlp_bias, Split::kColumn});
    linears.push_back({"mlp.up", h, f, m.mlp_bias, Split::kColumn});
  } else {
    linears.push_back({"mlp.up", h, f, m.mlp_bias, Split::kColumn});
  }
  linears.push_back({"mlp.down", f, h, m.mlp_bias, Split::kRow});
  return linears;
}

int64_t norm_parameters(const Model& m) { return m.norm_has_bias() ? 2 * m.hidden : m.hidden; }

int64_t qk_norm_parameters(const Model& m) {
  if (!m.qk_norm) return 0;
  return 2 * (m.norm_has_bias() ? 2 * m.head_dim() : m.head_dim());
}

// The counts sum the tensor table (tensors.hpp) at tp = 1, so they and the layouts cannot disagree.
namespace {
int64_t table_sum(const Model& m, int32_t unit) {
  int64_t total = 0;
  for (const TensorSpec& t : unit_tensors(m, unit, 1)) total += t.elems();
  return total;
}
}  // namespace

int64_t block_parameters(const Model& m) { return table_sum(m, 1) + table_sum(m, 2); }

int64_t embedding_parameters(const Model& m) { return table_sum(m, 0); }

int64_t head_parameters(const Model& m) { return table_sum(m, static_cast<int32_t>(2 * m.layers + 1)); }

int64_t parameters(const Model& m) {
  return embedding_parameters(m) + m.layers * block_parameters(m) + head_parameters(m);
}

double attention_flops_per_token_fwd(const Model& m) {
  return 4.0 * static_cast<double>(m.seq_len) * static_cast<double>(m.q_dim());
}

double block_flops_per_token_fwd(const Model& m) {
  double total = attention_flops_per_token_fwd(m);
  for (const Linear& l : block_linears(m)) total += l.forward_flops_per_token();
  return total;
}

double head_flops_per_token_fwd(const Model& m) {
  return 2.0 * static_cast<double>(m.hidden) * static_cast<double>(m.vocab);
}

double flops_per_token_fwd(const Model& m) {
  return static_cast<double>(m.layers) * block_flops_per_token_fwd(m) + head_flops_per_token_fwd(m);
}

double model_flops_per_token_train(const Model& m) { return 3.0 * flops_per_token_fwd(m); }

double hardware_flops_per_token_train(const Model& m, Recompute r) {
  const double layers = static_cast<double>(m.layers);
  switch (r) {
    case Recompute::kNone: return model_flops_per_token_train(m);
    case Recompute::kSelective: return model_flops_per_token_train(m) + layers * attention_flops_per_token_fwd(m);
    case Recompute::kFull: return model_flops_per_token_train(m) + layers * block_flops_per_token_fwd(m);
  }
  return model_flops_per_token_train(m);
}

std::vector<LayerCount> layer_counts(const Model& m) {
  std::vector<LayerCount> out;
  out.reserve(static_cast<std::size_t>(m.layers) + 2);
  out.push_back({"embedding", embedding_parameters(m), 0.0});
  const int64_t block = block_parameters(m);
  const double block_flops = block_flops_per_token_fwd(m);
  for (int64_t i = 0; i < m.layers; ++i) out.push_back({"block." + std::to_string(i), block, block_flops});
  out.push_back({"head", head_parameters(m), head_flops_per_token_fwd(m)});
  return out;
}

}  // namespace stagecraft::count
