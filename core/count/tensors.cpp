#include "core/count/tensors.hpp"

#include <algorithm>
#include <cmath>

namespace stagecraft::count {

using spec::Model;

namespace {

constexpr double kInitStd = 0.02;  // GPT-2

int32_t unit_total(const Model& m) { return static_cast<int32_t>(2 * m.layers + 2); }

bool is_output_projection(const std::string& linear) { return linear == "attn.out" || linear == "mlp.down"; }

class UnitBuilder {
 public:
  UnitBuilder(const Model& m, int32_t unit, int64_t tp) : m_(m), unit_(unit), tp_(tp) {}

  // Starts the next module and returns its index.
  int8_t module() { return static_cast<int8_t>(next_module_++); }

  void add(int8_t module, std::string name, int64_t rows, int64_t cols, int64_t global_rows, int64_t global_cols,
           Split split, Init init, double std, bool decay) {
    out_.push_back({std::move(name), unit_, module, rows, cols, global_rows, global_cols, split, init, std, decay, false});
  }
  // A replicated norm of `width`: its weight, and its bias when it has one.
  void norm(const std::string& prefix, int64_t width) {
    const int8_t mod = module();
    add(mod, prefix + ".w", 1, width, 1, width, Split::kReplicated, Init::kOnes, 0, false);
    out_.back().norm = true;
    if (m_.norm_has_bias()) {
      add(mod, prefix + ".b", 1, width, 1, width, Split::kReplicated, Init::kZeros, 0, false);
      out_.back().norm = true;
    }
  }
  // The block linears whose name starts with `group`, each one module (weight and bias).
  void linears(const std::string& prefix, const char* group) {
    for (const Linear& l : block_linears(m_)) {
      if (l.name.rfind(group, 0) == 0) linear(prefix, l);
    }
  }
  // One linear as a module: its weight (and bias); `copies` stacked (a MoE layer's experts, one
  // [copies · in x out] tensor as a grouped GEMM keeps them), replicated over tp.
  void linear(const std::string& prefix, const Linear& l, int64_t copies = 1) {
    const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(m_.layers));
    const bool out = is_output_projection(l.name) || l.name.ends_with(".down");
    const int8_t mod = module();
    if (copies > 1) {
      add(mod, prefix + l.name + ".w", copies * l.in, l.out, copies * l.in, l.out, Split::kReplicated, Init::kNormal,
          out ? out_std : kInitStd, true);
      if (l.bias) add(mod, prefix + l.name + ".b", copies, l.out, copies, l.out, Split::kReplicated, Init::kZeros, 0, false);
      return;
    }
    const Shard s = shard(m_, l, tp_);
    add(mod, prefix + l.name + ".w", s.in, s.out, l.in, l.out, l.split, Init::kNormal, out ? out_std : kInitStd, true);
    if (l.bias) {
      const Split bias_split = l.split == Split::kRow ? Split::kReplicated : l.split;
      add(mod, prefix + l.name + ".b", 1, s.bias, 1, l.out, bias_split, Init::kZeros, 0, false);
    }
  }
  std::vector<TensorSpec> take() { return std::move(out_); }

 private:
  const Model& m_;
  int32_t unit_;
  int64_t tp_;
  int next_module_ = 0;
  std::vector<TensorSpec> out_;
};

}  // namespace

int64_t vocab_per_rank(const Model& m, int64_t tp) { return (m.vocab + tp - 1) / tp; }

std::vector<TensorSpec> unit_tensors(const Model& m, int32_t unit, int64_t tp) {
  const int64_t h = m.hidden, vp = vocab_per_rank(m, tp);
  UnitBuilder b(m, unit, tp);
  if (unit == 0) {
    b.add(b.module(), "embedding.wte", vp, h, m.vocab, h, Split::kVocabRows, Init::kNormal, kInitStd, true);
    if (m.position == spec::Position::kLearned) {
      const int64_t rows = m.position_rows();
      b.add(b.module(), "embedding.wpe", rows, h, rows, h, Split::kReplicated, Init::kNormal, kInitStd, true);
    }
    if (m.embedding_norm) b.norm("embedding.norm", h);
    return b.take();
  }
  if (unit == unit_total(m) - 1) {
    b.norm("head.normf", h);
    if (!m.tied_embeddings) {
      const int8_t mod = b.module();
      b.add(mod, "head.lm_head.w", h, vp, h, m.vocab, Split::kVocabColumns, Init::kNormal, kInitStd, true);
      if (m.lm_head_bias) b.add(mod, "head.lm_head.b", 1, vp, 1, m.vocab, Split::kVocabColumns, Init::kZeros, 0, false);
    }
    return b.take();
  }
  const int64_t block = (unit - 1) / 2;
  const std::string prefix = "block." + std::to_string(block) + ".";
  if (unit % 2 == 1) {
    b.norm(prefix + "attn.norm1", h);
    if (m.qk_norm) {  // of head_dim, or of the whole q and k projections (qk_norm_whole), replicated
      b.norm(prefix + "attn.q_norm", m.q_norm_width());
      b.norm(prefix + "attn.k_norm", m.k_norm_width());
    }
    if (m.mla.on()) {  // the latents' norms after their down projections (q_a_layernorm, kv_a_layernorm)
      for (const Linear& l : attention_linears(m)) {
        b.linear(prefix, l);
        if (l.name == "attn.q_a") b.norm(prefix + "attn.q_a_norm", m.mla.q_lora_rank);
        if (l.name == "attn.kv_a") b.norm(prefix + "attn.kv_a_norm", m.mla.kv_lora_rank);
      }
    } else {
      b.linears(prefix, "attn.");
    }
    if (m.attention_sinks) {  // one logit per query head, cut by heads as the queries are
      const int64_t heads = m.heads / tp;
      b.add(b.module(), prefix + "attn.sinks", 1, heads, 1, m.heads, Split::kColumn, Init::kZeros, 0, false);
    }
    if (m.attn_norms == 2) b.norm(prefix + "attn.post_norm", h);
    return b.take();
  }
  if (m.mlp_norms >= 1) b.norm(prefix + "mlp.norm2", h);
  if (m.moe_layer(block)) {
    // the router (and DeepSeek-V3's score correction), the routed experts stacked, the shared ones
    const int8_t router = b.module();
    b.add(router, prefix + "mlp.router.w", h, m.moe.experts, h, m.moe.experts, Split::kReplicated, Init::kNormal, kInitStd,
          true);
    if (m.moe.router_bias) {
      b.add(router, prefix + "mlp.router.b", 1, m.moe.experts, 1, m.moe.experts, Split::kReplicated, Init::kZeros, 0, false);
    }
    if (m.moe.router_logit_bias) {  // gpt-oss: the router linear's own bias
      b.add(router, prefix + "mlp.router.logit_b", 1, m.moe.experts, 1, m.moe.experts, Split::kReplicated, Init::kZeros, 0,
            false);
    }
    for (const Linear& l : mlp_linears(m, "mlp.experts", m.moe.ffn_hidden)) b.linear(prefix, l, m.moe.experts);
    if (m.moe.shared_ffn_hidden > 0) {
      for (const Linear& l : mlp_linears(m, "mlp.shared", m.moe.shared_ffn_hidden)) b.linear(prefix, l);
      if (m.moe.shared_gate) b.linear(prefix, {"mlp.shared_gate", h, 1, false, Split::kReplicated});
    }
  } else {
    b.linears(prefix, "mlp.");
  }
  if (m.mlp_norms == 2) b.norm(prefix + "mlp.post_norm", h);
  return b.take();
}

int64_t norm_elems(const Model& m, int32_t unit_begin, int32_t unit_end, bool qk_only) {
  int64_t total = 0;
  for (int32_t u = unit_begin; u < unit_end; ++u) {
    for (const TensorSpec& t : unit_tensors(m, u, 1)) {
      if (t.norm && (!qk_only || is_qk_norm(t.name))) total += t.elems();
    }
  }
  return total;
}

bool is_qk_norm(const std::string& name) {
  return name.find(".attn.q_norm.") != std::string::npos || name.find(".attn.k_norm.") != std::string::npos;
}

int64_t ShardMap::global_index(const TensorSpec& t, int64_t row, int64_t col) const {
  if (row >= valid_rows) return -1;
  const int64_t global_row = row_block > 0 ? row0 + row / row_block * row_stride + row % row_block : row0 + row;
  for (const ColumnPiece& p : cols) {
    if (col >= p.local && col < p.local + p.count) return global_row * t.global_cols + p.global + (col - p.local);
  }
  return -1;
}

ShardMap shard_map(const Model& m, const TensorSpec& t, int64_t tp, int64_t r) {
  ShardMap s{0, t.rows, {{0, 0, t.cols}}, 0, 0};
  switch (t.split) {
    case Split::kReplicated: break;
    case Split::kColumn: s.cols = {{0, r * t.cols, t.cols}}; break;
    case Split::kRow: s.row0 = r * t.rows; break;
    case Split::kQkv: {
      const int64_t d = m.head_dim(), q = m.q_dim() / tp, kv_r = kv_heads_per_rank(m, tp);
      // the first K/V head of this rank's queries: r * kv / t (one shared head when t > kv)
      const int64_t kv0 = r * m.kv_heads / tp * d, kv_cols = kv_r * d;
      s.cols = {{0, r * q, q}, {q, m.q_dim() + kv0, kv_cols}, {q + kv_cols, m.q_dim() + m.kv_dim() + kv0, kv_cols}};
      break;
    }
    case Split::kVocabRows:
      s.row0 = r * t.rows;
      s.valid_rows = std::clamp<int64_t>(t.global_rows - r * t.rows, 0, t.rows);
      break;
    case Split::kVocabColumns:
      s.cols = {{0, r * t.cols, std::clamp<int64_t>(t.global_cols - r * t.cols, 0, t.cols)}};
      break;
  }
  return s;
}

}  // namespace stagecraft::count
