#include "executor/model/layers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "core/count/count.hpp"
#include "executor/model/layers_impl.hpp"

namespace stagecraft::executor {

namespace detail {

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
  s.tp_index = layout.tp_index();
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
  if (kind == UnitKind::kMoe) {
    s.norm_w = offset(prefix + "mlp.norm2.w");
    s.norm_b = offset(prefix + "mlp.norm2.b");
    s.router = layout.find(prefix + "mlp.router.w").offset;
    if (m.moe.router_bias) s.router_bias = layout.find(prefix + "mlp.router.b").offset;
    if (m.moe.router_logit_bias) s.router_logit_bias = layout.find(prefix + "mlp.router.logit_b").offset;
    auto linears = [&](const std::string& group, int64_t f, int64_t copies) {
      std::vector<LinearSlot> out;
      for (const count::Linear& l : count::mlp_linears(m, group, f)) {
        const TensorSlot& w = layout.find(prefix + l.name + ".w");
        out.push_back({w.offset, offset(prefix + l.name + ".b"), w.rows / copies, w.cols});
      }
      return out;
    };
    // [E/ep · f/etp x h]: this rank's experts, each its 1/etp of the width
    const TensorSlot& down = layout.find(prefix + "mlp.experts.down.w");
    s.expert_ffn = m.moe.ffn_hidden / layout.etp();
    s.experts = down.rows / s.expert_ffn;
    s.expert0 = down.map.row0 / m.moe.ffn_hidden;
    s.expert_linears = linears("mlp.experts", m.moe.ffn_hidden, s.experts);
    if (m.moe.shared_ffn_hidden > 0) {
      s.shared_ffn = m.moe.shared_ffn_hidden / s.tp;
      s.shared_linears = linears("mlp.shared", m.moe.shared_ffn_hidden, 1);
      s.shared_gate = offset(prefix + "mlp.shared_gate.w");
    }
    return s;
  }
  const std::string group = attn ? "attn." : "mlp.";
  s.norm_w = offset(prefix + group + (attn ? "norm1.w" : "norm2.w"));
  s.norm_b = offset(prefix + group + (attn ? "norm1.b" : "norm2.b"));
  for (const count::Linear& l : count::block_linears(m)) {
    if (l.name.rfind(group, 0) != 0) continue;
    const TensorSlot& w = layout.find(prefix + l.name + ".w");  // this rank's shard
    s.linears.push_back({w.offset, offset(prefix + l.name + ".b"), w.rows, w.cols});
  }
  if (attn && count::windowed_layer(m, unit_block(m, unit))) s.window = m.sliding_window;
  if (attn && m.qk_norm) {
    s.q_norm_w = offset(prefix + "attn.q_norm.w");
    s.q_norm_b = offset(prefix + "attn.q_norm.b");
    s.k_norm_w = offset(prefix + "attn.k_norm.w");
    s.k_norm_b = offset(prefix + "attn.k_norm.b");
  }
  return s;
}

}  // namespace detail

HostKernels& host_kernels() {
  static HostKernels k;
  return k;
}

std::vector<std::string> unsupported_features(const spec::Model& m) {
  std::vector<std::string> out;
  if (m.parallel_attention) out.push_back("attention and MLP in parallel (parallel_attention)");
  if (m.position == spec::Position::kAlibi) out.push_back("ALiBi positions");
  if (m.rotary_fraction != 1) {
    char share[32];
    std::snprintf(share, sizeof share, "%g", m.rotary_fraction);
    out.push_back(std::string("RoPE on part of each head (rotary_fraction ") + share + ")");
  }
  if (m.attn_norms == 2 || m.mlp_norms == 2) out.push_back("norms after the sublayers (attn_norms / mlp_norms)");
  if (m.embedding_norm) out.push_back("an embedding norm (embedding_norm)");
  if (m.lm_head_bias) out.push_back("an LM head bias (lm_head_bias)");
  if (m.mla.on()) out.push_back("multi-head latent attention (mla)");
  if (m.attention_sinks) out.push_back("attention sinks (attention_sinks)");
  if (!m.rope_scaling.empty()) out.push_back("a RoPE scaling (rope_scaling \"" + m.rope_scaling + "\")");
  return out;
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

template struct UnitCacheT<float, HostKernels>;
template struct UnitCacheT<double, HostKernels>;
template class LayerT<float, HostKernels>;
template class LayerT<double, HostKernels>;

std::vector<float> expert_bias_update(std::span<const double> counts, double rate) {
  double mean = 0;
  for (double c : counts) mean += c;
  mean /= static_cast<double>(counts.size());
  std::vector<float> out;
  for (double c : counts) out.push_back(static_cast<float>(rate * static_cast<double>((mean > c) - (mean < c))));
  return out;
}

}  // namespace stagecraft::executor
