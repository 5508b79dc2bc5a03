#include "sim/models/work.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/count/count.hpp"
#include "core/spec/error.hpp"

namespace stagecraft::sim {

using program::Op;
using program::Unit;
using program::UnitKind;

void Work::add_gemm(double flops, double count, bool fp8) {
  if (count == 0) return;
  for (Gemm& g : gemms) {
    if (g.flops == flops && g.fp8 == fp8) {
      g.count += count;
      return;
    }
  }
  gemms.push_back({flops, count, fp8});
}

double Work::total_bytes() const {
  double b = memory_bytes;
  for (double k : kind_bytes) b += k;
  return b;
}

void Work::add(const Work& other, double scale) {
  for (const Gemm& g : other.gemms) add_gemm(g.flops, scale * g.count, g.fp8);
  memory_bytes += scale * other.memory_bytes;
  for (std::size_t k = 0; k < kMemKinds; ++k) kind_bytes[k] += scale * other.kind_bytes[k];
  softmax_row = std::max(softmax_row, other.softmax_row);
  activation_elems += scale * other.activation_elems;
  adam_params += scale * other.adam_params;
  attention_fwd_flops += scale * other.attention_fwd_flops;
  attention_bwd_flops += scale * other.attention_bwd_flops;
  attention_seq = std::max(attention_seq, other.attention_seq);
}

KnotWeights knot_weights(const std::vector<std::pair<double, double>>& points, double flops) {
  if (points.empty()) throw std::invalid_argument("matmul_efficiency: no points");
  const std::size_t last = points.size() - 1;
  if (flops <= points.front().first) return {0, 0, 1, 0};
  if (flops >= points.back().first) return {last, last, 1, 0};
  for (std::size_t i = 1; i <= last; ++i) {
    if (flops <= points[i].first) {
      const double x0 = std::log10(points[i - 1].first), x1 = std::log10(points[i].first);
      const double w = (std::log10(flops) - x0) / (x1 - x0);
      return {i - 1, i, 1 - w, w};
    }
  }
  return {last, last, 1, 0};
}

double matmul_efficiency(const std::vector<std::pair<double, double>>& points, double flops) {
  const KnotWeights k = knot_weights(points, flops);
  if (k.w1 == 0) return points[k.k0].second;
  return points[k.k0].second + k.w1 * (points[k.k1].second - points[k.k0].second);
}

GemmRate gemm_rate(const Gemm& g, double peak_flops, double fp8_peak) {
  if (!g.fp8) return {peak_flops, g.flops};
  if (!(fp8_peak > 0)) throw std::logic_error("an FP8 GEMM timed without the GPU's FP8 peak");
  return {fp8_peak, g.flops * peak_flops / fp8_peak};
}

WorkTimer::WorkTimer(const spec::Gpu& gpu, double peak_flops, const spec::AttentionKernel* attention)
    : gpu_(gpu), peak_(peak_flops), attention_(attention) {
  const auto it = gpu.peak_flops.find(spec::Dtype::kFp8);
  if (it != gpu.peak_flops.end()) fp8_peak_ = it->second;
}

double WorkTimer::efficiency(double flops) {
  for (const auto& [f, eff] : seen_) {
    if (f == flops) return eff;
  }
  const double eff = matmul_efficiency(gpu_.matmul_efficiency, flops);
  seen_.emplace_back(flops, eff);
  return eff;
}

double attention_efficiency(const std::vector<std::pair<double, double>>& points, double seq) {
  if (points.empty()) throw std::invalid_argument("attention_efficiency: no points");
  if (seq <= points.front().first) return points.front().second;
  if (seq >= points.back().first) return points.back().second;
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (seq <= points[i].first) {
      const double x0 = std::log2(points[i - 1].first), x1 = std::log2(points[i].first);
      const double w = (std::log2(seq) - x0) / (x1 - x0);
      return points[i - 1].second + w * (points[i].second - points[i - 1].second);
    }
  }
  return points.back().second;
}

double attention_seconds(const Work& w, const spec::AttentionKernel* kernel, double peak_flops) {
  if (w.attention_fwd_flops == 0 && w.attention_bwd_flops == 0) return 0;
  if (kernel == nullptr) throw std::logic_error("fused attention work timed without an attention kernel");
  const double rate = peak_flops * kernel->sustained;
  return w.attention_fwd_flops / (rate * attention_efficiency(kernel->forward, w.attention_seq)) +
         w.attention_bwd_flops / (rate * attention_efficiency(kernel->backward, w.attention_seq));
}

const spec::AttentionKernel* attention_kernel(const spec::Cluster& cluster, const spec::Training& training) {
  if (!training.flash_attention()) return nullptr;
  const spec::Gpu& gpu = cluster.gpu;
  const std::string cluster_file = cluster.file.empty() ? "cluster " + cluster.name : cluster.file;
  if (gpu.default_attention_kernel.empty()) {
    throw spec::SpecError(cluster_file, "/gpu/attention_kernels",
                          "missing: " + training.label() + " runs attention as \"" + training.attention + "\"" +
                              (training.attention == "flash" ? " (the default)" : "") +
                              ", which needs a fused attention kernel's measurements on " + gpu.name +
                              " (or \"default\": \"unfused\" where it has none); add them, or set \"attention\": "
                              "\"unfused\" in the training");
  }
  if (training.attention == "flash" && gpu.default_attention_kernel == "unfused") return nullptr;
  if (const spec::AttentionKernel* k = spec::find_attention_kernel(gpu, training.attention)) return k;
  std::string names;
  for (const spec::AttentionKernel& k : gpu.attention_kernels) names += ", \"" + k.name + "\"";
  throw spec::SpecError(training.file.empty() ? "training" : training.file, "/attention",
                        "expected \"flash\", \"unfused\"" + names + " (the kernels " + cluster_file +
                            " lists), got \"" + training.attention + "\"");
}

spec::Training effective_training(const spec::Training& training, const spec::Cluster& cluster) {
  if (!training.flash_attention() || attention_kernel(cluster, training) != nullptr) return training;
  spec::Training t = training;
  t.attention = "unfused";  // the device's default: it has no fused kernel
  return t;
}

double WorkTimer::seconds(const Work& w) {
  double t = attention_seconds(w, attention_, peak_);
  for (const Gemm& g : w.gemms) {
    const GemmRate r = gemm_rate(g, peak_, fp8_peak_);
    t += g.count * g.flops / (r.peak * efficiency(r.curve_flops));
  }
  t += memory_seconds(w, gpu_);
  if (gpu_.activation_elems_per_s > 0) t += w.activation_elems / gpu_.activation_elems_per_s;
  if (gpu_.adam_params_per_s > 0) t += w.adam_params / gpu_.adam_params_per_s;
  return t;
}

bool has_kind_rate(const spec::Gpu& gpu, MemKind kind) {
  const spec::MemoryKernels& mk = gpu.memory_kernels;
  switch (kind) {
    case MemKind::kStrided: return mk.strided > 0;
    case MemKind::kDropout: return mk.dropout > 0;
    case MemKind::kSoftmax: return !mk.softmax.empty();
  }
  return false;
}

double memory_kind_efficiency(const spec::Gpu& gpu, MemKind kind, double softmax_row) {
  if (!has_kind_rate(gpu, kind)) return gpu.memory_efficiency;
  const spec::MemoryKernels& mk = gpu.memory_kernels;
  if (kind == MemKind::kSoftmax) return attention_efficiency(mk.softmax, softmax_row);
  return kind == MemKind::kStrided ? mk.strided : mk.dropout;
}

namespace {

// memory_seconds' terms: all of them, or only those of kernels streaming at memory_efficiency.
double memory_terms(const Work& w, const spec::Gpu& gpu, bool streaming_only) {
  double t = w.memory_bytes / (gpu.hbm_Bps * gpu.memory_efficiency);
  for (MemKind k : kAllMemKinds) {
    if (w.kind(k) <= 0 || (streaming_only && has_kind_rate(gpu, k))) continue;
    t += w.kind(k) / (gpu.hbm_Bps * memory_kind_efficiency(gpu, k, w.softmax_row));
  }
  return t;
}

}  // namespace

double memory_seconds(const Work& w, const spec::Gpu& gpu) { return memory_terms(w, gpu, false); }

double streaming_seconds(const Work& w, const spec::Gpu& gpu) { return memory_terms(w, gpu, true); }

double work_seconds(const Work& w, const spec::Gpu& gpu, double peak_flops) { return WorkTimer(gpu, peak_flops).seconds(w); }

namespace {

// The head's logits GEMM on one tp rank (column-parallel over the vocabulary), one micro-batch:
// 2 · T · h · ⌈V/t⌉ FLOPs.
double head_gemm_flops(const spec::Model& m, const spec::Plan& p) {
  return 2 * static_cast<double>(spec::rank_tokens(p, m.seq_len)) * static_cast<double>(m.hidden) *
         static_cast<double>((m.vocab + p.tp - 1) / p.tp);
}

// The GEMMs of the block linears whose name starts with `group` (count::block_linears), each split
// over t ranks as count::shard says, for T tokens: 2 * T * in * out FLOPs; `rows` 1: only the
// row-parallel ones, 0: only the others, -1: all.
void add_linear_gemms(const spec::Model& m, int64_t t, double T, const char* group, bool fp8, Work& gemms, int rows = -1) {
  for (const count::Linear& l : count::block_linears(m)) {
    if (l.name.rfind(group, 0) != 0) continue;
    if (rows >= 0 && (l.split == count::Split::kRow) != (rows == 1)) continue;
    const count::Shard sh = count::shard(m, l, t);
    gemms.add_gemm(2 * T * static_cast<double>(sh.in) * static_cast<double>(sh.out), 1, fp8);
  }
}

// Transformer Engine's FP8 casts around the block linears of `group` (work.hpp: FP8), bytes of one
// micro-batch: forward (inputs and the weights' share) and backward (output gradients).
struct CastBytes {
  double forward = 0, backward = 0;
};
CastBytes fp8_cast_bytes(const spec::Model& m, int64_t t, double T, const char* group, int64_t micro_batches) {
  CastBytes c;
  bool norm_input_cast = false;   // the norm-fed input, shared by QKV (or gate and up), cast once
  for (const count::Linear& l : count::block_linears(m)) {
    if (l.name.rfind(group, 0) != 0) continue;
    const count::Shard sh = count::shard(m, l, t);
    if (l.split == count::Split::kRow) {
      c.forward += 4 * T * static_cast<double>(sh.in);
    } else if (!norm_input_cast) {
      c.forward += 1 * T * static_cast<double>(sh.in);
      norm_input_cast = true;
    }
    c.forward += 4 * static_cast<double>(sh.weight()) / static_cast<double>(micro_batches);
    c.backward += 4 * T * static_cast<double>(sh.out);
  }
  return c;
}

// An RMSNorm written in PyTorch ops (Meta's reference Llama, Hugging Face's LlamaRMSNorm,
// torchtitan's and ibm-fms's RMSNorm), bytes per normalised element:
//   x.float() r2 w4, pow(2) r4 w4, mean r4, x * rsqrt r4 w4, type_as r4 w2, * weight r2 w2 = 36;
// fp32 training: no casts, 28. The two products take a broadcast operand (the row's rsqrt, the
// weight row): TensorIterator's strided path (kStrided), 12 bytes (fp32 16).
void add_rms_norm_ops(double elems, bool fp32, Work& w) {
  w.memory_bytes += (fp32 ? 12.0 : 24.0) * elems;
  w.add_bytes(MemKind::kStrided, (fp32 ? 16.0 : 12.0) * elems);
}

// The block's norms, bytes per token: fused, one norm kernel 4h_r (8h_r in fp32); eager, an RMSNorm
// model's norms as PyTorch ops (above), a LayerNorm one native kernel (torch.nn.LayerNorm).
void add_norms(const spec::Model& m, int64_t norms, double h_r, bool fp32, bool eager, Work& w) {
  if (eager && m.norm == spec::Norm::kRmsNorm) {
    add_rms_norm_ops(static_cast<double>(norms) * h_r, fp32, w);
  } else {
    w.memory_bytes += (fp32 ? 8.0 : 4.0) * h_r;
  }
}

// The attention unit's eager passes beyond the norms: per-head q/k RMSNorms (qk_norm) on the q and
// k widths; rotary embeddings on the rotated share of q and k, in the complex form of Meta's
// reference code and torchtitan (apply_rotary_emb: float() r2 w4, complex product with the
// broadcast frequencies r4 w4, type_as r4 w2 = 20 bytes per element; fp32: the product alone, 8;
// Hugging Face's rotate_half form moves as much), plus a cat of rotated and passed dimensions
// (r2 w2) when only a share rotates; and grouped-query K and V repeated to every query head
// before the attention kernel (repeat_kv: expand + reshape copies, read kv, write q width, twice:
// 4·(q + kv) bytes, fp32 8·(q + kv)). Unfused, the score products take q, k and v from the
// head-major view of token-major tensors (view + transpose, as minGPT's CausalSelfAttention and
// Hugging Face's transpose_for_scores make them): torch.matmul folds the batch and head dimensions
// with reshape, which copies each one (ATen matmul's batched path; r2 w2 per element, fp32 r4 w4).
// The head-major copies are permuted copies (kStrided); repeat_kv's copies and the rotary product
// run TensorIterator's vectorised or complex paths, counted contiguous.
void add_eager_attention_ops(const spec::Model& m, int64_t t, bool fp32, bool flash, Work& w) {
  const double d = static_cast<double>(m.head_dim());
  const int64_t heads_r = m.heads / t, kv_r = std::max<int64_t>(1, m.kv_heads / t);
  const double q = static_cast<double>(heads_r) * d, kv = static_cast<double>(kv_r) * d;
  const double width = fp32 ? 2.0 : 1.0;
  if (m.qk_norm) add_rms_norm_ops(q + kv, fp32, w);
  if (m.position == spec::Position::kRope) {
    w.memory_bytes += (fp32 ? 8.0 : 20.0) * m.rotary_fraction * (q + kv);
    if (m.rotary_fraction < 1) w.memory_bytes += 4.0 * width * (q + kv);
  }
  if (kv_r < heads_r) w.memory_bytes += 4.0 * width * (q + kv);
  if (!flash) w.add_bytes(MemKind::kStrided, 4.0 * width * (q + 2 * (kv_r < heads_r ? q : kv)));
}

// The cross-entropy over the v_r logits a token has on one tp rank (16-bit logits from the head's
// GEMM), bytes per token by kind. Fused: Megatron-LM's vocabulary-parallel cross-entropy as every
// Megatron-LM GPT runs it by default (core_r0.8.0 tensor_parallel/cross_entropy.py; the same
// algorithm in 2021's mpu/cross_entropy.py, called on output.float()), one kernel per op:
//   forward  .float() r2 w4, max r4, in-place subtract of the row's max r4 w4 (a broadcast
//            operand: kStrided), in-place exp r4 w4, sum r4, in-place divide by the row's sum
//            r4 w4 (kStrided)                                               = 38 per logit
//   backward grad.mul_(grad_output) r4 w4 (kStrided), the cast back to 16 bits r4 w2 = 14
// Eager: F.cross_entropy(logits.float(), ...) (torchtitan, Hugging Face): .float() 6, log_softmax
// over a row too long for shared memory (max, sum of exp, write: r4·3 w4) 16 = 22; backward:
// nll_loss's zeroed gradient w4, log_softmax's backward (sum of the gradient r4, then r4 r4 w4)
// 16, the cast back 6 = 26. fp32 training drops the casts: fused 32 and 8, eager 16 and 20.
struct LossWork {
  Work forward, backward;
};
LossWork loss_work(double v_r, bool fp32, bool eager) {
  const double cast = fp32 ? 0.0 : 6.0;  // to fp32 forward, back to 16 bits backward
  LossWork l;
  if (eager) {
    l.forward.memory_bytes = v_r * (16 + cast);
    l.backward.memory_bytes = v_r * (20 + cast);
  } else {
    l.forward.memory_bytes = v_r * (16 + cast);
    l.forward.add_bytes(MemKind::kStrided, 16 * v_r);
    l.backward.memory_bytes = v_r * cast;
    l.backward.add_bytes(MemKind::kStrided, 8 * v_r);
  }
  return l;
}

// The backward passes of the forward's memory-bound kernels, which move twice their bytes: softmax's
// and dropout's backward kernels are contiguous elementwise passes (softmax_warp_backward /
// cunn_SoftMaxBackward read y and dy and write dx; dropout's backward is a masked scale), so their
// bytes move at the contiguous rate; strided and casting passes stay what they are.
Work backward_bytes(const Work& forward) {
  Work w;
  w.add(forward, 2);
  for (MemKind k : {MemKind::kSoftmax, MemKind::kDropout}) {
    double& b = w.kind_bytes[static_cast<std::size_t>(k)];
    w.memory_bytes += b;
    b = 0;
  }
  return w;
}

WorkModel::UnitWork unit_work(const spec::Model& m, const spec::Plan& p, const Unit& u, bool fp32, bool fp8, bool eager,
                              bool flash, double grad_pass) {
  // T: the rank's tokens (1/cp of each sequence with context parallelism)
  const double T = static_cast<double>(spec::rank_tokens(p, m.seq_len)), h = static_cast<double>(m.hidden);
  const int64_t t = p.tp;
  const double h_r = p.sequence_parallel ? h / static_cast<double>(t) : h;
  const double f_r = static_cast<double>(m.ffn_hidden / t);
  const double width = fp32 ? 2.0 : 1.0;  // 4-byte elements move twice the bytes
  Work gemms, scores;
  Work token;        // memory-bound bytes per token by kind (fp32 already counted)
  Work score_token;  // the scores' memory-bound bytes per token (softmax, dropout; eager scale and mask)
  double activation_elems = 0;
  LossWork loss;     // the head's cross-entropy, per token
  Work experts;      // MoE: the routed experts' GEMMs, bytes and activation of one micro-batch's forward
  switch (u.kind) {
    case UnitKind::kEmbedding: token.memory_bytes = 4 * width * h_r; break;
    case UnitKind::kHead: {
      const double v_r = static_cast<double>((m.vocab + t - 1) / t);
      gemms.add_gemm(head_gemm_flops(m, p), 1);
      token.memory_bytes = 4 * width * h_r;  // the final norm
      loss = loss_work(v_r, fp32, eager);
      break;
    }
    case UnitKind::kAttention: {
      const int64_t d = m.head_dim();
      add_linear_gemms(m, t, T, "attn.", fp8, gemms);
      const double s = static_cast<double>(m.seq_len), dd = static_cast<double>(d);
      // QKᵀ over the query/key head size, softmax·V over the value's (latent attention: 192 and
      // 128 for DeepSeek-V3; otherwise both d)
      const double d_qk = m.mla.on() ? static_cast<double>(m.mla.qk_head_dim()) : dd;
      const double d_v = m.mla.on() ? static_cast<double>(m.mla.v_head_dim) : dd;
      const double a_r = static_cast<double>(m.heads / t);
      const double batched = static_cast<double>(p.micro_batch) * a_r;
      // context parallelism: a rank computes 1/cp of every sequence's causal attention (balanced
      // chunks; Ulysses: a/cp heads of the whole sequence), the p2p ring in blocks of s/cp keys
      const double cp = static_cast<double>(p.cp);
      if (flash) {
        // one fused kernel: causal forward 2 b a_r s^2 d, backward 2.5x (the kernels' convention)
        scores.attention_fwd_flops = batched * s * s * (d_qk + d_v) / cp;
        scores.attention_bwd_flops = 2.5 * scores.attention_fwd_flops;
        scores.attention_seq = p.cp_comm == spec::CpComm::kP2p ? s / cp : s;
      } else {
        // QK^T and softmax.V: per (sequence, head) 2 s^2 d FLOPs each; b * heads/t of them.
        scores.add_gemm(2 * s * s * d_qk / cp, batched);
        scores.add_gemm(2 * s * s * d_v / cp, batched);
        // softmax and its dropout; eager: the scale and the mask (broadcast) as passes of their own
        score_token.add_bytes(MemKind::kSoftmax, 4 * width * a_r * s);
        score_token.softmax_row = s;
        score_token.add_bytes(MemKind::kDropout, 5 * width * a_r * s);
        if (eager) {
          score_token.memory_bytes += 4 * width * a_r * s;
          score_token.add_bytes(MemKind::kStrided, 4 * width * a_r * s);
        }
      }
      add_norms(m, eager ? m.attn_norms : 1, h_r, fp32, eager, token);
      if (eager) {
        // dropout and residual add apart (5 + 6 instead of 7), and, unfused, the context's copy
        // back from the head layout (4; a fused kernel writes it in the token layout)
        token.add_bytes(MemKind::kDropout, 5 * width * h_r);
        token.memory_bytes += 6 * width * h_r;
        if (!flash) token.add_bytes(MemKind::kStrided, 4 * width * h_r);
        add_eager_attention_ops(m, t, fp32, flash, token);
      } else {
        token.memory_bytes += 7 * width * h_r;  // bias-dropout-residual, one kernel
      }
      break;
    }
    case UnitKind::kMlp: {
      add_linear_gemms(m, t, T, "mlp.", fp8, gemms);
      add_norms(m, eager ? m.mlp_norms : 1, h_r, fp32, eager, token);
      // eager: dropout and residual add apart; a gated MLP's activation and product apart (4 + 6)
      if (eager) {
        token.add_bytes(MemKind::kDropout, 5 * width * h_r);
        token.memory_bytes += 6 * width * h_r;
      } else {
        token.memory_bytes += 7 * width * h_r;
      }
      token.memory_bytes += width * (spec::gated(m.mlp) ? (eager ? 10 : 6) : 4) * f_r;
      // GELU's tanh or SwiGLU's sigmoid (GeGLU: tanh), once per element of f/t; ReLU has none
      activation_elems = m.mlp == spec::Mlp::kRelu ? 0 : T * f_r;
      break;
    }
    case UnitKind::kMoe: {
      const spec::Moe& e = m.moe;
      const double Tr = T / static_cast<double>(t), k = static_cast<double>(e.top_k);
      const double E = static_cast<double>(e.experts), fe = static_cast<double>(e.ffn_hidden);
      // expert tensor parallelism: each expert's width over etp ranks, for etp times the tokens
      const double etp = static_cast<double>(p.etp), fe_r = fe / etp;
      const double local = E / static_cast<double>(p.ep), n_e = Tr * k * etp / local;
      gemms.add_gemm(2 * Tr * h * E, 1);   // the router
      const double gated = spec::gated(m.mlp) ? 1.0 : 0.0;
      if (e.shared_ffn_hidden > 0) {
        for (const count::Linear& l : count::mlp_linears(m, "mlp.shared", e.shared_ffn_hidden)) {
          const count::Shard sh = count::shard(m, l, t);
          gemms.add_gemm(2 * T * static_cast<double>(sh.in) * static_cast<double>(sh.out), 1, fp8);
        }
        const double fs_r = static_cast<double>(e.shared_ffn_hidden / t);
        token.memory_bytes += width * (gated > 0 ? 6 : 4) * fs_r;
        activation_elems += m.mlp == spec::Mlp::kRelu ? 0 : T * fs_r;
      }
      // the grouped GEMMs: E/ep of each linear's size at n_e tokens (the same bytes and
      // activations with etp: etp times the tokens over 1/etp of the width)
      experts.add_gemm(2 * n_e * h * fe_r, (1 + gated) * local, fp8);
      experts.add_gemm(2 * n_e * fe_r * h, local, fp8);
      experts.memory_bytes = width * Tr * k * etp * (gated > 0 ? 6 : 4) * fe_r;
      experts.activation_elems = m.mlp == spec::Mlp::kRelu ? 0 : Tr * k * etp * fe_r;
      add_norms(m, 1, h_r, fp32, eager, token);
      token.memory_bytes += 7 * width * h_r;
      // per token of the micro-batch: router scores, permute and unpermute of the rank's T_r = T/t
      token.memory_bytes += (16 * E + width * 4 * h * (k + 1)) / static_cast<double>(t);
      // the all-gather dispatcher's unpermute writes the group's G·T_r tokens (zeros but for its
      // experts' rows) before their reduce-scatter
      const int64_t group = p.ep * p.etp;
      if (p.moe_dispatcher == spec::MoeDispatcher::kAllGather && group > 1) {
        token.memory_bytes += static_cast<double>(group) * width * h / static_cast<double>(t);
      }
      break;
    }
  }
  Work mem, score_mem;  // per micro-batch
  mem.add(token, T);
  score_mem.add(score_token, T);
  CastBytes cast;
  if (fp8 && (u.kind == UnitKind::kAttention || u.kind == UnitKind::kMlp)) {
    cast = fp8_cast_bytes(m, t, T, u.kind == UnitKind::kAttention ? "attn." : "mlp.", p.micro_batches);
  }
  WorkModel::UnitWork w;
  w.forward.add(gemms);
  Work forward_scores = scores;
  forward_scores.attention_bwd_flops = 0;  // the forward runs the forward kernel only
  w.forward.add(forward_scores);
  w.forward.add(mem);
  w.forward.add(score_mem);
  w.forward.memory_bytes += cast.forward;
  w.forward.add(loss.forward, T);
  w.forward.activation_elems += activation_elems;
  w.backward_input.add(gemms);
  if (scores.attention_fwd_flops > 0) {
    // the fused backward kernel (its FLOPs already 2.5x the forward's)
    w.backward_input.attention_bwd_flops += scores.attention_bwd_flops;
    w.backward_input.attention_seq = scores.attention_seq;
  } else {
    w.backward_input.add(scores, 2);
  }
  w.backward_input.add(backward_bytes(mem));
  w.backward_input.add(backward_bytes(score_mem));
  w.backward_input.memory_bytes += cast.backward;
  w.backward_input.add(loss.backward, T);
  w.backward_input.activation_elems += activation_elems;
  w.backward_weight.add(gemms);
  w.backward_weight.memory_bytes += static_cast<double>(u.params) * grad_pass;
  if (u.kind == UnitKind::kMoe) {
    // the experts' backward: their GEMMs again for the input and the weight gradients, twice
    // their bytes and their activation's derivative, and their gradients' pass
    w.experts_forward = experts;
    w.experts_backward_input.gemms = experts.gemms;
    w.experts_backward_input.memory_bytes = 2 * experts.memory_bytes;
    w.experts_backward_input.activation_elems = experts.activation_elems;
    w.experts_backward_weight.gemms = experts.gemms;
    w.experts_backward_weight.memory_bytes = static_cast<double>(u.expert_params) * grad_pass;
    w.forward.add(w.experts_forward);
    w.backward_input.add(w.experts_backward_input);
    w.backward_weight.add(w.experts_backward_weight);
    w.backward_weight.memory_bytes -= static_cast<double>(u.expert_params) * grad_pass;   // counted above with u.params
  }
  w.score_forward.add(forward_scores);
  w.score_forward.add(score_mem);
  return w;
}

}  // namespace

Work block_linear_gemms(const spec::Model& m, const spec::Training& training, const spec::Plan& p, program::UnitKind kind,
                        bool row) {
  Work w;
  if (kind == UnitKind::kHead && !row) w.add_gemm(head_gemm_flops(m, p), 1);
  if (kind != UnitKind::kAttention && kind != UnitKind::kMlp) return w;
  add_linear_gemms(m, p.tp, static_cast<double>(spec::rank_tokens(p, m.seq_len)), kind == UnitKind::kAttention ? "attn." : "mlp.",
                   training.dtype == spec::Dtype::kFp8, w, row ? 1 : 0);
  return w;
}

WorkModel::WorkModel(const spec::Model& model, const spec::Training& training, const spec::Plan& plan)
    : selective_(plan.recompute == spec::Recompute::kSelective),
      // the shards are over the dp·cp ranks ZeRO partitions over (spec::Plan::dp_cp)
      optimizer_bytes_(spec::optimizer_step_bytes(training.framework, training.dtype, plan.zero.stage, plan.dp_cp())) {
  const bool fp32 = training.dtype == spec::Dtype::kFp32;
  const bool fp8 = training.dtype == spec::Dtype::kFp8;
  const double grad_pass = spec::grad_pass_bytes(training.framework, training.dtype, training.reduce_bytes(), plan.zero.stage,
                                                 plan.dp_cp(), plan.micro_batches);
  std::vector<std::pair<program::UnitKind, int64_t>> seen;   // (kind, params) of each distinct unit
  const auto units = program::shared_model_units(model, plan.tp, plan.ep, plan.etp);
  for (const Unit& u : *units) {
    const auto key = std::make_pair(u.kind, u.params);
    const auto it = std::find(seen.begin(), seen.end(), key);
    if (it != seen.end()) {
      distinct_of_.push_back(static_cast<int32_t>(it - seen.begin()));
      continue;
    }
    distinct_of_.push_back(static_cast<int32_t>(distinct_.size()));
    seen.push_back(key);
    distinct_.push_back(unit_work(model, plan, u, fp32, fp8, training.kernels == spec::Kernels::kEager,
                                  training.flash_attention(), grad_pass));
  }
}

Work WorkModel::compute(Op op, int32_t begin, int32_t end) const {
  if (begin < 0 || end > unit_count() || begin > end) {
    throw std::invalid_argument("WorkModel::compute: unit range out of the model");
  }
  Work w;
  for (int32_t u = begin; u < end; ++u) {
    const UnitWork& uw = unit(u);
    switch (op) {
      case Op::kForward:
      case Op::kRecompute: w.add(uw.forward); break;
      case Op::kBackward:
        w.add(uw.backward_input);
        w.add(uw.backward_weight);
        if (selective_) w.add(uw.score_forward);
        break;
      case Op::kBackwardInput:
        w.add(uw.backward_input);
        if (selective_) w.add(uw.score_forward);
        break;
      case Op::kBackwardWeight: w.add(uw.backward_weight); break;
      default: throw std::invalid_argument("WorkModel::compute: not a compute instruction");
    }
  }
  return w;
}

Work WorkModel::optimizer_gpu(int64_t elems) const {
  Work w;
  w.memory_bytes = static_cast<double>(elems) * optimizer_bytes_;
  w.adam_params = static_cast<double>(elems);
  return w;
}

}  // namespace stagecraft::sim
