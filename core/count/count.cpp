#include "core/count/count.hpp"

namespace stagecraft::count {

using spec::Mlp;
using spec::Model;
using spec::Norm;
using spec::Position;
using spec::Recompute;

std::vector<Linear> block_linears(const Model& m) {
  const int64_t h = m.hidden, f = m.ffn_hidden;
  std::vector<Linear> linears = {
      {"attn.qkv", h, h + 2 * m.kv_dim(), m.bias},
      {"attn.out", h, h, m.bias},
  };
  if (m.mlp == Mlp::kSwiglu) {
    linears.push_back({"mlp.gate", h, f, m.bias});
    linears.push_back({"mlp.up", h, f, m.bias});
  } else {
    linears.push_back({"mlp.up", h, f, m.bias});
  }
  linears.push_back({"mlp.down", f, h, m.bias});
  return linears;
}

int64_t norm_parameters(const Model& m) {
  const bool has_bias = m.norm == Norm::kLayerNorm && m.bias;
  return has_bias ? 2 * m.hidden : m.hidden;
}

int64_t block_parameters(const Model& m) {
  int64_t total = 2 * norm_parameters(m);
  for (const Linear& l : block_linears(m)) total += l.parameters();
  return total;
}

int64_t embedding_parameters(const Model& m) {
  int64_t total = m.vocab * m.hidden;
  if (m.position == Position::kLearned) total += m.position_rows() * m.hidden;
  return total;
}

int64_t head_parameters(const Model& m) {
  return norm_parameters(m) + (m.tied_embeddings ? 0 : m.vocab * m.hidden);
}

int64_t parameters(const Model& m) {
  return embedding_parameters(m) + m.layers * block_parameters(m) + head_parameters(m);
}

double attention_flops_per_token_fwd(const Model& m) {
  return 4.0 * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden);
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
