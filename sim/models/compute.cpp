#include "sim/models/compute.hpp"

#include <stdexcept>

#include "core/spec/error.hpp"
#include "core/program/units.hpp"
#include "sim/error.hpp"

namespace stagecraft::sim {

using program::Op;

namespace {

double peak_of(const spec::Cluster& cluster, spec::Dtype dtype) {
  auto it = cluster.gpu.peak_flops.find(dtype);
  if (it == cluster.gpu.peak_flops.end()) {
    // An input error, not an internal one: the cluster file lacks the training's precision.
    throw spec::SpecError(cluster.file.empty() ? "cluster " + cluster.name : cluster.file,
                          std::string("/gpu/peak_flops/") + spec::to_string(dtype),
                          std::string("missing: the training runs in ") + spec::to_string(dtype) +
                              " and the GPU needs its peak FLOP/s for that precision");
  }
  return it->second;
}

}  // namespace

double mfu_peak_flops(const spec::Cluster& cluster, spec::Dtype training_dtype) {
  return peak_of(cluster, spec::storage_dtype(training_dtype));
}

ComputeModel::ComputeModel(const spec::Model& model, const spec::Cluster& cluster, const spec::Training& training,
                           const spec::Plan& plan)
    : cluster_(cluster),
      work_(model, effective_training(training, cluster), plan),
      peak_(mfu_peak_flops(cluster, training.dtype)) {
  // fp8: the block GEMMs at the FP8 peak, everything else (and MFU) at the 16-bit one
  if (training.dtype == spec::Dtype::kFp8) peak_of(cluster, spec::Dtype::kFp8);
  WorkTimer timer(cluster.gpu, peak_, attention_kernel(cluster, training));
  std::vector<UnitTimes> distinct;
  for (const WorkModel::UnitWork& w : work_.distinct()) {
    UnitTimes u;
    u.forward_s = timer.seconds(w.forward);
    u.backward_input_s = timer.seconds(w.backward_input);
    u.backward_weight_s = timer.seconds(w.backward_weight);
    u.score_forward_s = timer.seconds(w.score_forward);
    u.forward_stream_s = streaming_seconds(w.forward, cluster.gpu);
    u.backward_input_stream_s = streaming_seconds(w.backward_input, cluster.gpu);
    u.backward_weight_stream_s = streaming_seconds(w.backward_weight, cluster.gpu);
    u.score_forward_stream_s = streaming_seconds(w.score_forward, cluster.gpu);
    u.experts_forward_s = timer.seconds(w.experts_forward);
    u.experts_backward_input_s = timer.seconds(w.experts_backward_input);
    u.experts_backward_weight_s = timer.seconds(w.experts_backward_weight);
    u.experts_forward_stream_s = streaming_seconds(w.experts_forward, cluster.gpu);
    u.experts_backward_input_stream_s = streaming_seconds(w.experts_backward_input, cluster.gpu);
    u.experts_backward_weight_stream_s = streaming_seconds(w.experts_backward_weight, cluster.gpu);
    distinct.push_back(u);
  }
  for (int32_t u = 0; u < work_.unit_count(); ++u) units_.push_back(distinct[static_cast<std::size_t>(work_.distinct_of(u))]);
  split_ = model.moe.on() && (plan.ep > 1 || plan.etp > 1);
  // the busiest expert-parallel rank's routed copies over the balanced share (Training::moe_busiest_load:
  // the stated imbalance, capped by a capacity, or the capacity padded to); at ep 1 the rank computes
  // every copy, c times them when each expert's input is padded to its capacity
  if (model.moe.on()) {
    rho_ = split_ ? training.moe_busiest_load() : (training.moe_pad_to_capacity ? training.moe_capacity_factor : 1.0);
  }
  for (const program::Unit& u : *program::shared_model_units(model, plan.tp, plan.ep, plan.etp)) moe_.push_back(u.kind == program::UnitKind::kMoe);
  // the busiest rank's experts: ρ − 1 more of their balanced time in every pass
  for (UnitTimes& u : units_) {
    const double more = rho_ - 1;
    u.forward_s += more * u.experts_forward_s;
    u.backward_input_s += more * u.experts_backward_input_s;
    u.backward_weight_s += more * u.experts_backward_weight_s;
    u.forward_stream_s += more * u.experts_forward_stream_s;
    u.backward_input_stream_s += more * u.experts_backward_input_stream_s;
    u.backward_weight_stream_s += more * u.experts_backward_weight_stream_s;
  }
  tp_overlap_ = tp_overlap_modes(training, plan);
  if (tp_overlap_.on || tp_overlap_.async_grad) {
    tp_overlap_.sm_count = cluster.gpu.sm_count;
    tp_overlap_.nccl_share = nccl_sm_fraction(cluster);
    for (const program::UnitKind kind : {program::UnitKind::kAttention, program::UnitKind::kMlp, program::UnitKind::kHead}) {
      TpOverlapGemms& g = tp_overlap_.gemms[static_cast<std::size_t>(kind)];
      g.column_s = timer.seconds(block_linear_gemms(model, training, plan, kind, false));
      g.row_s = timer.seconds(block_linear_gemms(model, training, plan, kind, true));
    }
  }
  const bool selective = work_.selective();
  for (auto& p : prefix_) p.assign(units_.size() + 1, 0.0);
  for (auto& p : stream_prefix_) p.assign(units_.size() + 1, 0.0);
  for (std::size_t i = 0; i < units_.size(); ++i) {
    const UnitTimes& u = units_[i];
    const double sel = selective ? u.score_forward_s : 0.0;
    prefix_[0][i + 1] = prefix_[0][i] + u.forward_s;
    prefix_[1][i + 1] = prefix_[1][i] + u.backward_input_s + u.backward_weight_s + sel;
    prefix_[2][i + 1] = prefix_[2][i] + u.backward_input_s + sel;
    prefix_[3][i + 1] = prefix_[3][i] + u.backward_weight_s;
    const double sel_stream = selective ? u.score_forward_stream_s : 0.0;
    stream_prefix_[0][i + 1] = stream_prefix_[0][i] + u.forward_stream_s;
    stream_prefix_[1][i + 1] = stream_prefix_[1][i] + u.backward_input_stream_s + u.backward_weight_stream_s + sel_stream;
    stream_prefix_[2][i + 1] = stream_prefix_[2][i] + u.backward_input_stream_s + sel_stream;
    stream_prefix_[3][i + 1] = stream_prefix_[3][i] + u.backward_weight_stream_s;
  }
}

int ComputeModel::pass_index(Op op) {
  switch (op) {
    case Op::kForward:
    case Op::kRecompute: return 0;
    case Op::kBackward: return 1;
    case Op::kBackwardInput: return 2;
    case Op::kBackwardWeight: return 3;
    default: throw std::invalid_argument("compute_s: not a compute instruction");
  }
}

double ComputeModel::compute_s(Op op, int32_t begin, int32_t end) const {
  const int k = pass_index(op);
  return prefix_[k][end] - prefix_[k][begin];
}

double ComputeModel::compute_stream_s(Op op, int32_t begin, int32_t end) const {
  const int k = pass_index(op);
  return stream_prefix_[k][end] - stream_prefix_[k][begin];
}

double ComputeModel::experts_s(Op op, int32_t unit, bool stream) const {
  const UnitTimes& u = units_[static_cast<std::size_t>(unit)];
  const double f = stream ? u.experts_forward_stream_s : u.experts_forward_s;
  const double bi = stream ? u.experts_backward_input_stream_s : u.experts_backward_input_s;
  const double bw = stream ? u.experts_backward_weight_stream_s : u.experts_backward_weight_s;
  switch (pass_index(op)) {
    case 0: return rho_ * f;
    case 1: return rho_ * (bi + bw);
    case 2: return rho_ * bi;
    default: return rho_ * bw;
  }
}

// One instruction's seconds (stream: its streaming part): a MoE pass split around its
// all-to-alls is its experts' share (kFlagExperts) or the unit's pass less that share.
double ComputeModel::instr_s(const program::Instr& in, bool stream) const {
  const int k = pass_index(in.op);
  const std::vector<double>& prefix = stream ? stream_prefix_[k] : prefix_[k];
  const double whole = prefix[static_cast<std::size_t>(in.unit_end)] - prefix[static_cast<std::size_t>(in.unit_begin)];
  if (!split_ || in.unit_end != in.unit_begin + 1 || !moe_[static_cast<std::size_t>(in.unit_begin)] || in.op == Op::kBackwardWeight) {
    return whole;
  }
  const double experts = experts_s(in.op, in.unit_begin, stream);
  return (in.flags & program::kFlagExperts) ? experts : whole - experts;
}

double ComputeModel::compute_s(const program::Instr& in) const { return instr_s(in, false); }
double ComputeModel::compute_stream_s(const program::Instr& in) const { return instr_s(in, true); }

double ComputeModel::hbm_copy_s(int64_t bytes) const {
  return static_cast<double>(bytes) / (cluster_.gpu.hbm_Bps * cluster_.gpu.memory_efficiency);
}

double ComputeModel::optimizer_gpu_s(int64_t elems) const { return work_seconds(work_.optimizer_gpu(elems), cluster_.gpu, peak_); }

double ComputeModel::optimizer_gpu_stream_s(int64_t elems) const {
  return streaming_seconds(work_.optimizer_gpu(elems), cluster_.gpu);
}

double ComputeModel::optimizer_host_s(int64_t elems) const {
  return static_cast<double>(elems) / cluster_.host.adam_params_per_s;
}

double ComputeModel::offload_copy_s(int64_t bytes) const { return static_cast<double>(bytes) / cluster_.host.pcie_Bps; }

}  // namespace stagecraft::sim
