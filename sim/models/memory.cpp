#include "sim/models/memory.hpp"

#include <algorithm>

#include "core/count/count.hpp"

namespace stagecraft::sim {

using program::Unit;
using program::UnitKind;

ModelStates model_states(int64_t stage_params, int64_t persistent, const spec::ZeroConfig& zero, int64_t dp,
                         spec::Dtype dtype) {
  const bool mixed = dtype != spec::Dtype::kFp32;
  const int64_t w = mixed ? 2 : 4;        // parameter and gradient bytes
  const int64_t k = mixed ? 12 : 8;       // optimizer bytes per parameter
  const int64_t shard = (stage_params + dp - 1) / dp;
  ModelStates s;
  // offload_param: the shard lives in host memory; persistent tensors stay on the GPU
  const int64_t on_gpu_shard = zero.offload_param == spec::Offload::kCpu ? 0 : shard;
  s.params = zero.stage == 3 ? w * (on_gpu_shard + persistent) : w * stage_params;
  s.grads = zero.stage >= 2 ? w * shard : w * stage_params;
  s.optimizer = zero.offload_optimizer == spec::Offload::kCpu ? 0 : (zero.stage >= 1 ? k * shard : k * stage_params);
  return s;
}

int64_t fp8_state_bytes(const spec::Model& m, int64_t tp, int64_t blocks, spec::Dtype dtype) {
  if (dtype != spec::Dtype::kFp8) return 0;
  int64_t per_block = 0;
  for (const count::Linear& l : count::block_linears(m)) per_block += 2 * count::shard(m, l, tp).weight() + kFp8ScalingStateBytes;
  return per_block * blocks;
}

int64_t p2p_buffer_bytes(int64_t message_bytes, int64_t pp) { return pp > 1 ? 2 * message_bytes : 0; }

int64_t hpz_secondary_bytes(int64_t gathered_params, const spec::ZeroConfig& zero, int64_t dp, int64_t param_bytes) {
  if (zero.stage != 3 || !spec::secondary_partition(zero, dp)) return 0;
  return param_bytes * ((gathered_params + zero.hpz_group - 1) / zero.hpz_group);
}

int64_t grad_bucket_buffer_bytes(const spec::ZeroConfig& zero, int64_t dp, int64_t stage_params, int64_t param_bytes) {
  return zero.stage >= 2 && dp > 1 ? std::min(zero.reduce_bucket, stage_params) * param_bytes : 0;
}

int64_t comm_buffer_bytes(int64_t message_bytes, int64_t pp, const spec::ZeroConfig& zero, int64_t dp, int64_t stage_params,
                          int64_t param_bytes) {
  return p2p_buffer_bytes(message_bytes, pp) + grad_bucket_buffer_bytes(zero, dp, stage_params, param_bytes);
}

double activation_bytes_per_token(const Unit& unit, const spec::Model& m, const spec::Plan& p,
                                  const spec::Training& training, spec::Recompute mode) {
  const spec::Dtype dtype = spec::storage_dtype(training.dtype);
  const bool fp8 = training.dtype == spec::Dtype::kFp8;
  const double h = static_cast<double>(m.hidden), t = static_cast<double>(p.tp);
  const double q_r = static_cast<double>(m.q_dim()) / t;
  const double kv_r = static_cast<double>(count::kv_heads_per_rank(m, p.tp) * m.head_dim());
  const double f_r = static_cast<double>(m.ffn_hidden) / t;
  const double scale = dtype == spec::Dtype::kFp32 ? 2.0 : 1.0;
  // unfused: softmax output, its dropout mask and output, 5as/t; flash: the fp32 logsumexp per
  // head and token, 4a/t bytes whatever the dtype
  const bool flash = training.flash_attention();
  const double a_r = static_cast<double>(m.heads) / t;
  const double scores = flash ? 4.0 * a_r / scale : 5.0 * a_r * static_cast<double>(m.seq_len);
  const bool sp = p.sequence_parallel;
  // Bytes of the tensors of width h every tp rank keeps whole, or 1/t of them with sequence parallelism.
  const auto whole = [&](double bytes) { return sp ? bytes / t : bytes; };
  double bytes = 0;
  switch (unit.kind) {
    case UnitKind::kEmbedding: bytes = m.embedding_norm ? whole(2 * h) : 0; break;  // else its output is the block's input
    case UnitKind::kHead:
      bytes = whole(2 * h) + 4.0 * static_cast<double>((m.vocab + p.tp - 1) / p.tp) / scale;
      break;
    case UnitKind::kAttention:
      if (mode == spec::Recompute::kFull) {
        bytes = whole(2 * h);
      } else {
        // norm input, QKV input, dropout mask (+ a post-norm's input); Q, K, V, context (+ q/k norm inputs)
        bytes = whole(5 * h + (m.attn_norms == 2 ? 2 * h : 0)) + 4 * q_r + 4 * kv_r +
                (m.qk_norm ? 2 * q_r + 2 * kv_r : 0);
        const bool context_kept = mode == spec::Recompute::kNone || !flash;
        if (mode == spec::Recompute::kNone) {
          bytes += scores;
        } else if (flash) {
          bytes -= 2 * q_r;  // selective re-runs the fused kernel: its output (the context) is not kept
        }
        // fp8: the QKV input and the output projection's input (the context) are kept as their
        // 1-byte FP8 copies, the GEMMs' operands
        if (fp8) bytes -= whole(h) + (context_kept ? q_r : 0);
      }
      break;
    case UnitKind::kMlp:
      if (mode == spec::Recompute::kFull) {
        bytes = 0;
      } else {
        // norm input and first linear's input (shared with attention's in a one-norm parallel block),
        // dropout mask (+ a post-norm's input); activation input(s) and output
        const double own = (m.mlp_norms == 0 ? 0 : 4 * h) + h + (m.mlp_norms == 2 ? 2 * h : 0);
        bytes = whole(own) + (spec::gated(m.mlp) ? 6 : 4) * f_r;
        // fp8: fc1's input (its own, when the MLP has a norm) and fc2's input (the activation's
        // output) kept as 1-byte FP8 copies
        if (fp8) bytes -= (m.mlp_norms == 0 ? 0 : whole(h)) + f_r;
      }
      break;
    case UnitKind::kMoe:
      if (mode != spec::Recompute::kFull) {
        // norm input, router and shared experts' input, dropout mask (whole or /t); per token the
        // rank routes (1/t of them with tp): fp32 routing probabilities 4E, each of the k routed
        // copies' expert input 2h (2h·etp: the copies gathered from the etp peers, the grouped
        // GEMM's saved input), activation input(s) and output (6 or 4)·f_e (etp times the
        // copies over 1/etp of the width), and expert output before the weighted combine 2h;
        // the shared experts' activations as the MLP's
        const spec::Moe& e = m.moe;
        const double k = static_cast<double>(e.top_k), fe = static_cast<double>(e.ffn_hidden);
        const double act = spec::gated(m.mlp) ? 6 : 4, etp = static_cast<double>(p.etp);
        bytes = whole(5 * h) + (4.0 * static_cast<double>(e.experts) / scale + k * (2 * h * (1 + etp) + act * fe)) / t;
        if (e.shared_ffn_hidden > 0) bytes += act * static_cast<double>(e.shared_ffn_hidden) / t;
      }
      break;
  }
  return bytes * scale;
}

}  // namespace stagecraft::sim
