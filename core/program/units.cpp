#include "core/program/units.hpp"

#include <numeric>

namespace stagecraft::program {

using spec::Mlp;
using spec::Model;

namespace {

void norm_tensors(const Model& m, std::vector<int64_t>& t) {
  t.push_back(m.hidden);
  if (m.norm == spec::Norm::kLayerNorm && m.bias) t.push_back(m.hidden);
}

// Rows of a vocab-parallel table on one rank (Megatron pads V to a multiple of t).
int64_t vocab_per_rank(const Model& m, int64_t tp) { return (m.vocab + tp - 1) / tp; }

Unit finish(Unit u) {
  u.params = std::accumulate(u.tensors.begin(), u.tensors.end(), int64_t{0});
  return u;
}

Unit attention(const Model& m, int64_t tp, int32_t block) {
  const int64_t h = m.hidden, d = m.head_dim();
  const int64_t kv_per_rank = m.kv_heads >= tp ? m.kv_heads / tp : 1;
  const int64_t qkv_out = h / tp + 2 * kv_per_rank * d;
  Unit u{UnitKind::kAttention, block, {}, 0, 0, 0, 0, 0};
  norm_tensors(m, u.tensors);
  u.tensors.push_back(h * qkv_out);
  if (m.bias) u.tensors.push_back(qkv_out);
  u.tensors.push_back((h / tp) * h);
  if (m.bias) u.tensors.push_back(h);
  const double gemm = 2.0 * static_cast<double>(h * qkv_out + (h / tp) * h);
  const double scores = 4.0 * static_cast<double>(m.seq_len) * static_cast<double>(h / tp);
  u.fwd_flops_per_token = gemm + scores;
  u.bwd_input_flops_per_token = gemm + 2 * scores;
  u.bwd_weight_flops_per_token = gemm;
  u.score_flops_per_token = scores;
  return finish(u);
}

Unit mlp(const Model& m, int64_t tp, int32_t block) {
  const int64_t h = m.hidden, f = m.ffn_hidden / tp;
  const int64_t in_matrices = m.mlp == Mlp::kSwiglu ? 2 : 1;
  Unit u{UnitKind::kMlp, block, {}, 0, 0, 0, 0, 0};
  norm_tensors(m, u.tensors);
  for (int64_t i = 0; i < in_matrices; ++i) {
    u.tensors.push_back(h * f);
    if (m.bias) u.tensors.push_back(f);
  }
  u.tensors.push_back(f * h);
  if (m.bias) u.tensors.push_back(h);
  const double gemm = 2.0 * static_cast<double>((in_matrices + 1) * h * f);
  u.fwd_flops_per_token = gemm;
  u.bwd_input_flops_per_token = gemm;
  u.bwd_weight_flops_per_token = gemm;
  return finish(u);
}

}  // namespace

int64_t tied_head_copy(const Model& m, int64_t tp) { return m.tied_embeddings ? vocab_per_rank(m, tp) * m.hidden : 0; }

std::vector<Unit> model_units(const Model& m, int64_t tp) {
  std::vector<Unit> units;
  units.reserve(static_cast<std::size_t>(unit_count(m)));
  Unit emb{UnitKind::kEmbedding, -1, {vocab_per_rank(m, tp) * m.hidden}, 0, 0, 0, 0, 0};
  if (m.position == spec::Position::kLearned) emb.tensors.push_back(m.seq_len * m.hidden);
  units.push_back(finish(emb));
  for (int32_t b = 0; b < static_cast<int32_t>(m.layers); ++b) {
    units.push_back(attention(m, tp, b));
    units.push_back(mlp(m, tp, b));
  }
  Unit head{UnitKind::kHead, -1, {}, 0, 0, 0, 0, 0};
  norm_tensors(m, head.tensors);
  if (!m.tied_embeddings) head.tensors.push_back(vocab_per_rank(m, tp) * m.hidden);
  const double gemm = 2.0 * static_cast<double>(m.hidden) * static_cast<double>(vocab_per_rank(m, tp));
  head.fwd_flops_per_token = gemm;
  head.bwd_input_flops_per_token = gemm;
  head.bwd_weight_flops_per_token = gemm;
  units.push_back(finish(head));
  return units;
}

}  // namespace stagecraft::program
