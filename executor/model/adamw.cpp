#include "executor/model/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace stagecraft::executor {

namespace {

void check_shard(const AdamWShard& s, int64_t step) {
  const std::size_t n = s.params.size();
  if (s.grads.size() != n || s.m.size() != n || s.v.size() != n) {
    throw std::invalid_argument("adamw_step: shard at offset " + std::to_string(s.offset) + " has " +
                                std::to_string(n) + " params but " + std::to_string(s.grads.size()) + " grads, " +
                                std::to_string(s.m.size()) + " m, " + std::to_string(s.v.size()) + " v");
  }
  if (step < 1) throw std::invalid_argument("adamw_step: step must be >= 1, got " + std::to_string(step));
}

// Decoupled weight decay p *= 1 - lr * wd on the decayed positions inside the shard.
void apply_decay(const AdamWConfig& cfg, const AdamWShard& s, std::span<const Range> decayed) {
  if (cfg.weight_decay == 0.0) return;
  const float factor = static_cast<float>(1.0 - cfg.lr * cfg.weight_decay);
  const int64_t lo = s.offset, hi = s.offset + static_cast<int64_t>(s.params.size());
  for (const Range& r : decayed) {
    const int64_t b = std::max(lo, r.begin), e = std::min(hi, r.end);
    for (int64_t p = b; p < e; ++p) s.params[static_cast<std::size_t>(p - lo)] *= factor;
  }
}

}  // namespace

void adamw_step(const AdamWConfig& cfg, int64_t step, const AdamWShard& shard, std::span<const Range> decayed,
                float grad_scale) {
  check_shard(shard, step);
  apply_decay(cfg, shard, decayed);
  const double t = static_cast<double>(step);
  const float b1 = static_cast<float>(cfg.beta1), b2 = static_cast<float>(cfg.beta2);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(cfg.beta1, t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(cfg.beta2, t)));
  const float lr = static_cast<float>(cfg.lr), eps = static_cast<float>(cfg.eps);
  for (std::size_t i = 0; i < shard.params.size(); ++i) {
    const float g = shard.grads[i] * grad_scale;
    const float m = b1 * shard.m[i] + (1.0f - b1) * g;
    const float v = b2 * shard.v[i] + (1.0f - b2) * g * g;
    shard.m[i] = m;
    shard.v[i] = v;
    shard.params[i] -= lr * (m * c1) / (std::sqrt(v * c2) + eps);
  }
}

double global_norm_sq(std::span<const float> grads) {
  double total = 0;
  for (float g : grads) total += static_cast<double>(g) * static_cast<double>(g);
  return total;
}

float clip_scale(double global_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (global_norm + 1e-6)));
}

}  // namespace stagecraft::executor
