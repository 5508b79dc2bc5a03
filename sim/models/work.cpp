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

void Work::add(const Work& other, double scale) {
  for (const Gemm& g : other.gemms) add_gemm(g.flops, scale * g.count, g.fp8);
  memory_bytes += scale * other.memory_bytes;
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
  return w.attention_fwd_flops / (peak_flops * attention_efficiency(kernel->forward, w.attention_seq)) +
         w.attention_bwd_flops / (peak_flops * attention_efficiency(kernel->backward, w.attention_seq));
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
  t += w.memory_bytes / (gpu_.hbm_Bps * gpu_.memory_efficiency);
  if (gpu_.activation_elems_per_s > 0) t += w.activation_elems / gpu_.activation_elems_per_s;
  if (gpu_.adam_params_per_s > 0) t += w.adam_params / gpu_.adam_params_per_s;
  return t;
}

double work_seconds(const Work& w, const spec::Gpu& gpu, double peak_flops) { return WorkTimer(gpu, peak_flops).seconds(w); }

namespace {

// The head's logits GEMM on one tp rank (column-parallel over the vocabulary), one micro-batch:
// 2 · T · h · ⌈V/t⌉ FLOPs.
double head_gemm_flops(const spec::Model& m, const spec::Plan& p) {
  return 2 * static_cast<double>(p.micro_batch * m.seq_len) * static_cast<double>(m.hidden) *
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

// Eager PyTorch ops of the model's own layers, beyond what the fused count charges (work.hpp:
// eager kernels), bytes per token on one tp rank. An RMSNorm written in PyTorch ops (Meta's
// reference Llama, Hugging Face's LlamaRMSNorm, torchtitan's and ibm-fms's RMSNorm):
//   x.float() r2 w4, pow(2) r4 w4, mean r4, x * rsqrt r4 w4, type_as r4 w2, * weight r2 w2 = 36
// bytes per element (fp32 training: no casts, 28), against the fused count's one norm of 4 (8);
// a LayerNorm is one native kernel (torch.nn.LayerNorm), as fused.
double eager_norm_bytes(const spec::Model& m, int64_t norms, double h_r, bool fp32) {
  if (m.norm != spec::Norm::kRmsNorm) return 0.0;
  return (static_cast<double>(norms) * (fp32 ? 28.0 : 36.0) - (fp32 ? 8.0 : 4.0)) * h_r;
}

// The attention unit's eager passes: its norms as above; per-head q/k RMSNorms (qk_norm) on the
// q and k widths; rotary embeddings on the rotated share of q and k, in the complex form of Meta's
// reference code and torchtitan (apply_rotary_emb: float() r2 w4, complex product r4 w4, type_as
// r4 w2 = 20 bytes per element; fp32: the product alone, 8; Hugging Face's rotate_half form moves
// as much: q·cos 4, neg and cat 6, ·sin 4, sum 6), plus a cat of rotated and passed dimensions
// (r2 w2) when only a share rotates; and grouped-query K and V repeated to every query head
// before the attention kernel (repeat_kv: expand + reshape copies, read kv, write q width, twice:
// 4·(q + kv) bytes, fp32 8·(q + kv)). Unfused, the score products take q, k and v from the
// head-major view of token-major tensors (view + transpose, as minGPT's CausalSelfAttention and
// Hugging Face's transpose_for_scores make them): torch.matmul folds the batch and head dimensions
// with reshape, which copies each one (ATen matmul's batched path; r2 w2 per element, fp32 r4 w4).
double eager_attention_bytes(const spec::Model& m, int64_t t, double h_r, bool fp32, bool flash) {
  const double d = static_cast<double>(m.head_dim());
  const int64_t heads_r = m.heads / t, kv_r = std::max<int64_t>(1, m.kv_heads / t);
  const double q = static_cast<double>(heads_r) * d, kv = static_cast<double>(kv_r) * d;
  const double w = fp32 ? 2.0 : 1.0;
  double bytes = eager_norm_bytes(m, m.attn_norms, h_r, fp32);
  if (m.qk_norm) bytes += (fp32 ? 28.0 : 36.0) * (q + kv);
  if (m.position == spec::Position::kRope) {
    bytes += (fp32 ? 8.0 : 20.0) * m.rotary_fraction * (q + kv);
    if (m.rotary_fraction < 1) bytes += 4.0 * w * (q + kv);
  }
  if (kv_r < heads_r) bytes += 4.0 * w * (q + kv);
  if (!flash) bytes += 4.0 * w * (q + 2 * (kv_r < heads_r ? q : kv));
  return bytes;
}

// The cross-entropy over the v_r logits a token has on one tp rank (16-bit logits from the head's
// GEMM), bytes per token. Fused: Megatron-LM's vocabulary-parallel cross-entropy as every
// Megatron-LM GPT runs it by default (core_r0.8.0 tensor_parallel/cross_entropy.py; the same
// algorithm in 2021's mpu/cross_entropy.py, called on output.float()), one kernel per op:
//   forward  .float() r2 w4, max r4, in-place subtract r4 w4, in-place exp r4 w4, sum r4,
//            in-place divide by the sum r4 w4                                 = 38 per logit
//   backward grad.mul_(grad_output) r4 w4, the cast back to 16 bits r4 w2     = 14
// Eager: F.cross_entropy(logits.float(), ...) (torchtitan, Hugging Face): .float() 6, log_softmax
// over a row too long for shared memory (max, sum of exp, write: r4·3 w4) 16 = 22; backward:
// nll_loss's zeroed gradient w4, log_softmax's backward (sum of the gradient r4, then r4 r4 w4)
// 16, the cast back 6 = 26. fp32 training drops the casts: fused 32 and 8, eager 16 and 20.
struct LossBytes {
  double forward = 0, backward = 0;
};
LossBytes loss_bytes(double v_r, bool fp32, bool eager) {
  const double cast = fp32 ? 0.0 : 6.0;  // to fp32 forward, back to 16 bits backward
  if (eager) return {v_r * (16 + cast), v_r * (20 + cast)};
  return {v_r * (32 + cast), v_r * (8 + cast)};
}

WorkModel::UnitWork unit_work(const spec::Model& m, const spec::Plan& p, const Unit& u, bool fp32, bool fp8, bool eager,
                              bool flash) {
  const double T = static_cast<double>(p.micro_batch * m.seq_len), h = static_cast<double>(m.hidden);
  const int64_t t = p.tp;
  const double h_r = p.sequence_parallel ? h / static_cast<double>(t) : h;
  const double f_r = static_cast<double>(m.ffn_hidden / t);
  const double width = fp32 ? 2.0 : 1.0;  // 4-byte elements move twice the bytes
  Work gemms, scores;
  double bytes_per_token = 0, score_bytes = 0, activation_elems = 0;
  double eager_bytes = 0;  // per token, in bytes (not scaled by width): eager passes of the model's own layers
  LossBytes loss;          // the head's cross-entropy, per token, in bytes
  switch (u.kind) {
    case UnitKind::kEmbedding: bytes_per_token = 4 * h_r; break;
    case UnitKind::kHead: {
      const double v_r = static_cast<double>((m.vocab + t - 1) / t);
      gemms.add_gemm(head_gemm_flops(m, p), 1);
      bytes_per_token = 4 * h_r;
      loss = loss_bytes(v_r, fp32, eager);
      break;
    }
    case UnitKind::kAttention: {
      const int64_t d = m.head_dim();
      add_linear_gemms(m, t, T, "attn.", fp8, gemms);
      const double s = static_cast<double>(m.seq_len);
      const double batched = static_cast<double>(p.micro_batch * (m.heads / t));
      if (flash) {
        // one fused kernel: causal forward 2 b a_r s^2 d, backward 2.5x (the kernels' convention)
        scores.attention_fwd_flops = 2 * batched * s * s * static_cast<double>(d);
        scores.attention_bwd_flops = 2.5 * scores.attention_fwd_flops;
        scores.attention_seq = s;
      } else {
        // QK^T and softmax.V: per (sequence, head) 2 s^2 d FLOPs each; b * heads/t of them.
        scores.add_gemm(2 * s * s * static_cast<double>(d), 2 * batched);
        // softmax and its dropout; eager: the scale and the mask as passes of their own
        score_bytes = (eager ? 17.0 : 9.0) * static_cast<double>(m.heads / t) * s * T;
      }
      // eager: dropout and residual add apart (5 + 6 instead of 7), and, unfused, the context's
      // copy back from the head layout (4; a fused kernel writes it in the token layout)
      bytes_per_token = (eager ? (flash ? 15 : 19) : 11) * h_r;
      if (eager) eager_bytes = eager_attention_bytes(m, t, h_r, fp32, flash);
      break;
    }
    case UnitKind::kMlp: {
      add_linear_gemms(m, t, T, "mlp.", fp8, gemms);
      // eager: dropout and residual add apart; a gated MLP's activation and product apart (4 + 6)
      bytes_per_token = (eager ? 15 : 11) * h_r + (spec::gated(m.mlp) ? (eager ? 10 : 6) : 4) * f_r;
      if (eager) eager_bytes = eager_norm_bytes(m, m.mlp_norms, h_r, fp32);
      // GELU's tanh or SwiGLU's sigmoid (GeGLU: tanh), once per element of f/t; ReLU has none
      activation_elems = m.mlp == spec::Mlp::kRelu ? 0 : T * f_r;
      break;
    }
  }
  const double mem = width * T * bytes_per_token + T * eager_bytes, score_mem = width * score_bytes;
  CastBytes cast;
  if (fp8 && (u.kind == UnitKind::kAttention || u.kind == UnitKind::kMlp)) {
    cast = fp8_cast_bytes(m, t, T, u.kind == UnitKind::kAttention ? "attn." : "mlp.", p.micro_batches);
  }
  WorkModel::UnitWork w;
  w.forward.add(gemms);
  Work forward_scores = scores;
  forward_scores.attention_bwd_flops = 0;  // the forward runs the forward kernel only
  w.forward.add(forward_scores);
  w.forward.memory_bytes += mem + score_mem + cast.forward + T * loss.forward;
  w.forward.activation_elems += activation_elems;
  w.backward_input.add(gemms);
  if (scores.attention_fwd_flops > 0) {
    // the fused backward kernel (its FLOPs already 2.5x the forward's)
    w.backward_input.attention_bwd_flops += scores.attention_bwd_flops;
    w.backward_input.attention_seq = scores.attention_seq;
  } else {
    w.backward_input.add(scores, 2);
  }
  w.backward_input.memory_bytes += 2 * (mem + score_mem) + cast.backward + T * loss.backward;
  w.backward_input.activation_elems += activation_elems;
  w.backward_weight.add(gemms);
  w.backward_weight.memory_bytes += static_cast<double>(u.params) * (fp32 ? 12.0 : 10.0);
  w.score_forward.add(forward_scores);
  w.score_forward.memory_bytes += score_mem;
  return w;
}

}  // namespace

Work block_linear_gemms(const spec::Model& m, const spec::Training& training, const spec::Plan& p, program::UnitKind kind,
                        bool row) {
  Work w;
  if (kind == UnitKind::kHead && !row) w.add_gemm(head_gemm_flops(m, p), 1);
  if (kind != UnitKind::kAttention && kind != UnitKind::kMlp) return w;
  add_linear_gemms(m, p.tp, static_cast<double>(p.micro_batch * m.seq_len), kind == UnitKind::kAttention ? "attn." : "mlp.",
                   training.dtype == spec::Dtype::kFp8, w, row ? 1 : 0);
  return w;
}

WorkModel::WorkModel(const spec::Model& model, const spec::Training& training, const spec::Plan& plan)
    : selective_(plan.recompute == spec::Recompute::kSelective),
      grad_bytes_(spec::bytes_of(spec::storage_dtype(training.dtype))) {
  const bool fp32 = training.dtype == spec::Dtype::kFp32;
  const bool fp8 = training.dtype == spec::Dtype::kFp8;
  std::vector<std::pair<program::UnitKind, int64_t>> seen;   // (kind, params) of each distinct unit
  for (const Unit& u : program::model_units(model, plan.tp)) {
    const auto key = std::make_pair(u.kind, u.params);
    const auto it = std::find(seen.begin(), seen.end(), key);
    if (it != seen.end()) {
      distinct_of_.push_back(static_cast<int32_t>(it - seen.begin()));
      continue;
    }
    distinct_of_.push_back(static_cast<int32_t>(distinct_.size()));
    seen.push_back(key);
    distinct_.push_back(unit_work(model, plan, u, fp32, fp8, training.kernels == spec::Kernels::kEager,
                                  training.flash_attention()));
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
  // fp32 master, momentum and variance read and written, gradient read.
  Work w;
  w.memory_bytes = static_cast<double>(elems) * (2.0 * 12.0 + static_cast<double>(grad_bytes_));
  w.adam_params = static_cast<double>(elems);
  return w;
}

}  // namespace stagecraft::sim
