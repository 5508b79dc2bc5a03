// Compute model: how long a compute instruction takes on one GPU.
//
//   t(instr) = Σ_GEMMs  F_g / (peak[dtype] · eff(F_g))  +  B_mem / hbm_Bps
//
// * GEMMs: each unit's linear layers on one tp rank (units.hpp shapes), F_g = 2·tokens·k·n per
//   GEMM for forward, the same again for the input gradient and for the weight gradient. The
//   attention scores are batched GEMMs per head: QKᵀ and softmax·V, 2·b·s²·d FLOPs each per
//   head, heads/t of them; their efficiency is looked up at one head's size 2·s²·d.
// * eff(F): the cluster's matmul_efficiency points (FLOPs of one GEMM → fraction of peak),
//   interpolated linearly in log10(F) and held flat outside the first and last points.
// * Memory-bound work (norms, softmax, GeLU/SwiGLU, dropout, residual adds) moves each
//   activation it stores once in forward and twice in backward (read it, write its gradient):
//   B_mem per token = the layer's stored activation bytes (Korthikanti et al., MLSys'23 — see
//   memory.hpp), forward ×1, backward ×2.
// * Optimizer on the GPU: Adam reads and writes fp32 master, momentum and variance and reads the
//   gradient: (4+4+4)·2 + g bytes per parameter over hbm_Bps. On the host (offload):
//   elems / adam_params_per_s. Offload copies: bytes / pcie_Bps.
// Per-unit times are precomputed once per simulation; an instruction sums its units' times.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/instruction.hpp"
#include "core/program/units.hpp"
#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::sim {

// Fraction of peak for a GEMM of `flops` FLOPs (piecewise log-linear, flat outside the points).
double matmul_efficiency(const std::vector<std::pair<double, double>>& points, double flops);

struct UnitTimes {
  double forward_s = 0;
  double backward_input_s = 0;   // incl. the attention scores' backward
  double backward_weight_s = 0;
  double score_forward_s = 0;    // attention scores alone: what selective recompute re-runs
};

class ComputeModel {
 public:
  ComputeModel(const spec::Model& model, const spec::Cluster& cluster, const spec::Training& training,
               const spec::Plan& plan);

  const std::vector<UnitTimes>& units() const { return units_; }
  // Duration of a compute instruction over units [begin, end) (any compute op).
  double compute_s(program::Op op, int32_t unit_begin, int32_t unit_end) const;
  double optimizer_gpu_s(int64_t elems) const;
  double optimizer_host_s(int64_t elems) const;
  double offload_copy_s(int64_t bytes) const;
  double peak_flops() const { return peak_; }

 private:
  double gemm_s(double flops) const;
  UnitTimes unit_times(const program::Unit& unit) const;

  const spec::Model& model_;
  const spec::Cluster& cluster_;
  const spec::Plan& plan_;
  double peak_ = 0;
  int64_t tokens_ = 0;
  int64_t grad_bytes_ = 2;
  spec::Dtype dtype_ = spec::Dtype::kBf16;
  bool selective_ = false;
  std::vector<UnitTimes> units_;
  // prefix sums over units, per pass kind: forward, backward (input + weight [+ scores]), input, weight
  std::vector<double> prefix_[4];
};

}  // namespace stagecraft::sim
