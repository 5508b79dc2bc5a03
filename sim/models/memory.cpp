#include "sim/models/memory.hpp"

#include <algorithm>

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
  s.params = zero.stage == 3 ? w * (shard + persistent) : w * stage_params;
  s.grads = zero.stage >= 2 ? w * shard : w * stage_params;
  s.optimizer = zero.offload_optimizer == spec::Offload::kCpu ? 0 : (zero.stage >= 1 ? k * shard : k * stage_params);
  return s;
}

int64_t p2p_buffer_bytes(int64_t message_bytes, int64_t pp) { return pp > 1 ? 2 * message_bytes : 0; }

int64_t grad_bucket_buffer_bytes(const spec::ZeroConfig& zero, int64_t dp, int64_t stage_params, int64_t param_bytes) {
  return zero.stage >= 2 && dp > 1 ? std::min(zero.reduce_bucket, stage_params) * param_bytes : 0;
}

int64_t comm_buffer_bytes(int64_t message_bytes, int64_t pp, const spec::ZeroConfig& zero, int64_t dp, int64_t stage_params,
                          int64_t param_bytes) {
  return p2p_buffer_bytes(message_bytes, pp) + grad_bucket_buffer_bytes(zero, dp, stage_params, param_bytes);
}

double activation_bytes_per_token(const Unit& unit, const spec::Model& m, const spec::Plan& p, spec::Dtype dtype,
                                  spec::Recompute mode) {
  const double h = static_cast<double>(m.hidden), t = static_cast<double>(p.tp);
  const double scores = 5.0 * static_cast<double>(m.heads) * static_cast<double>(m.seq_len) / t;
  const double scale = dtype == spec::Dtype::kFp32 ? 2.0 : 1.0;
  const bool sp = p.sequence_parallel;
  double bytes = 0;
  switch (unit.kind) {
    case UnitKind::kEmbedding: bytes = 0; break;  // its output is the first block's input
    case UnitKind::kHead:
      bytes = (sp ? 2 * h / t : 2 * h) + 4.0 * static_cast<double>((m.vocab + p.tp - 1) / p.tp) / scale;
      break;
    case UnitKind::kAttention:
      if (mode == spec::Recompute::kFull) {
        bytes = sp ? 2 * h / t : 2 * h;
      } else {
        bytes = sp ? 13 * h / t : (p.tp > 1 ? 5 * h + 8 * h / t : 13 * h);
        if (mode == spec::Recompute::kNone) bytes += scores;
      }
      break;
    case UnitKind::kMlp:
      if (mode == spec::Recompute::kFull) {
        bytes = 0;
      } else {
        bytes = sp ? 21 * h / t : (p.tp > 1 ? 5 * h + 16 * h / t : 21 * h);
      }
      break;
  }
  return bytes * scale;
}

}  // namespace stagecraft::sim
