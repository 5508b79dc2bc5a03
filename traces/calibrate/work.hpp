// What a compute instruction does in the compute model's eyes (sim/models/compute.hpp), as data
// that calibration can fit: the GEMMs it runs (FLOPs of one GEMM and how many of that size), the
// bytes its memory-bound kernels move, the elements its activation function is evaluated on and
// the parameters an optimizer step updates. The model's time is then
//     t = Σ_g count_g · F_g / (peak · eff(F_g))  +  memory_bytes / (hbm_Bps · memory_efficiency)
//         + activation_elems / activation_elems_per_s + adam_params / gpu.adam_params_per_s
// (each of the last two 0 where the profile leaves its rate unset)
// with eff the cluster's matmul_efficiency curve (sim::matmul_efficiency). Per unit, as the
// compute model has it (T tokens of a micro-batch, h hidden, t tp, s sequence, d head size,
// a_r = heads/t, kv_r = kv_heads/t or 1, f_r = ffn/t, V vocab; w = 2 for fp32 elements, else 1):
//   attention  GEMMs 2Th(h/t + 2·kv_r·d), 2T(h/t)h; scores 2·b·a_r GEMMs of 2s²d;
//              bytes w·T·11h_r + w·9·a_r·s·T
//   MLP        GEMMs 2Thf_r (×2 with SwiGLU), 2Tf_r h; bytes w·T·(11h_r + 4f_r or 6f_r);
//              activation T·f_r elements (GELU's tanh, SwiGLU's sigmoid)
//   embedding  bytes w·T·4h_r;   head  GEMM 2Th⌈V/t⌉; bytes w·T·(4h_r + 10⌈V/t⌉)
//   forward = GEMMs + scores + bytes + activation;
//   backward input = GEMMs + 2·scores + 2·bytes + activation (the derivative evaluates it again);
//   backward weight = GEMMs + params·(12 if fp32 else 10) bytes (gradient accumulation);
//   selective recompute adds scores + score bytes to Backward and BackwardInput.
//   Optimizer on the GPU: elems·(2·12 + bytes_of(dtype)) bytes and elems Adam parameters.
// The equality with sim::ComputeModel is a test (tests/traces/test_work.cpp), so the two cannot
// drift apart silently.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/program/instruction.hpp"
#include "core/program/units.hpp"
#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::traces {

struct Gemm {
  double flops = 0;   // FLOPs of one GEMM
  double count = 0;   // how many of them
};

struct Work {
  std::vector<Gemm> gemms;     // one entry per distinct size
  double memory_bytes = 0;
  double activation_elems = 0; // elements the MLP's activation function is evaluated on
  double adam_params = 0;      // parameters the optimizer updates on the GPU

  void add_gemm(double flops, double count);
  void add(const Work& other, double scale = 1.0);
};

// The compute model's time for `w` (seconds) on `gpu`, its GEMMs at `peak_flops` (the dtype's).
double work_seconds(const Work& w, const spec::Gpu& gpu, double peak_flops);

class WorkModel {
 public:
  WorkModel(const spec::Model& model, const spec::Training& training, const spec::Plan& plan);

  // Any compute op (Forward, Backward, BackwardInput, BackwardWeight, Recompute) over units [begin, end).
  Work compute(program::Op op, int32_t unit_begin, int32_t unit_end) const;
  Work optimizer_gpu(int64_t elems) const;

 private:
  struct UnitWork {
    Work forward, backward_input, backward_weight, score_forward;
  };
  UnitWork unit_work(const spec::Model& m, const spec::Plan& p, const program::Unit& u) const;

  std::vector<UnitWork> units_;
  bool selective_ = false;
  bool fp32_ = false;
  int64_t grad_bytes_ = 2;
};

}  // namespace stagecraft::traces
