#include "sim/models/compute.hpp"

#include <cmath>
#include <stdexcept>


namespace stagecraft::sim {

using program::Op;
using program::Unit;
using program::UnitKind;

double matmul_efficiency(const std::vector<std::pair<double, double>>& points, double flops) {
  if (points.empty()) throw std::invalid_argument("matmul_efficiency: no points");
  if (flops <= points.front().first) return points.front().second;
  if (flops >= points.back().first) return points.back().second;
  const double x = std::log10(flops);
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (flops <= points[i].first) {
      const double x0 = std::log10(points[i - 1].first), x1 = std::log10(points[i].first);
      const double w = (x - x0) / (x1 - x0);
      return points[i - 1].second + w * (points[i].second - points[i - 1].second);
    }
  }
  return points.back().second;
}

ComputeModel::ComputeModel(const spec::Model& model, const spec::Cluster& cluster, const spec::Training& training,
                           const spec::Plan& plan)
    : model_(model), cluster_(cluster), plan_(plan) {
  auto it = cluster.gpu.peak_flops.find(training.dtype);
  if (it == cluster.gpu.peak_flops.end()) {
    throw std::invalid_argument("cluster " + cluster.name + " has no peak_flops for " + spec::to_string(training.dtype));
  }
  peak_ = it->second;
  tokens_ = plan.micro_batch * model.seq_len;
  grad_bytes_ = spec::bytes_of(training.dtype);
  dtype_ = training.dtype;
  selective_ = plan.recompute == spec::Recompute::kSelective;
  const std::vector<Unit> units = program::model_units(model, plan.tp);
  for (const Unit& u : units) units_.push_back(unit_times(u));
  for (auto& p : prefix_) p.assign(units_.size() + 1, 0.0);
  for (std::size_t i = 0; i < units_.size(); ++i) {
    const UnitTimes& u = units_[i];
    const double sel = selective_ ? u.score_forward_s : 0.0;
    prefix_[0][i + 1] = prefix_[0][i] + u.forward_s;
    prefix_[1][i + 1] = prefix_[1][i] + u.backward_input_s + u.backward_weight_s + sel;
    prefix_[2][i + 1] = prefix_[2][i] + u.backward_input_s + sel;
    prefix_[3][i + 1] = prefix_[3][i] + u.backward_weight_s;
  }
}

double ComputeModel::gemm_s(double flops) const {
  return flops / (peak_ * matmul_efficiency(cluster_.gpu.matmul_efficiency, flops));
}

UnitTimes ComputeModel::unit_times(const Unit& unit) const {
  const double T = static_cast<double>(tokens_), h = static_cast<double>(model_.hidden);
  const int64_t t = plan_.tp;
  std::vector<double> gemms;  // FLOPs of each forward GEMM on this rank
  double scores_s = 0, score_bytes = 0, activation_elems = 0;
  switch (unit.kind) {
    case UnitKind::kEmbedding: break;
    case UnitKind::kHead: gemms.push_back(2 * T * h * static_cast<double>((model_.vocab + t - 1) / t)); break;
    case UnitKind::kAttention: {
      const int64_t d = model_.head_dim(), kv_r = model_.kv_heads >= t ? model_.kv_heads / t : 1;
      gemms.push_back(2 * T * h * static_cast<double>(model_.hidden / t + 2 * kv_r * d));
      gemms.push_back(2 * T * static_cast<double>(model_.hidden / t) * h);
      // QK^T and softmax.V: per (sequence, head) 2 s^2 d FLOPs each; b * heads/t of them.
      const double s = static_cast<double>(model_.seq_len);
      const double per_head = 2 * s * s * static_cast<double>(d);
      const double batched = static_cast<double>(plan_.micro_batch * (model_.heads / t));
      scores_s = 2 * batched * per_head / (peak_ * matmul_efficiency(cluster_.gpu.matmul_efficiency, per_head));
      score_bytes = 9.0 * static_cast<double>(model_.heads / t) * s * T;  // softmax and its dropout
      break;
    }
    case UnitKind::kMlp: {
      const double f = static_cast<double>(model_.ffn_hidden / t);
      const int in = model_.mlp == spec::Mlp::kSwiglu ? 2 : 1;
      for (int i = 0; i < in; ++i) gemms.push_back(2 * T * h * f);
      gemms.push_back(2 * T * f * h);
      activation_elems = T * f;  // GELU's tanh or SwiGLU's sigmoid, once per element of f/t
      break;
    }
  }
  double gemm_total_s = 0;
  for (double g : gemms) gemm_total_s += gemm_s(g);
  const double bandwidth = cluster_.gpu.hbm_Bps * cluster_.gpu.memory_efficiency;
  const double width = dtype_ == spec::Dtype::kFp32 ? 2.0 : 1.0;  // 4-byte elements move twice the bytes
  const double mem_s = width * T * memory_bytes_per_token(unit) / bandwidth;
  const double score_mem_s = width * score_bytes / bandwidth;
  const double rate = cluster_.gpu.activation_elems_per_s;
  const double activation_s = rate > 0 ? activation_elems / rate : 0.0;
  UnitTimes u;
  u.forward_s = gemm_total_s + scores_s + mem_s + score_mem_s + activation_s;
  u.backward_input_s = gemm_total_s + 2 * scores_s + 2 * (mem_s + score_mem_s) + activation_s;
  const double accumulate_bytes = dtype_ == spec::Dtype::kFp32 ? 12.0 : 10.0;
  u.backward_weight_s = gemm_total_s + static_cast<double>(unit.params) * accumulate_bytes / bandwidth;
  u.score_forward_s = scores_s + score_mem_s;
  return u;
}

// Non-GEMM bytes per token of a unit's forward, scores apart (see the header).
double ComputeModel::memory_bytes_per_token(const Unit& unit) const {
  const int64_t t = plan_.tp;
  const double h = static_cast<double>(model_.hidden);
  const double h_r = plan_.sequence_parallel ? h / static_cast<double>(t) : h;
  const double f_r = static_cast<double>(model_.ffn_hidden / t);
  switch (unit.kind) {
    case UnitKind::kEmbedding: return 4 * h_r;
    case UnitKind::kAttention: return 11 * h_r;
    case UnitKind::kMlp: return 11 * h_r + (model_.mlp == spec::Mlp::kSwiglu ? 6 : 4) * f_r;
    case UnitKind::kHead: return 4 * h_r + 10.0 * static_cast<double>((model_.vocab + t - 1) / t);
  }
  return 0;
}

double ComputeModel::compute_s(Op op, int32_t begin, int32_t end) const {
  int k = 0;
  switch (op) {
    case Op::kForward:
    case Op::kRecompute: k = 0; break;
    case Op::kBackward: k = 1; break;
    case Op::kBackwardInput: k = 2; break;
    case Op::kBackwardWeight: k = 3; break;
    default: throw std::invalid_argument("compute_s: not a compute instruction");
  }
  return prefix_[k][end] - prefix_[k][begin];
}

double ComputeModel::optimizer_gpu_s(int64_t elems) const {
  // fp32 master, momentum and variance read and written, gradient read.
  const double bytes_per_param = 2.0 * 12.0 + static_cast<double>(grad_bytes_);
  const double n = static_cast<double>(elems), rate = cluster_.gpu.adam_params_per_s;
  return n * bytes_per_param / (cluster_.gpu.hbm_Bps * cluster_.gpu.memory_efficiency) + (rate > 0 ? n / rate : 0.0);
}

double ComputeModel::optimizer_host_s(int64_t elems) const {
  return static_cast<double>(elems) / cluster_.host.adam_params_per_s;
}

double ComputeModel::offload_copy_s(int64_t bytes) const { return static_cast<double>(bytes) / cluster_.host.pcie_Bps; }

}  // namespace stagecraft::sim
