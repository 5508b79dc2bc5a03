#include "core/program/units.hpp"

#include <numeric>

#include "core/count/count.hpp"

namespace stagecraft::program {

using spec::Model;

namespace {

// Appends a parameter tensor of `elems` owned by the unit's module `module`.
void add(Unit& u, int64_t elems, int module) {
  u.tensors.push_back(elems);
  u.module.push_back(static_cast<int8_t>(module));
}

int next_module(const Unit& u) { return u.module.empty() ? 0 : u.module.back() + 1; }

// A norm of `width` elements (h, or d for the q/k norms): its weight, and its bias when it has one.
void norm_tensors(const Model& m, Unit& u, int64_t width) {
  const int mod = next_module(u);
  add(u, width, mod);
  if (m.norm_has_bias()) add(u, width, mod);
}
void norm_tensors(const Model& m, Unit& u) { norm_tensors(m, u, m.hidden); }

// Rows of a vocab-parallel table on one rank (Megatron pads V to a multiple of t).
int64_t vocab_per_rank(const Model& m, int64_t tp) { return (m.vocab + tp - 1) / tp; }

Unit finish(Unit u) {
  u.params = std::accumulate(u.tensors.begin(), u.tensors.end(), int64_t{0});
  return u;
}

// The linears of count::block_linears whose name starts with `group`, split over tp: each one
// module (weight and bias). Returns their GEMM FLOPs per token, 2 * in * out summed.
double linears(const Model& m, int64_t tp, Unit& u, const char* group) {
  double flops = 0;
  for (const count::Linear& l : count::block_linears(m)) {
    if (l.name.rfind(group, 0) != 0) continue;
    const count::Shard s = count::shard(m, l, tp);
    const int mod = next_module(u);
    add(u, s.weight(), mod);
    if (s.bias > 0) add(u, s.bias, mod);
    flops += 2.0 * static_cast<double>(s.weight());
  }
  return flops;
}

Unit attention(const Model& m, int64_t tp, int32_t block) {
  Unit u{UnitKind::kAttention, block, {}, {}, 0, 0, 0, 0, 0};
  norm_tensors(m, u);
  if (m.qk_norm) {
    norm_tensors(m, u, m.head_dim());
    norm_tensors(m, u, m.head_dim());
  }
  const double gemm = linears(m, tp, u, "attn.");
  if (m.attn_norms == 2) norm_tensors(m, u);
  const double scores = 4.0 * static_cast<double>(m.seq_len) * static_cast<double>(m.q_dim() / tp);
  u.fwd_flops_per_token = gemm + scores;
  u.bwd_input_flops_per_token = gemm + 2 * scores;
  u.bwd_weight_flops_per_token = gemm;
  u.score_flops_per_token = scores;
  return finish(u);
}

Unit mlp(const Model& m, int64_t tp, int32_t block) {
  Unit u{UnitKind::kMlp, block, {}, {}, 0, 0, 0, 0, 0};
  if (m.mlp_norms >= 1) norm_tensors(m, u);
  const double gemm = linears(m, tp, u, "mlp.");
  if (m.mlp_norms == 2) norm_tensors(m, u);
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
  Unit emb{UnitKind::kEmbedding, -1, {}, {}, 0, 0, 0, 0, 0};
  add(emb, vocab_per_rank(m, tp) * m.hidden, 0);
  if (m.position == spec::Position::kLearned) add(emb, m.position_rows() * m.hidden, next_module(emb));
  if (m.embedding_norm) norm_tensors(m, emb);
  units.push_back(finish(emb));
  for (int32_t b = 0; b < static_cast<int32_t>(m.layers); ++b) {
    units.push_back(attention(m, tp, b));
    units.push_back(mlp(m, tp, b));
  }
  Unit head{UnitKind::kHead, -1, {}, {}, 0, 0, 0, 0, 0};
  norm_tensors(m, head);
  if (!m.tied_embeddings) {
    const int mod = next_module(head);
    add(head, vocab_per_rank(m, tp) * m.hidden, mod);
    if (m.lm_head_bias) add(head, vocab_per_rank(m, tp), mod);
  }
  const double gemm = 2.0 * static_cast<double>(m.hidden) * static_cast<double>(vocab_per_rank(m, tp));
  head.fwd_flops_per_token = gemm;
  head.bwd_input_flops_per_token = gemm;
  head.bwd_weight_flops_per_token = gemm;
  units.push_back(finish(head));
  return units;
}

}  // namespace stagecraft::program
