// AdamW (Loshchilov & Hutter, ICLR'19; PyTorch's update order) on one flat fp32 shard of a
// ParamLayout's buffer, plus the local half of global-norm gradient clipping. It does no
// communication: the caller all-reduces global_norm_sq across shards, then passes clip_scale.
//
// Per element, step t >= 1 (g = grad * grad_scale):
//   p -= lr * wd * p                      (decoupled decay, only inside decayed ranges)
//   m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "executor/model/params.hpp"

namespace stagecraft::executor {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

// One shard: flat positions [offset, offset + params.size()) of the layout's buffer.
struct AdamWShard {
  int64_t offset = 0;
  std::span<float> params;
  std::span<const float> grads;
  std::span<float> m;  // first moment, zero before step 1
  std::span<float> v;  // second moment, zero before step 1
};

// Applies step `step` (1-based) to the shard. `decayed` are layout positions that take weight
// decay (ParamLayout::decayed_ranges()); the shard uses the part that overlaps it. `grad_scale`
// multiplies every gradient first (clip_scale(), or 1). Throws on mismatched spans or step < 1.
void adamw_step(const AdamWConfig& cfg, int64_t step, const AdamWShard& shard, std::span<const Range> decayed,
                float grad_scale = 1.0f);

// Sum of squared gradients of this shard, accumulated in double.
double global_norm_sq(std::span<const float> grads);
// Factor to multiply gradients by so their global norm is at most max_norm:
// min(1, max_norm / (global_norm + 1e-6)); 1 when max_norm <= 0 (clipping off).
float clip_scale(double global_norm, double max_norm);

}  // namespace stagecraft::executor
