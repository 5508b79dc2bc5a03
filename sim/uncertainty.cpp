#include "sim/uncertainty.hpp"

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/text/format.hpp"
#include "core/thread/parallel_for.hpp"
#include "sim/chains.hpp"

namespace stagecraft::sim {

namespace {

int64_t scaled_ns(int64_t ns, double factor) { return std::llround(static_cast<double>(ns) * factor); }

void scale_knots(spec::Gpu& gpu, double factor, const std::string& only) {
  bool any = false;
  for (auto& [flops, e] : gpu.matmul_efficiency) {
    if (!only.empty() && only != spec::matmul_knot_name(flops)) continue;
    e = std::min(1.0, e * factor);
    any = true;
  }
  if (!any) throw std::invalid_argument("no matmul_efficiency knot named " + only);
}

// Whether `parameter` can change this Program's step time at all (else its spread is 0 and no
// simulation is needed): host rates only with optimizer offload, the activation and GPU-Adam
// rates only where the profile sets them, the network only across nodes, NVLink only with two
// GPUs on a node, latencies only for pipeline sends (collectives take NCCL's table).
bool can_matter(const program::Program& prog, const spec::Cluster& c, const std::string& parameter) {
  const int64_t world = prog.placement.world();
  const bool nodes = world > c.gpus_per_node;
  const bool sends = prog.plan.pp > 1;
  if (parameter.rfind("host.", 0) == 0) return prog.plan.zero.offload_optimizer == spec::Offload::kCpu;
  if (parameter == "gpu.activation_elems_per_s") return c.gpu.activation_elems_per_s > 0;
  if (parameter == "gpu.attention_efficiency") return prog.training.flash_attention() && !c.gpu.attention_kernels.empty();
  if (parameter == "gpu.adam_params_per_s") return c.gpu.adam_params_per_s > 0;
  if (parameter == "gpu.memory_kernels") return c.gpu.memory_kernels.any();
  if (parameter == "inter_node.nic_bandwidth_Bps") return nodes;
  if (parameter == "inter_node.latency_ns") return nodes && sends;
  if (parameter == "intra_node.bandwidth_Bps") return world > 1 && c.gpus_per_node > 1;
  if (parameter == "intra_node.latency_ns") return sends && c.gpus_per_node > 1;
  if (parameter == "nccl.latency") return world > 1;
  return true;
}

constexpr const char* kImbalance = "training.moe_imbalance";

// The uncertain parameters of this plan: the cluster profile's, then the training's stated MoE load
// imbalance (moe_imbalance_sigma, as a relative σ of ρ) where the Program has experts.
std::vector<spec::ParameterUncertainty> uncertain(const program::Program& prog, const spec::Cluster& cluster) {
  std::vector<spec::ParameterUncertainty> out = cluster.uncertainty;
  const spec::Training& t = prog.training;
  if (prog.model.moe.on() && t.moe_imbalance_sigma > 0) {
    out.push_back({kImbalance, t.moe_imbalance_sigma / t.moe_imbalance,
                   "the training's moe_imbalance_sigma (stated): ρ = " + text::fmt("%.3g", t.moe_imbalance) + " ± " +
                       text::fmt("%.3g", t.moe_imbalance_sigma)});
  }
  return out;
}

// Whether ρ can move the step: the experts split over ranks (ep or etp > 1), not padded to a
// capacity (whose load is c whatever ρ), and the uncapped ρ or the perturbed one under a capacity
// that drops the excess (Training::moe_busiest_load).
bool imbalance_can_matter(const program::Program& prog) {
  const spec::Training& t = prog.training;
  if (prog.plan.ep * prog.plan.etp <= 1 || t.moe_pad_to_capacity) return false;
  return t.moe_capacity_factor <= 0 || t.moe_capacity_factor > t.moe_imbalance - t.moe_imbalance_sigma;
}

}  // namespace

spec::Cluster perturbed(const spec::Cluster& cluster, const std::string& parameter, double factor) {
  spec::Cluster c = cluster;
  if (parameter == "gpu.matmul_efficiency") {
    scale_knots(c.gpu, factor, "");
  } else if (parameter.rfind("gpu.matmul_efficiency@", 0) == 0) {
    scale_knots(c.gpu, factor, parameter);
  } else if (parameter == "gpu.attention_efficiency") {
    // every kernel's points together; a fraction of peak stays at most 1
    for (spec::AttentionKernel& k : c.gpu.attention_kernels) {
      for (auto* pass : {&k.forward, &k.backward}) {
        for (auto& point : *pass) point.second = std::min(1.0, point.second * factor);
      }
    }
  } else if (parameter == "gpu.memory_Bps") {
    c.gpu.hbm_Bps *= factor;
  } else if (parameter == "gpu.memory_kernels") {
    // every kind's rate together (sim/models/work.hpp); a fraction of hbm_Bps stays at most 1
    spec::MemoryKernels& mk = c.gpu.memory_kernels;
    mk.strided = std::min(1.0, mk.strided * factor);
    mk.dropout = std::min(1.0, mk.dropout * factor);
    for (auto& point : mk.softmax) point.second = std::min(1.0, point.second * factor);
  } else if (parameter == "gpu.activation_elems_per_s") {
    c.gpu.activation_elems_per_s *= factor;
  } else if (parameter == "gpu.adam_params_per_s") {
    c.gpu.adam_params_per_s *= factor;
  } else if (parameter == "intra_node.bandwidth_Bps") {
    c.intra_node.bandwidth_Bps *= factor;
  } else if (parameter == "intra_node.latency_ns") {
    c.intra_node.latency_ns = scaled_ns(c.intra_node.latency_ns, factor);
  } else if (parameter == "inter_node.nic_bandwidth_Bps") {
    c.inter_node.nic_bandwidth_Bps *= factor;
  } else if (parameter == "inter_node.latency_ns") {
    c.inter_node.latency_ns = scaled_ns(c.inter_node.latency_ns, factor);
  } else if (parameter == "host.pcie_Bps") {
    c.host.pcie_Bps *= factor;
  } else if (parameter == "host.adam_params_per_s") {
    c.host.adam_params_per_s *= factor;
  } else if (parameter == "nccl.latency") {
    c.nccl.latency_scale *= factor;
  } else {
    throw std::invalid_argument("not an uncertain profile parameter: " + parameter);
  }
  return c;
}

namespace {

// The step time of each perturbed simulation that can move this plan (2j: parameter j at −σ,
// 2j + 1: at +σ; the central T where it cannot), over the cores; `also`, when given, runs first
// on one of them (the central simulation, the longest job). Rethrows the first error, `also`'s first.
std::vector<double> perturbed_steps(const program::Program& prog, const spec::Cluster& cluster,
                                    const std::vector<spec::ParameterUncertainty>& params, const SimOptions& options,
                                    const std::function<void()>& also) {
  SimOptions o = options;
  o.record_trace = false;
  o.step_time_only = true;
  const std::vector<Chains> chains = find_chains(prog, true);   // the same for every perturbed cluster
  o.chains = &chains;
  const std::size_t k = params.size();
  std::vector<double> step(2 * k, -1.0);   // -1: cannot matter, the central T
  std::vector<std::size_t> pending;        // simulations to run
  for (std::size_t i = 0; i < 2 * k; ++i) {
    const std::string& p = params[i / 2].parameter;
    if (p == kImbalance ? imbalance_can_matter(prog) : can_matter(prog, cluster, p)) pending.push_back(i);
  }
  // job 0 is `also` when given; job n (or n − 1) the perturbed simulation pending[...]
  const std::size_t first = also ? 1 : 0;
  thread::parallel_for(pending.size() + first, thread::hardware_threads(), [&](std::size_t n) {
    if (n < first) {
      also();
      return;
    }
    const std::size_t i = pending[n - first];
    const spec::ParameterUncertainty& u = params[i / 2];
    const double factor = i % 2 == 0 ? 1 - u.relative : 1 + u.relative;
    if (u.parameter == kImbalance) {  // ρ ∓ σ, the busiest rank never below the mean
      SimOptions with = o;
      with.moe_imbalance = std::max(1.0, prog.training.moe_imbalance * factor);
      step[i] = simulate(prog, cluster, with).metrics.step_time_s;
      return;
    }
    step[i] = simulate(prog, perturbed(cluster, u.parameter, factor), o).metrics.step_time_s;
  });
  return step;
}

// The error bars from the central metrics and the perturbed step times (see the header).
ErrorBars combine(const std::vector<spec::ParameterUncertainty>& params, const Metrics& central, const std::vector<double>& step) {
  ErrorBars e;
  e.step_time_s = central.step_time_s;
  e.mfu = e.mfu_low = e.mfu_high = central.mfu;
  e.step_low_s = e.step_high_s = central.step_time_s;
  if (params.empty() || !(central.step_time_s > 0)) return e;
  const double T = central.step_time_s;
  double var = 0, below = 0, above = 0;
  for (std::size_t j = 0; j < params.size(); ++j) {
    const spec::ParameterUncertainty& u = params[j];
    Sensitivity s;
    s.parameter = u.parameter;
    s.relative = u.relative;
    s.source = u.source;
    s.step_minus_s = step[2 * j] < 0 ? T : step[2 * j];
    s.step_plus_s = step[2 * j + 1] < 0 ? T : step[2 * j + 1];
    var += s.half_spread_s() * s.half_spread_s();
    below += std::pow(std::max(0.0, T - std::min(s.step_minus_s, s.step_plus_s)), 2);
    above += std::pow(std::max(0.0, std::max(s.step_minus_s, s.step_plus_s) - T), 2);
    e.terms.push_back(std::move(s));
  }
  std::stable_sort(e.terms.begin(), e.terms.end(), [](const Sensitivity& a, const Sensitivity& b) {
    return std::abs(a.half_spread_s()) > std::abs(b.half_spread_s());
  });
  e.sigma_s = std::sqrt(var);
  e.step_low_s = T - std::sqrt(below);
  e.step_high_s = T + std::sqrt(above);
  e.mfu_low = central.mfu * T / e.step_high_s;
  e.mfu_high = e.step_low_s > 0 ? central.mfu * T / e.step_low_s : central.mfu;
  return e;
}

}  // namespace

ErrorBars error_bars(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options,
                     const Metrics& central) {
  const std::vector<spec::ParameterUncertainty> params = uncertain(prog, cluster);
  if (params.empty() || !(central.step_time_s > 0)) return combine(params, central, {});
  return combine(params, central, perturbed_steps(prog, cluster, params, options, {}));
}

SimWithErrorBars simulate_with_error_bars(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options) {
  SimWithErrorBars out;
  const std::vector<spec::ParameterUncertainty> params = uncertain(prog, cluster);
  if (params.empty()) {
    out.result = simulate(prog, cluster, options);
    out.bars = combine(params, out.result.metrics, {});
    return out;
  }
  const std::vector<double> step =
      perturbed_steps(prog, cluster, params, options, [&] { out.result = simulate(prog, cluster, options); });
  out.bars = combine(params, out.result.metrics, step);
  return out;
}

double difference_sigma(const ErrorBars& a, const ErrorBars& b) {
  double var = 0;
  for (const Sensitivity& s : a.terms) {
    double other = 0;
    for (const Sensitivity& t : b.terms) {
      if (t.parameter == s.parameter) other = t.half_spread_s();
    }
    const double d = s.half_spread_s() - other;
    var += d * d;
  }
  for (const Sensitivity& t : b.terms) {  // parameters only b responds to
    const bool shared = std::any_of(a.terms.begin(), a.terms.end(), [&](const Sensitivity& s) { return s.parameter == t.parameter; });
    if (!shared) var += t.half_spread_s() * t.half_spread_s();
  }
  return std::sqrt(var);
}

bool distinguishable(const ErrorBars& a, const ErrorBars& b) {
  return std::abs(a.step_time_s - b.step_time_s) > 2 * difference_sigma(a, b);
}

std::string error_bars_text(const ErrorBars& e) {
  if (e.empty()) return "no parameter uncertainty in the cluster profile or the training";
  std::string s = text::fmt("1σ %.4g", e.step_low_s) + text::fmt(" .. %.4g s", e.step_high_s) +
                  text::fmt(", MFU %.1f", 100 * e.mfu_low) + text::fmt(" .. %.1f%%", 100 * e.mfu_high);
  const Sensitivity& top = e.terms.front();
  s += "; largest: " + top.parameter + text::fmt(" (±%.0f%%)", 100 * top.relative) +
       text::fmt(" ±%.3g s", std::abs(top.half_spread_s()));
  return s;
}

nlohmann::json to_json(const ErrorBars& e) {
  nlohmann::json terms = nlohmann::json::array();
  for (const Sensitivity& s : e.terms) {
    terms.push_back({{"parameter", s.parameter},
                     {"relative", s.relative},
                     {"step_time_minus_s", s.step_minus_s},
                     {"step_time_plus_s", s.step_plus_s},
                     {"source", s.source}});
  }
  return {{"method", "first-order propagation of independent 1-sigma parameter uncertainties, one-at-a-time central "
                     "differences (docs/simulator.md)"},
          {"step_time_s", {{"value", e.step_time_s}, {"sigma", e.sigma_s}, {"low", e.step_low_s}, {"high", e.step_high_s}}},
          {"mfu", {{"value", e.mfu}, {"low", e.mfu_low}, {"high", e.mfu_high}}},
          {"terms", terms}};
}

}  // namespace stagecraft::sim
