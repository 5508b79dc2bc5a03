// Compute model: how long a compute instruction takes on one GPU — the time of its Work
// (work.hpp, where the amounts and the equation are) at the cluster profile's rates:
//   t(compute instruction over units [b, e)) = Σ_{u in [b, e)} work_seconds(work of u's passes)
//   t(optimizer on the GPU) = work_seconds(Adam's bytes and parameters)
//   t(optimizer on the host, offload) = elems / host.adam_params_per_s
//   t(offload copy) = bytes / host.pcie_Bps
// peak_flops() is the peak of the training's storage format (bf16 for an fp8 training, whose block
// GEMMs run at the FP8 peak as work.hpp says): what MFU is measured against.
// Per-unit times are precomputed once per model; an instruction sums its units' times.
#pragma once

#include <cstdint>
#include <vector>

#include "core/program/instruction.hpp"
#include "core/program/units.hpp"
#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"
#include "sim/models/tp_overlap.hpp"
#include "sim/models/work.hpp"

namespace stagecraft::sim {

// The peak MFU is measured against for a training in `dtype`: the GPU's dense FLOP/s of its
// storage format (bf16 for fp8). Throws SpecError naming the cluster file's missing field.
double mfu_peak_flops(const spec::Cluster& cluster, spec::Dtype dtype);

struct UnitTimes {
  double forward_s = 0;
  double backward_input_s = 0;   // incl. the attention scores' backward
  double backward_weight_s = 0;
  double score_forward_s = 0;    // attention scores alone: what selective recompute re-runs
  // the parts of each spent in kernels streaming at the HBM rate (streaming_seconds)
  double forward_stream_s = 0, backward_input_stream_s = 0, backward_weight_stream_s = 0, score_forward_stream_s = 0;
  // a MoE unit's routed experts' share of each (balanced routing; WorkModel::UnitWork::experts_*)
  double experts_forward_s = 0, experts_backward_input_s = 0, experts_backward_weight_s = 0;
  double experts_forward_stream_s = 0, experts_backward_input_stream_s = 0, experts_backward_weight_stream_s = 0;
};

class ComputeModel {
 public:
  ComputeModel(const spec::Model& model, const spec::Cluster& cluster, const spec::Training& training,
               const spec::Plan& plan);

  const std::vector<UnitTimes>& units() const { return units_; }
  // Duration of a compute instruction over units [begin, end) (any compute op). With expert
  // parallelism a MoE unit's routed experts take ρ = training.moe_busiest_load() times their balanced
  // time (the stated imbalance; min(ρ, c) under a capacity factor c that drops the excess; c when
  // every expert's input is padded to its capacity, as at ep 1 too): the busiest rank of the
  // expert-parallel group sets the pace of its all-to-alls.
  double compute_s(program::Op op, int32_t unit_begin, int32_t unit_end) const;
  // The same for one instruction: a MoE unit's pass split around its all-to-alls (kFlagExperts:
  // the experts' part, ρ times balanced; without: the rest of the unit's pass).
  double compute_s(const program::Instr& in) const;
  double compute_stream_s(const program::Instr& in) const;
  double moe_imbalance() const { return rho_; }
  // The part of compute_s spent in kernels streaming at the HBM rate (work.hpp streaming_seconds):
  // what NCCL's traffic through HBM slows (sim/simulation.hpp).
  double compute_stream_s(program::Op op, int32_t unit_begin, int32_t unit_end) const;
  double optimizer_gpu_s(int64_t elems) const;
  double optimizer_gpu_stream_s(int64_t elems) const;
  double optimizer_host_s(int64_t elems) const;
  double offload_copy_s(int64_t bytes) const;
  // A framework's copy of `bytes` in HBM (read and write counted in bytes): bytes / (hbm_Bps · memory_efficiency).
  double hbm_copy_s(int64_t bytes) const;
  double peak_flops() const { return peak_; }
  // The amounts behind those durations (what calibration fits the rates on).
  const WorkModel& work() const { return work_; }
  // TP communication overlap (tp_overlap.hpp): off unless the training asks for it and the plan
  // has sequence parallelism over tp > 1; the overlapped GEMMs timed as the units' are.
  const TpOverlap& tp_overlap() const { return tp_overlap_; }

 private:
  const spec::Cluster& cluster_;
  WorkModel work_;
  double peak_ = 0;
  std::vector<UnitTimes> units_;
  TpOverlap tp_overlap_;
  // prefix sums over units, per pass kind: forward, backward (input + weight [+ scores]), input, weight
  std::vector<double> prefix_[4];
  std::vector<double> stream_prefix_[4];   // the same over the streaming parts
  bool split_ = false;          // ep > 1 on a MoE model: MoE passes are split (Program, kFlagExperts)
  double rho_ = 1;              // the experts' imbalance factor when split_
  std::vector<uint8_t> moe_;    // per unit: a MoE unit
  static int pass_index(program::Op op);
  double experts_s(program::Op op, int32_t unit, bool stream) const;
  double instr_s(const program::Instr& in, bool stream) const;
};

}  // namespace stagecraft::sim
