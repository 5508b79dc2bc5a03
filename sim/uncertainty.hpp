// Error bars: how the uncertainty of a cluster profile's parameters (spec::ParameterUncertainty, a
// relative 1σ each: a sourced range or calibrate's standard error) carries into a plan's step time
// and MFU.
//
// Method: first-order propagation of independent uncertainties with one-at-a-time central
// differences. For each uncertain parameter p_i with relative σ_i the plan is simulated again with
// p_i·(1 − σ_i) and p_i·(1 + σ_i), all else as given (T⁻_i, T⁺_i; step time only). Then
//     σ_T = sqrt(Σ_i ((T⁺_i − T⁻_i) / 2)²)
// and the 1σ interval is [T − sqrt(Σ_i max(0, T − min(T⁻_i, T⁺_i))²),
//                          T + sqrt(Σ_i max(0, max(T⁻_i, T⁺_i) − T)²)],
// each side in quadrature, so a step time that responds unevenly (a bandwidth that stops binding)
// gets an uneven interval. MFU is ∝ 1/T: its interval is MFU·T/T_high .. MFU·T/T_low.
// Comparing two plans on one cluster, the parameters' errors are shared, so the difference of
// their step times has its own spread: d_i = ((T⁺_i − T⁻_i) − (S⁺_i − S⁻_i)) / 2 for plans T and
// S, σ_Δ = sqrt(Σ d_i²); the plans are distinguishable when |T − S| > 2·σ_Δ.
// Perturbing a parameter: matmul efficiency scales every knot (or the named one), capped at 1;
// gpu.memory_Bps scales hbm_Bps; rates and bandwidths scale; latencies scale and round to ns.
// nccl.latency scales every latency of the NCCL tuning table (spec::Nccl::latency_scale).
#pragma once

#include <string>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::sim {

// The cluster with `parameter` scaled by `factor`. Throws std::invalid_argument for an unknown name.
spec::Cluster perturbed(const spec::Cluster& cluster, const std::string& parameter, double factor);

struct Sensitivity {
  std::string parameter;
  double relative = 0;            // σ_i
  double step_minus_s = 0;        // T at p·(1 − σ)
  double step_plus_s = 0;         // T at p·(1 + σ)
  std::string source;
  double half_spread_s() const { return 0.5 * (step_plus_s - step_minus_s); }
};

struct ErrorBars {
  double step_time_s = 0;         // the central value
  double sigma_s = 0;
  double step_low_s = 0, step_high_s = 0;
  double mfu = 0, mfu_low = 0, mfu_high = 0;
  std::vector<Sensitivity> terms; // one per uncertain parameter, largest |spread| first
  bool empty() const { return terms.empty(); }
};

// Error bars of a plan whose central metrics are `central` (simulated with `options`); empty when
// the cluster carries no uncertainty. Costs two step-time simulations per uncertain parameter.
ErrorBars error_bars(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options,
                     const Metrics& central);

// The simulation of a plan (with `options`) and its error bars together: the central simulation
// runs beside the perturbed ones, on the same cores, so the whole takes (1 + 2k) simulations over
// the cores rather than one and then 2k. Errors are the central simulation's first (SimError).
struct SimWithErrorBars {
  SimResult result;
  ErrorBars bars;
};
SimWithErrorBars simulate_with_error_bars(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options);

// 2σ of the difference of two plans' step times on the same cluster (see above); both error bars
// must come from the same cluster's parameters.
double difference_sigma(const ErrorBars& a, const ErrorBars& b);
bool distinguishable(const ErrorBars& a, const ErrorBars& b);

// One line: "16.47 s (1σ 15.98 .. 17.02 s), MFU 64.3% (62.2 .. 66.3%); largest: gpu.matmul_efficiency ±0.41 s".
std::string error_bars_text(const ErrorBars& e);
nlohmann::json to_json(const ErrorBars& e);

}  // namespace stagecraft::sim
