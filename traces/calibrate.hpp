// Calibration: the cost-model parameters of a cluster profile fitted by least squares to measured
// durations (calibrate/samples.hpp), written back as a profile spec::load_cluster accepts
// (stagecraft calibrate MEASURED... --cluster C -o CALIBRATED.json; docs/traces.md).
//
// 1. GEMM efficiency curve, memory-bound throughput, activation and Adam rates (nonlinear;
//    Levenberg–Marquardt, lsq.hpp):
//      t_i(e, m, a, u) = Σ_g c_ig·F_ig / (P_i·eff(F_ig)) + B_i·m + N_i·a + U_i·u + K_i
//      eff(F)    = Σ_k w_k(F)·e_k        the profile's knots F_k, w linear in log10 F, flat outside
//      m         = 1 / (hbm_Bps · memory_efficiency)
//      a         = 1 / gpu.activation_elems_per_s,   u = 1 / gpu.adam_params_per_s
//    minimize Σ_i (t_i/t̂_i − 1)²  over φ = (ln e_k of the supported knots, ln m, ln a, ln u)
//    (logarithms keep them positive; c_ig GEMMs of F_ig FLOPs, B_i bytes, N_i activation elements
//    and U_i Adam parameters per sample, P_i the peak of its dtype). The knots' FLOPs stay the base
//    profile's; their fractions are fitted. A rate the base profile leaves unset (a or u = 0: the
//    term absent, as on GPU profiles) stays unset. B_i counts the memory-bound bytes that run at
//    memory_efficiency; K_i is the time of the kinds the profile's memory_kernels rate apart
//    (strided, softmax, dropout: sim/models/work.hpp) at the base profile's rates, not fitted.
// 2. Links (linear, non-negative; calibrate/links.hpp for A..D):
//      t_i = A_i·α_intra + B_i·(1/β_intra) + C_i·α_inter + D_i·(1/β_inter)
//    minimize Σ_i (t_i/t̂_i − 1)²  subject to α ≥ 0, 1/β ≥ 0, solved as x = x_base ∘ z in z.
// 3. Host rates (closed form): t_i = n_i·u,  u = Σ_i(n_i/t̂_i) / Σ_i(n_i/t̂_i)²;  Adam params/s or
//    PCIe bytes/s = 1/u.
// Relative residuals weigh a 10 µs all-reduce and a 100 ms backward alike (timing noise grows
// with the duration).
// What gets fitted: a parameter's support is Σ_i |∂ln t_i/∂ln p| (how many samples' worth of
// time it governs), evaluated at the current values; it is fitted when the support reaches
// kMinSupport, its group has at least max(kMinSamples, 2·free parameters) samples, and the free
// parameters are separable (the scaled Jacobian's numerical rank equals their count, else the
// least-supported one is held and the fit repeated). Supports are re-evaluated at the fitted
// values until the free set stops changing. Everything else keeps its base value, and the report
// says why. A fitted GEMM efficiency above 1 means the profile's peak is too low: an error.
// Physical bounds: the compute fit runs inside a box (projected Levenberg–Marquardt, lsq.hpp) —
// each GEMM efficiency in [1e-6, 1], the memory rate within the bandwidths a profile may hold
// (core/spec/limits.hpp: 1 kB/s to 1 PB/s), the activation and Adam rates within its rates (1e3
// to 1e16 per second) — so no value diverges; a fit that ends on a bound is one the profile's
// model cannot give (a trace far faster than the base's fixed terms allow), and calibrate()
// throws CalibrationError (exit 1) with the fit's values and residuals. Fitted link and host
// values are checked against the same limits.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/cluster.hpp"
#include "traces/calibrate/samples.hpp"

namespace stagecraft::traces {

inline constexpr double kMinSupport = 3.0;
inline constexpr int64_t kMinSamples = 4;

// The request cannot be met from these samples (too few, nothing separable, a peak below the
// measured rate): `stagecraft calibrate` exits 1.
class CalibrationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Parameter {
  std::string name;       // profile field, e.g. "intra_node.latency_ns", "gpu.matmul_efficiency@1e+09"
  double base = 0;        // in the profile's unit
  double value = 0;       // fitted, or base when held
  double std_error = 0;   // NaN when not fitted
  double support = 0;
  bool fitted = false;
  std::string status;     // "fitted", "held: ...", "at bound: ..."
  // -1 / +1: the fit ended on the parameter's physical lower / upper bound (fit_compute's box):
  // the samples pull it past what a profile may hold, and calibrate() refuses the fit.
  int physical_bound = 0;
};

struct GroupReport {
  std::string name;       // "compute", "links", "host adam", "pcie"
  int64_t samples = 0;
  int64_t parameters = 0; // fitted
  double rms_residual = 0;   // relative, at the fitted values; NaN when nothing was fitted
  double max_residual = 0;
  std::string status;
  std::vector<std::pair<std::string, double>> worst;  // (sample origin, relative residual)
};

struct Calibration {
  spec::Cluster base;
  spec::Cluster cluster;  // calibrated
  std::vector<Parameter> parameters;
  std::vector<GroupReport> groups;
  std::vector<TraceSummary> traces;
  std::string report_file;  // set by write_calibration

  bool fitted_any() const;
  const Parameter& parameter(const std::string& name) const;
};

// The time the compute fit gives a sample at a profile's values: equation 1 on the sample's
// sim::Work (equal to sim::work_seconds, which the simulator times instructions with).
double model_seconds(const ComputeSample& sample, const spec::Gpu& gpu);

// Throws CalibrationError when no parameter can be fitted, or a fit is physically impossible.
Calibration calibrate(const Samples& samples, const spec::Cluster& base);

// CALIBRATED.json -> CALIBRATED.calibration.json
std::string report_path_for(const std::string& profile_path);
// The calibrated profile (spec::to_json with the fit in its source strings).
nlohmann::json profile_json(const Calibration& c);
nlohmann::json report_json(const Calibration& c);
std::string to_text(const Calibration& c);
// Writes the profile and its report, then loads the profile back with spec::load_cluster.
void write_calibration(Calibration& c, const std::string& profile_path);

}  // namespace stagecraft::traces
