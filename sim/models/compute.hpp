// Compute model: how long a compute instruction takes on one GPU.
//
//   t(instr) = Σ_GEMMs  F_g / (peak[dtype] · eff(F_g))  +  B_mem / (hbm_Bps · memory_efficiency)
//              +  N_act / activation_elems_per_s             (only where the profile sets the rate)
//   t(optimizer on the GPU) = B_adam / (hbm_Bps · memory_efficiency) + P / gpu.adam_params_per_s
//                                                              (the last term likewise)
//
// * GEMMs: each unit's linear layers on one tp rank (units.hpp shapes), F_g = 2·tokens·k·n per
//   GEMM for forward, the same again for the input gradient and for the weight gradient. The
//   attention scores are batched GEMMs per head: QKᵀ and softmax·V, 2·b·s²·d FLOPs each per
//   head, heads/t of them; their efficiency is looked up at one head's size 2·s²·d.
// * eff(F): the cluster's matmul_efficiency points (FLOPs of one GEMM → fraction of peak),
//   interpolated linearly in log10(F) and held flat outside the first and last points.
// * Memory-bound work: the bytes the non-GEMM kernels of a Megatron-style layer read and write
//   per token on one tp rank (16-bit elements, 1-byte dropout masks; a_r = heads/t, f_r = f/t,
//   h_r = h/t with sequence parallelism, else h), over hbm_Bps · memory_efficiency:
//     attention  layer norm 4h_r (read, write) + scale-mask-softmax 4·a_r·s + dropout on the
//                probabilities 5·a_r·s + bias-dropout-residual 7h_r      = 11h_r + 9·a_r·s
//     MLP        layer norm 4h_r + bias-GeLU 4·f_r (SwiGLU: read gate and up, write 6·f_r)
//                + bias-dropout-residual 7h_r                            = 11h_r + 4·f_r
//     embedding  lookup 4h_r;  head: final norm 4h_r + cross-entropy 10·V/t (fp16 logits read,
//                fp32 softmax written and read back)
//   Backward moves twice the forward bytes (saved input and incoming gradient read, gradient
//   written). fp32 training doubles the bytes.
// * Gradient accumulation: every backward adds the new weight gradients into the step's
//   gradient buffer, a memory-bound pass over the unit's parameters: 16-bit training keeps fp32
//   main gradients (Megatron-LM's main_grad, DeepSpeed's fp32 partitions): read the 16-bit
//   gradient, read and write the fp32 sum, 2 + 4 + 4 = 10 bytes per parameter; fp32 training
//   reads the new and the old gradient and writes the sum, 12 bytes. The scores' part (9·a_r·s) is what selective
//   recompute re-runs with the two score GEMMs.
// * Activation function: the MLP's GELU (tanh form, one tanh per element) or SwiGLU (one sigmoid
//   per element) runs on N_act = T·f_r elements in a MLP unit's forward and again in its input
//   gradient (the derivative needs tanh, or the sigmoid, of the same input); 0 in other units and
//   in the weight gradient. Its bytes are in the memory-bound term; where the function's
//   arithmetic bounds it instead — a CPU core calling libm's tanhf per element, ~20 ns against
//   ~1 ns for the element's bytes on a 2.3 GHz Xeon core — the profile's activation_elems_per_s
//   adds N_act / activation_elems_per_s. Softmax and cross-entropy exponentials are not counted:
//   vectorised (Eigen's exp in the CPU executor) or fused, they stay near their bytes' time.
// * Optimizer on the GPU: Adam reads and writes fp32 master, momentum and variance and reads the
//   gradient: (4+4+4)·2 + g bytes per parameter over hbm_Bps · memory_efficiency; where its
//   arithmetic (a square root and a division per parameter) bounds it instead — a CPU core, ~3.5 ns
//   per parameter against ~1 ns of bytes — the profile's gpu.adam_params_per_s adds
//   elems / gpu.adam_params_per_s. On the host (offload): elems / host.adam_params_per_s. Offload
//   copies: bytes / pcie_Bps.
// * The arithmetic terms add to the bytes' time rather than overlapping it: right where one of the
//   two dominates, at most the smaller one too long elsewhere. GPUs evaluate tanh, exp, square roots
//   and reciprocals in special-function units well above HBM rate (16 per SM per clock on sm_80 and
//   sm_90, CUDA C++ Programming Guide, arithmetic instruction throughput), so GPU profiles leave
//   both rates unset and the terms are 0.
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
  double memory_bytes_per_token(const program::Unit& unit) const;

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
