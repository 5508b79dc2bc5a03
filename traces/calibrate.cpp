#include "traces/calibrate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>

#include "core/io/file.hpp"
#include "core/spec/error.hpp"
#include "core/spec/limits.hpp"
#include "sim/models/work.hpp"
#include "traces/calibrate/lsq.hpp"
#include "traces/compare.hpp"

namespace stagecraft::traces {

using nlohmann::json;

namespace {

using sim::Gemm;
using sim::GemmRate;
using sim::gemm_rate;
using sim::KnotWeights;
using sim::knot_weights;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kRankTolerance = 1e-8;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Residual bookkeeping shared by the groups.

void summarize_residuals(const std::vector<double>& r, const std::vector<const std::string*>& origins, GroupReport& g) {
  if (r.empty()) return;
  double sum2 = 0, worst = 0;
  for (double v : r) {
    sum2 += v * v;
    worst = std::max(worst, std::fabs(v));
  }
  g.rms_residual = std::sqrt(sum2 / static_cast<double>(r.size()));
  g.max_residual = worst;
  std::vector<std::size_t> order(r.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return std::fabs(r[a]) > std::fabs(r[b]); });
  for (std::size_t i = 0; i < order.size() && i < 5; ++i) g.worst.emplace_back(*origins[order[i]], r[order[i]]);
}

std::string too_few(int64_t samples, int64_t free) {
  return "refused: " + std::to_string(samples) + " samples for " + std::to_string(free) + " parameter" +
         (free == 1 ? "" : "s") + ", need at least " + std::to_string(std::max<int64_t>(kMinSamples, 2 * free));
}

Parameter make_parameter(const std::string& name, double base) {
  Parameter p;
  p.name = name;
  p.base = p.value = base;
  return p;
}

void hold(Parameter& p, const std::string& why) {
  p.fitted = false;
  p.value = p.base;
  p.std_error = kNaN;
  p.status = "held: " + why;
}

// Index of the free parameter with the least support.
std::size_t least_supported(const std::vector<bool>& free, const std::vector<Parameter>& params) {
  std::size_t best = 0;
  double s = std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < free.size(); ++j) {
    if (free[j] && params[j].support < s) {
      s = params[j].support;
      best = j;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// 1. Compute: GEMM efficiency knots and memory throughput.

struct GemmTerm {
  KnotWeights w;
  double seconds_at_full_efficiency;  // count·F / P
};

// The compute time's terms linear in a parameter: memory-bound bytes (m = seconds per byte),
// activation-function elements (a = seconds per element), Adam parameters (u = seconds per
// parameter). Each coefficient is the inverse of a profile rate.
constexpr std::size_t kLinearTerms = 3;

struct ComputeRow {
  std::vector<GemmTerm> gemms;
  std::array<double, kLinearTerms> amount{};  // bytes, activation elements, Adam parameters
  double fixed = 0;                           // seconds not fitted (fused attention kernels)
  double measured = 0;
};

// Parameters of the compute group: the knots' efficiencies e_k, then the linear coefficients c
// (m, a, u). Free ones are fitted as logarithms.
struct ComputeValues {
  std::vector<double> e;
  std::array<double, kLinearTerms> c{};
  std::size_t size() const { return e.size() + kLinearTerms; }
};

class ComputeProblem {
 public:
  ComputeProblem(const std::vector<ComputeSample>& samples, const spec::Gpu& gpu) {
    const auto fp8 = gpu.peak_flops.find(spec::Dtype::kFp8);
    const double fp8_peak = fp8 == gpu.peak_flops.end() ? 0.0 : fp8->second;
    for (const ComputeSample& s : samples) {
      ComputeRow row;
      for (const Gemm& g : s.work.gemms) {
        // an FP8 GEMM on the curve where work.hpp's gemm_rate puts it
        const GemmRate r = gemm_rate(g, s.peak_flops, fp8_peak);
        row.gemms.push_back({knot_weights(gpu.matmul_efficiency, r.curve_flops), g.count * g.flops / r.peak});
      }
      // the memory kinds the profile gives rates of their own (memory_kernels) at the base
      // profile's rates, not fitted; the others run at the fitted contiguous rate
      sim::Work kinds;
      double contiguous = s.work.memory_bytes;
      for (sim::MemKind k : sim::kAllMemKinds) {
        if (sim::has_kind_rate(gpu, k)) {
          kinds.add_bytes(k, s.work.kind(k));
        } else {
          contiguous += s.work.kind(k);
        }
      }
      kinds.softmax_row = s.work.softmax_row;
      row.amount = {contiguous, s.work.activation_elems, s.work.adam_params};
      row.fixed = s.fixed_seconds + sim::memory_seconds(kinds, gpu);
      row.measured = s.seconds;
      rows_.push_back(std::move(row));
    }
  }
  std::size_t size() const { return rows_.size(); }
  double measured(std::size_t i) const { return rows_[i].measured; }

  // Model time of sample i and, when `d` is given, ∂t/∂ln p for every parameter (knots, then m, a, u).
  double time(std::size_t i, const ComputeValues& v, std::vector<double>* d) const {
    const ComputeRow& row = rows_[i];
    const std::size_t K = v.e.size();
    if (d) d->assign(v.size(), 0.0);
    double t = row.fixed;
    for (std::size_t j = 0; j < kLinearTerms; ++j) {
      const double part = row.amount[j] * v.c[j];
      t += part;
      if (d) (*d)[K + j] = part;
    }
    for (const GemmTerm& g : row.gemms) {
      const double eff = g.w.w0 * v.e[g.w.k0] + g.w.w1 * v.e[g.w.k1];
      const double ti = g.seconds_at_full_efficiency / eff;
      t += ti;
      if (d) {
        (*d)[g.w.k0] -= ti / eff * g.w.w0 * v.e[g.w.k0];
        (*d)[g.w.k1] -= ti / eff * g.w.w1 * v.e[g.w.k1];
      }
    }
    return t;
  }

  // Support of every parameter: Σ_i |∂ln t_i/∂ln p|.
  std::vector<double> support(const ComputeValues& v) const {
    std::vector<double> out(v.size(), 0.0), d;
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const double t = time(i, v, &d);
      for (std::size_t k = 0; k < out.size(); ++k) out[k] += std::fabs(d[k]) / t;
    }
    return out;
  }

 private:
  std::vector<ComputeRow> rows_;
};

struct ComputeResult {
  std::vector<Parameter> params;   // knots..., memory, activation, Adam
  GroupReport report;
  ComputeValues values;
};

// Parameter j of the compute group: knot j, or linear coefficient j − K.
double& value_at(ComputeValues& v, std::size_t j) { return j < v.e.size() ? v.e[j] : v.c[j - v.e.size()]; }
double value_at(const ComputeValues& v, std::size_t j) { return j < v.e.size() ? v.e[j] : v.c[j - v.e.size()]; }

// v with the free parameters taken from φ.
void unpack(const std::vector<bool>& free, const Eigen::VectorXd& phi, ComputeValues& v) {
  Eigen::Index j = 0;
  for (std::size_t k = 0; k < free.size(); ++k) {
    if (free[k]) value_at(v, k) = std::exp(phi(j++));
  }
}

// The physical range of compute parameter j in its fitted form (an efficiency, or seconds per
// byte / element / parameter): calibrate.hpp, "Physical bounds".
constexpr double kMinGemmEfficiency = 1e-6;
std::pair<double, double> compute_range(std::size_t j, std::size_t K) {
  if (j < K) return {kMinGemmEfficiency, 1.0};
  if (j == K) return {1.0 / spec::limits::kMaxBandwidthBps, 1.0 / spec::limits::kMinBandwidthBps};
  return {1.0 / spec::limits::kMaxRate, 1.0 / spec::limits::kMinRate};
}

NonlinearFit lm_compute(const ComputeProblem& P, const std::vector<bool>& free, const ComputeValues& v0) {
  const int nfree = static_cast<int>(std::count(free.begin(), free.end(), true));
  Eigen::VectorXd phi(nfree);
  Box box{Eigen::VectorXd(nfree), Eigen::VectorXd(nfree)};
  Eigen::Index j = 0;
  for (std::size_t k = 0; k < free.size(); ++k) {
    if (!free[k]) continue;
    const auto [lo, hi] = compute_range(k, v0.e.size());
    box.lo(j) = std::log(lo);
    box.hi(j) = std::log(hi);
    phi(j++) = std::log(value_at(v0, k));
  }
  const ResidualFunction f = [&](const Eigen::VectorXd& p, Eigen::VectorXd& r, Eigen::MatrixXd* J) {
    ComputeValues v = v0;
    std::vector<double> d;
    unpack(free, p, v);
    const Eigen::Index n = static_cast<Eigen::Index>(P.size());
    r.resize(n);
    if (J) J->resize(n, nfree);
    for (Eigen::Index i = 0; i < n; ++i) {
      const double t_hat = P.measured(static_cast<std::size_t>(i));
      r(i) = P.time(static_cast<std::size_t>(i), v, J ? &d : nullptr) / t_hat - 1.0;
      if (!J) continue;
      Eigen::Index c = 0;
      for (std::size_t k = 0; k < free.size(); ++k) {
        if (free[k]) (*J)(i, c++) = d[k] / t_hat;
      }
    }
  };
  return levenberg_marquardt(f, phi, 200, &box);
}

// The free-set iteration every group shares (calibrate.hpp, "What gets fitted"): select the
// parameters with support, check there are samples enough, fit, and repeat while the fitted
// values change which parameters have support. `fit` returns false when its free set cannot be
// fitted (then it has marked the culprit in `never` and held it); `reset` restores the base values.
struct Selection {
  bool fitted = false;
  std::vector<bool> free, never;
  std::string status;
};

Selection select_and_fit(std::vector<Parameter>& params, int64_t samples,
                         const std::function<std::vector<double>()>& support,
                         const std::function<bool(const std::vector<bool>&, std::vector<bool>&)>& fit,
                         const std::function<void()>& reset) {
  Selection sel;
  sel.never.assign(params.size(), false);
  sel.free.assign(params.size(), false);
  for (int round = 0; round < 8; ++round) {
    const std::vector<double> sup = support();
    std::vector<bool> next(params.size());
    for (std::size_t j = 0; j < params.size(); ++j) {
      params[j].support = sup[j];
      next[j] = !sel.never[j] && sup[j] >= kMinSupport;
    }
    if (sel.fitted && next == sel.free) break;
    sel.free = next;
    sel.fitted = false;
    const int64_t nfree = std::count(sel.free.begin(), sel.free.end(), true);
    if (nfree == 0) break;
    if (samples < std::max<int64_t>(kMinSamples, 2 * nfree)) {
      sel.status = too_few(samples, nfree);
      break;
    }
    sel.fitted = fit(sel.free, sel.never);
    if (!sel.fitted) reset();
  }
  if (sel.fitted) return sel;
  reset();
  for (std::size_t j = 0; j < params.size(); ++j) {
    if (!sel.never[j]) hold(params[j], sel.status.empty() ? "support " + fmt("%.2g", params[j].support) + " < 3" : sel.status);
  }
  if (sel.status.empty()) sel.status = "refused: no parameter has support >= 3";
  return sel;
}

// Fitted parameters get their value and standard error; the others say why they were held.
void finish_parameters(std::vector<Parameter>& params, const Selection& sel, GroupReport& report,
                       const std::function<void(std::size_t j, Eigen::Index column)>& set) {
  Eigen::Index column = 0;
  for (std::size_t j = 0; j < params.size(); ++j) {
    if (!sel.free[j]) {
      if (!sel.never[j]) hold(params[j], "support " + fmt("%.2g", params[j].support) + " < 3 (the samples barely depend on it)");
      continue;
    }
    set(j, column++);
    params[j].fitted = true;
    ++report.parameters;
  }
  report.status = "fitted " + std::to_string(report.parameters) + " of " + std::to_string(params.size());
}

// A group's report before fitting; false (and every parameter held) when it has too few samples.
bool start_group(GroupReport& report, const std::string& name, std::size_t samples, std::vector<Parameter>& params) {
  report.name = name;
  report.samples = static_cast<int64_t>(samples);
  report.rms_residual = report.max_residual = kNaN;
  if (report.samples >= kMinSamples) return true;
  report.status = samples == 0 ? "no samples" : too_few(report.samples, 1);
  for (Parameter& p : params) hold(p, samples == 0 ? "no " + name + " samples" : report.status);
  return false;
}

// The linear terms as profile rates (name, rate); a rate of 0 means the profile leaves the term out.
std::array<std::pair<const char*, double>, kLinearTerms> linear_rates(const spec::Gpu& gpu) {
  return {{{"gpu.memory_Bps", gpu.hbm_Bps * gpu.memory_efficiency},
           {"gpu.activation_elems_per_s", gpu.activation_elems_per_s},
           {"gpu.adam_params_per_s", gpu.adam_params_per_s}}};
}

// The compute group's parameters at a profile's values.
ComputeValues profile_values(const spec::Gpu& gpu) {
  ComputeValues v;
  for (const auto& [flops, fraction] : gpu.matmul_efficiency) v.e.push_back(fraction);
  const auto rates = linear_rates(gpu);
  for (std::size_t j = 0; j < kLinearTerms; ++j) v.c[j] = rates[j].second > 0 ? 1.0 / rates[j].second : 0.0;
  return v;
}

ComputeResult fit_compute(const std::vector<ComputeSample>& samples, const spec::Gpu& gpu) {
  ComputeResult out;
  const std::size_t K = gpu.matmul_efficiency.size();
  out.values = profile_values(gpu);
  const auto rates = linear_rates(gpu);
  for (std::size_t k = 0; k < K; ++k) {
    out.params.push_back(make_parameter(spec::matmul_knot_name(gpu.matmul_efficiency[k].first), out.values.e[k]));
  }
  for (std::size_t j = 0; j < kLinearTerms; ++j) out.params.push_back(make_parameter(rates[j].first, rates[j].second));
  // A term the base profile leaves out has no value to start from: it stays out (support 0).
  const auto hold_absent = [&] {
    for (std::size_t j = 0; j < kLinearTerms; ++j) {
      if (rates[j].second > 0) continue;
      const std::string field = std::string(rates[j].first).substr(4);  // without "gpu."
      hold(out.params[K + j], "the base profile has no " + field + " (the term is absent); give it a first estimate to fit it");
    }
  };
  if (!start_group(out.report, "compute", samples.size(), out.params)) {
    hold_absent();
    return out;
  }
  const ComputeProblem P(samples, gpu);
  const ComputeValues base = out.values;
  NonlinearFit fit;
  const auto support = [&] { return P.support(out.values); };
  const auto reset = [&] { out.values = base; };
  const auto attempt = [&](const std::vector<bool>& free, std::vector<bool>& never) {
    fit = lm_compute(P, free, base);
    if (numerical_rank(fit.jacobian, kRankTolerance) < std::count(free.begin(), free.end(), true)) {
      const std::size_t j = least_supported(free, out.params);
      never[j] = true;
      hold(out.params[j], "not separable from the other parameters by these samples");
      return false;
    }
    reset();
    unpack(free, fit.phi, out.values);
    return true;
  };
  const Selection sel = select_and_fit(out.params, out.report.samples, support, attempt, reset);
  out.report.status = sel.status;
  if (!sel.fitted) {
    hold_absent();
    return out;
  }
  finish_parameters(out.params, sel, out.report, [&](std::size_t j, Eigen::Index c) {
    Parameter& p = out.params[j];
    p.value = j < K ? out.values.e[j] : 1.0 / out.values.c[j - K];  // the linear terms: rates
    p.std_error = p.value * std::sqrt(fit.covariance(c, c));  // δ-method: se(e^±φ) = e^±φ·se(φ)
    p.status = fit.converged ? "fitted" : "fitted (not converged after " + std::to_string(fit.iterations) + " iterations)";
    if (const int b = fit.bound[static_cast<std::size_t>(c)]; b != 0) {
      // φ is ln e for an efficiency and ln(1/rate) for a rate: a rate's bounds swap
      p.physical_bound = j < K ? b : -b;
      p.status = "at bound: " + fmt("%.3g", p.value) + (p.physical_bound > 0 ? ", the most" : ", the least") + " a profile may hold";
    }
  });
  hold_absent();
  std::vector<double> r;
  std::vector<const std::string*> origins;
  for (std::size_t i = 0; i < P.size(); ++i) {
    r.push_back(P.time(i, out.values, nullptr) / P.measured(i) - 1.0);
    origins.push_back(&samples[i].origin);
  }
  summarize_residuals(r, origins, out.report);
  return out;
}

// ---------------------------------------------------------------------------------------------
// 2. Links: α and 1/β of the intra- and inter-node classes.

struct LinksResult {
  std::vector<Parameter> params;   // α_intra [ns], β_intra [B/s], α_inter [ns], β_inter [B/s]
  GroupReport report;
  std::vector<double> x;           // α_intra [s], 1/β_intra, α_inter [s], 1/β_inter
};

Eigen::Vector4d features_of(const LinkFeatures& f) { return {f.a_intra, f.b_intra, f.a_inter, f.b_inter}; }

std::vector<double> link_support(const std::vector<LinkSample>& s, const std::vector<double>& x) {
  std::vector<double> sup(4, 0.0);
  for (const LinkSample& l : s) {
    const Eigen::Vector4d f = features_of(l.features);
    double t = l.features.fixed_s;
    for (int j = 0; j < 4; ++j) t += f(j) * x[static_cast<std::size_t>(j)];
    if (!(t > 0)) continue;
    for (int j = 0; j < 4; ++j) sup[static_cast<std::size_t>(j)] += f(j) * x[static_cast<std::size_t>(j)] / t;
  }
  return sup;
}

void set_link_parameter(Parameter& p, std::size_t j, double x, double se_x) {
  if (j % 2 == 0) {
    p.value = x * 1e9;
    p.std_error = se_x * 1e9;
  } else {
    p.value = 1.0 / x;
    p.std_error = se_x / (x * x);
  }
}

// The scaled system of the free link parameters: A_ij = f_ij·scale_j / t̂_i, b_i = 1 − (held
// parameters' part of the modelled time) / t̂_i.
void link_system(const std::vector<LinkSample>& samples, const std::vector<bool>& free, const std::vector<double>& base,
                 const std::vector<double>& scale, Eigen::MatrixXd& A, Eigen::VectorXd& b) {
  const Eigen::Index n = static_cast<Eigen::Index>(samples.size());
  A.resize(n, std::count(free.begin(), free.end(), true));
  b.setOnes(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const LinkSample& s = samples[static_cast<std::size_t>(i)];
    const Eigen::Vector4d f = features_of(s.features);
    b(i) -= s.features.fixed_s / s.seconds;
    Eigen::Index col = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      const double v = f(static_cast<Eigen::Index>(j)) / s.seconds;
      if (free[j]) {
        A(i, col++) = v * scale[j];
      } else {
        b(i) -= v * base[j];
      }
    }
  }
}

LinksResult fit_links(const std::vector<LinkSample>& samples, const spec::Cluster& c) {
  LinksResult out;
  const std::vector<double> base = {static_cast<double>(c.intra_node.latency_ns) * 1e-9, 1.0 / c.intra_node.bandwidth_Bps,
                                    static_cast<double>(c.inter_node.latency_ns) * 1e-9, 1.0 / c.inter_node.nic_bandwidth_Bps};
  const char* names[] = {"intra_node.latency_ns", "intra_node.bandwidth_Bps", "inter_node.latency_ns",
                         "inter_node.nic_bandwidth_Bps"};
  for (std::size_t j = 0; j < 4; ++j) {
    Parameter p = make_parameter(names[j], 0);
    set_link_parameter(p, j, base[j], 0);
    p.base = p.value;
    out.params.push_back(p);
  }
  out.x = base;
  if (!start_group(out.report, "links", samples.size(), out.params)) return out;
  std::vector<double> scale = base;  // a zero base latency still needs a scale to solve in
  if (!(scale[0] > 0)) scale[0] = 1e-6;
  if (!(scale[2] > 0)) scale[2] = 1e-6;
  LinearFit fit;
  bool fitted_once = false;
  const auto support = [&] { return link_support(samples, fitted_once ? out.x : scale); };
  const auto reset = [&] { out.x = base; };
  const auto attempt = [&](const std::vector<bool>& free, std::vector<bool>& never) {
    Eigen::MatrixXd A;
    Eigen::VectorXd b;
    link_system(samples, free, base, scale, A, b);
    if (numerical_rank(A, kRankTolerance) < A.cols()) {
      const std::size_t j = least_supported(free, out.params);
      never[j] = true;
      hold(out.params[j], "not separable from the other link parameters by these samples (too few distinct sizes or paths)");
      return false;
    }
    fit = nonnegative_least_squares(A, b);
    Eigen::Index col = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      if (!free[j]) continue;
      if (j % 2 == 1 && fit.at_bound[static_cast<std::size_t>(col)]) {
        never[j] = true;
        hold(out.params[j], "the fit drives the bandwidth to infinity (the samples do not resolve it)");
        return false;
      }
      out.x[j] = fit.x(col++) * scale[j];
    }
    fitted_once = true;
    return true;
  };
  const Selection sel = select_and_fit(out.params, out.report.samples, support, attempt, reset);
  out.report.status = sel.status;
  if (!sel.fitted) return out;
  finish_parameters(out.params, sel, out.report, [&](std::size_t j, Eigen::Index col) {
    set_link_parameter(out.params[j], j, out.x[j], std::sqrt(std::max(0.0, fit.covariance(col, col))) * scale[j]);
    out.params[j].status = fit.at_bound[static_cast<std::size_t>(col)] ? "at bound: 0 (the samples pull it below zero)" : "fitted";
  });
  std::vector<double> r;
  std::vector<const std::string*> origins;
  for (const LinkSample& s : samples) {
    r.push_back(s.features.seconds(out.x[0], 1.0 / out.x[1], out.x[2], 1.0 / out.x[3]) / s.seconds - 1.0);
    origins.push_back(&s.origin);
  }
  summarize_residuals(r, origins, out.report);
  return out;
}

// A collective's features are linear in the link parameters only for a given NCCL protocol
// choice, which the bandwidths decide: fit, linearise again at the fitted bandwidths, and refit
// until the features stop changing (a fixed point; at most 8 rounds).
// The framework's copies around a collective are timed at `memory_Bps`, the calibrated memory rate.
LinksResult fit_links_relinearised(std::vector<LinkSample> samples, const spec::Cluster& c, double memory_Bps) {
  LinksResult out;
  for (int round = -1; round < 8; ++round) {
    spec::Cluster at = c;
    if (round >= 0) {
      if (out.params.empty()) break;
      at.intra_node.bandwidth_Bps = 1.0 / out.x[1];
      at.inter_node.nic_bandwidth_Bps = 1.0 / out.x[3];
    }
    std::map<int64_t, LinkModel> models;
    bool changed = false;
    for (LinkSample& s : samples) {
      if (!s.collective) continue;
      const LinkSample::Collective& w = *s.collective;
      auto it = models.find(w.topology_gpus);
      if (it == models.end()) {
        spec::Cluster sized = at;
        sized.nodes = std::max(sized.nodes, (w.topology_gpus + sized.gpus_per_node - 1) / sized.gpus_per_node);
        it = models.emplace(w.topology_gpus, LinkModel(sized, w.topology_gpus)).first;
      }
      const LinkFeatures f = collective_features(it->second, w, memory_Bps);
      const auto differs = [](double a, double b) { return std::abs(a - b) > 1e-12 * std::max(std::abs(a), std::abs(b)); };
      if (differs(f.fixed_s, s.features.fixed_s) || differs(f.b_intra, s.features.b_intra) ||
          differs(f.b_inter, s.features.b_inter)) {
        changed = true;
      }
      s.features = f;
    }
    if (round >= 0 && !changed) break;
    out = fit_links(samples, c);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// 3. Host rates.

Parameter fit_rate(const std::vector<RateSample>& samples, const std::string& name, const std::string& group,
                   double base, std::vector<GroupReport>& groups) {
  Parameter p = make_parameter(name, base);
  p.support = static_cast<double>(samples.size());
  GroupReport g;
  g.name = group;
  g.samples = static_cast<int64_t>(samples.size());
  g.rms_residual = g.max_residual = kNaN;
  if (static_cast<int64_t>(samples.size()) < kMinSamples) {
    hold(p, samples.empty() ? "no samples" : too_few(g.samples, 1));
    g.status = samples.empty() ? "no samples" : too_few(g.samples, 1);
    groups.push_back(g);
    return p;
  }
  double sq = 0, sq2 = 0;
  for (const RateSample& s : samples) {
    const double q = s.amount / s.seconds;
    sq += q;
    sq2 += q * q;
  }
  const double u = sq / sq2;
  std::vector<double> r;
  std::vector<const std::string*> origins;
  double rss = 0;
  for (const RateSample& s : samples) {
    r.push_back(s.amount / s.seconds * u - 1.0);
    rss += r.back() * r.back();
    origins.push_back(&s.origin);
  }
  const double se_u = std::sqrt(rss / static_cast<double>(samples.size() - 1) / sq2);
  p.value = 1.0 / u;
  p.std_error = se_u / (u * u);
  p.fitted = true;
  p.status = "fitted";
  g.parameters = 1;
  g.status = "fitted 1 of 1";
  summarize_residuals(r, origins, g);
  groups.push_back(g);
  return p;
}

// ---------------------------------------------------------------------------------------------
// The calibrated profile.

std::string fitted_names(const std::vector<Parameter>& ps, bool fitted) {
  std::string out;
  for (const Parameter& p : ps) {
    if (p.fitted == fitted) out += (out.empty() ? "" : ", ") + p.name;
  }
  return out.empty() ? "none" : out;
}

std::string residual_text(const GroupReport& g) {
  if (!std::isfinite(g.rms_residual)) return g.name + ": " + g.status;
  return g.name + ": " + std::to_string(g.samples) + " samples, RMS relative residual " + fmt("%.2f%%", 100 * g.rms_residual);
}

// A fitted value a profile may not hold: the compute fit ended on its box, or a link or host value
// is past the limits (calibrate.hpp, "Physical bounds"). Throws CalibrationError with the fit.
void check_physical(const Calibration& c) {
  namespace L = spec::limits;
  std::string why;
  for (const Parameter& p : c.parameters) {
    if (!p.fitted) continue;
    std::string past;
    if (p.physical_bound != 0) {
      if (p.name.rfind("gpu.matmul_efficiency@", 0) == 0 && p.physical_bound > 0) {
        past = "the samples pull it above 1: the measured GEMMs run faster than the peak_flops of " +
               (c.base.file.empty() ? c.base.name : c.base.file) + "; raise the peak and calibrate again";
      } else {
        // the value sits on the bound it was held at
        past = "the samples pull it past " + fmt("%.3g", p.value) + (p.physical_bound > 0 ? ", the most" : ", the least") +
               " a profile may hold";
      }
    } else if (p.name.ends_with("latency_ns") && !(p.value >= 0 && p.value <= static_cast<double>(L::kMaxLatencyNs))) {
      past = fmt("%.3g ns", p.value) + " is outside [0, " + fmt("%.3g", static_cast<double>(L::kMaxLatencyNs)) + "] ns";
    } else if (p.name.ends_with("_Bps") && !(p.value >= L::kMinBandwidthBps && p.value <= L::kMaxBandwidthBps)) {
      past = fmt("%.3g B/s", p.value) + " is outside [" + fmt("%.3g", L::kMinBandwidthBps) + ", " + fmt("%.3g", L::kMaxBandwidthBps) + "] B/s";
    } else if (p.name.ends_with("_per_s") && !(p.value >= L::kMinRate && p.value <= L::kMaxRate)) {
      past = fmt("%.3g /s", p.value) + " is outside [" + fmt("%.3g", L::kMinRate) + ", " + fmt("%.3g", L::kMaxRate) + "] per second";
    }
    if (!past.empty()) why += "\n  " + p.name + ": " + past;
  }
  if (why.empty()) return;
  throw CalibrationError("the fit failed: these values are outside what a profile may hold, so the profile's model cannot give "
                         "the measured times (a trace far faster or slower than the base profile's fixed terms allow: start "
                         "from a profile nearer the measured machine)" + why + "\nNothing written. The fit:\n" + to_text(c));
}

void apply(Calibration& c, const ComputeResult& comp, const LinksResult& links, const Parameter& adam, const Parameter& pcie) {
  spec::Cluster& out = c.cluster;
  const std::vector<double>& e = comp.values.e;
  for (std::size_t k = 0; k < e.size(); ++k) {
    if (e[k] > 1.0) {
      throw CalibrationError("the fitted GEMM efficiency at " + fmt("%.3g", out.gpu.matmul_efficiency[k].first) +
                             " FLOPs is " + fmt("%.3f", e[k]) + " > 1: the measured GEMMs run faster than the peak_flops of " +
                             (c.base.file.empty() ? c.base.name : c.base.file) + "; raise the peak and calibrate again");
    }
    out.gpu.matmul_efficiency[k].second = e[k];
  }
  if (comp.values.c[1] > 0) out.gpu.activation_elems_per_s = 1.0 / comp.values.c[1];
  if (comp.values.c[2] > 0) out.gpu.adam_params_per_s = 1.0 / comp.values.c[2];
  const double memory_Bps = 1.0 / comp.values.c[0];
  if (memory_Bps <= out.gpu.hbm_Bps) {
    out.gpu.memory_efficiency = memory_Bps / out.gpu.hbm_Bps;
  } else {
    // measured above the stated bandwidth (caches, or a low datasheet value): the profile can
    // only say so through hbm_Bps, since memory_efficiency is at most 1
    out.gpu.hbm_Bps = memory_Bps;
    out.gpu.memory_efficiency = 1.0;
    for (Parameter& p : c.parameters) {
      if (p.name == "gpu.memory_Bps") p.status += " (above the base hbm_Bps: hbm_Bps set to it, memory_efficiency 1)";
    }
  }
  out.intra_node.latency_ns = static_cast<int64_t>(std::llround(links.x[0] * 1e9));
  out.intra_node.bandwidth_Bps = 1.0 / links.x[1];
  out.inter_node.latency_ns = static_cast<int64_t>(std::llround(links.x[2] * 1e9));
  out.inter_node.nic_bandwidth_Bps = 1.0 / links.x[3];
  out.host.adam_params_per_s = adam.value;
  out.host.pcie_Bps = pcie.value;
}

void write_sources(Calibration& c) {
  spec::Cluster& out = c.cluster;
  std::string files;
  for (const TraceSummary& t : c.traces) files += (files.empty() ? "" : ", ") + t.file;
  std::string residuals;
  for (const GroupReport& g : c.groups) residuals += (residuals.empty() ? "" : "; ") + residual_text(g);
  out.name = c.base.name + "-calibrated";
  out.source = "Calibrated by stagecraft calibrate (least squares, docs/traces.md) from " + files + " on base profile " +
               (c.base.file.empty() ? c.base.name : c.base.file) + ". Fitted: " + fitted_names(c.parameters, true) +
               ". Held at the base values: " + fitted_names(c.parameters, false) + ". " + residuals +
               ". Base profile source: " + c.base.source;
  auto section = [&](std::string& source, const std::string& prefix, const std::string& group) {
    std::string fitted;
    for (const Parameter& p : c.parameters) {
      if (p.fitted && p.name.rfind(prefix, 0) == 0) fitted += (fitted.empty() ? "" : ", ") + p.name.substr(prefix.size());
    }
    if (fitted.empty()) return;
    for (const GroupReport& g : c.groups) {
      if (g.name == group) source = "Calibrated " + fitted + " (" + residual_text(g) + "). Base: " + source;
    }
  };
  section(out.gpu.source, "gpu.", "compute");
  section(out.intra_node.source, "intra_node.", "links");
  section(out.inter_node.source, "inter_node.", "links");
  section(out.host.source, "host.adam", "host adam");
  section(out.host.source, "host.pcie", "pcie");
}

}  // namespace

bool Calibration::fitted_any() const {
  return std::any_of(parameters.begin(), parameters.end(), [](const Parameter& p) { return p.fitted; });
}

const Parameter& Calibration::parameter(const std::string& name) const {
  for (const Parameter& p : parameters) {
    if (p.name == name) return p;
  }
  throw std::out_of_range("no calibration parameter " + name);
}

double model_seconds(const ComputeSample& sample, const spec::Gpu& gpu) {
  const ComputeProblem P({sample}, gpu);
  return P.time(0, profile_values(gpu), nullptr);
}

void record_uncertainty(Calibration& c);

Calibration calibrate(const Samples& samples, const spec::Cluster& base) {
  Calibration c;
  c.base = base;
  c.cluster = base;
  c.traces = samples.traces;
  const ComputeResult comp = fit_compute(samples.compute, base.gpu);
  const double memory_Bps = comp.params.empty() || !(comp.values.c[0] > 0) ? base.gpu.hbm_Bps * base.gpu.memory_efficiency
                                                                          : 1.0 / comp.values.c[0];
  const LinksResult links = fit_links_relinearised(samples.links, base, memory_Bps);
  c.groups = {comp.report, links.report};
  c.parameters = comp.params;
  c.parameters.insert(c.parameters.end(), links.params.begin(), links.params.end());
  const Parameter adam = fit_rate(samples.adam, "host.adam_params_per_s", "host adam", base.host.adam_params_per_s, c.groups);
  const Parameter pcie = fit_rate(samples.pcie, "host.pcie_Bps", "pcie", base.host.pcie_Bps, c.groups);
  c.parameters.push_back(adam);
  c.parameters.push_back(pcie);
  if (!c.fitted_any()) {
    std::string why;
    for (const GroupReport& g : c.groups) why += "\n  " + g.name + ": " + g.status;
    throw CalibrationError("nothing to calibrate: no parameter has enough samples to fit" + why);
  }
  check_physical(c);
  apply(c, comp, links, adam, pcie);
  write_sources(c);
  record_uncertainty(c);
  return c;
}

// The fitted parameters' standard errors become the profile's uncertainties (spec::ParameterUncertainty),
// so simulate and search give calibrated error bars; held parameters keep the base's.
void record_uncertainty(Calibration& c) {
  std::vector<spec::ParameterUncertainty> out;
  for (const Parameter& p : c.parameters) {
    if (!p.fitted || !std::isfinite(p.std_error) || !(p.value > 0)) continue;
    const double relative = p.std_error / p.value;
    if (!(relative > 0 && relative < 1) || !spec::is_uncertain_parameter(p.name, c.cluster.gpu)) continue;
    char text[160];
    std::snprintf(text, sizeof text, "stagecraft calibrate: standard error of the fit (%.0f samples)", p.support);
    out.push_back({p.name, relative, text});
  }
  for (const spec::ParameterUncertainty& u : c.base.uncertainty) {
    const bool fitted = std::any_of(out.begin(), out.end(), [&](const auto& o) {
      return o.parameter == u.parameter || (u.parameter == "gpu.matmul_efficiency" && o.parameter.rfind("gpu.matmul_efficiency@", 0) == 0);
    });
    if (!fitted && spec::is_uncertain_parameter(u.parameter, c.cluster.gpu)) out.push_back(u);
  }
  c.cluster.uncertainty = std::move(out);
}

std::string report_path_for(const std::string& profile_path) {
  const std::string suffix = ".json";
  if (profile_path.size() > suffix.size() && profile_path.ends_with(suffix)) {
    return profile_path.substr(0, profile_path.size() - suffix.size()) + ".calibration.json";
  }
  return profile_path + ".calibration.json";
}

json profile_json(const Calibration& c) {
  json j = spec::to_json(c.cluster);
  if (!c.report_file.empty()) j["source"] = j["source"].get<std::string>() + " Report: " + c.report_file + ".";
  return j;
}

json report_json(const Calibration& c) {
  json traces = json::array();
  for (const TraceSummary& t : c.traces) {
    traces.push_back({{"file", t.file},
                      {"source", t.source},
                      {"kind", t.kind},
                      {"training", t.training},
                      {"samples", {{"compute", t.compute}, {"links", t.links}, {"host_adam", t.adam}, {"pcie", t.pcie}}},
                      {"skipped_events", t.skipped}});
  }
  json params = json::array();
  for (const Parameter& p : c.parameters) {
    params.push_back({{"name", p.name},
                      {"base", p.base},
                      {"fitted", p.value},
                      {"std_error", number_or_null(p.std_error)},
                      {"relative_change", p.base != 0 ? json(p.value / p.base - 1.0) : json(nullptr)},
                      {"support", p.support},
                      {"status", p.status}});
  }
  json groups = json::array();
  for (const GroupReport& g : c.groups) {
    json worst = json::array();
    for (const auto& [origin, r] : g.worst) worst.push_back({{"sample", origin}, {"relative_residual", r}});
    groups.push_back({{"name", g.name},
                      {"samples", g.samples},
                      {"fitted_parameters", g.parameters},
                      {"rms_relative_residual", number_or_null(g.rms_residual)},
                      {"max_relative_residual", number_or_null(g.max_residual)},
                      {"status", g.status},
                      {"worst", worst}});
  }
  return {{"base_cluster", {{"name", c.base.name}, {"file", c.base.file}}},
          {"calibrated_cluster", c.cluster.name},
          {"traces", traces},
          {"parameters", params},
          {"groups", groups},
          {"method", "least squares on relative residuals; docs/traces.md \"Calibration\""}};
}

std::string to_text(const Calibration& c) {
  std::string out;
  char line[512];
  for (const TraceSummary& t : c.traces) {
    std::snprintf(line, sizeof line, "trace  %s (%s %s; %s): %lld compute, %lld link, %lld adam, %lld pcie samples\n",
                  t.file.c_str(), t.source.c_str(), t.kind.c_str(), t.training.c_str(), static_cast<long long>(t.compute),
                  static_cast<long long>(t.links), static_cast<long long>(t.adam), static_cast<long long>(t.pcie));
    out += line;
  }
  std::snprintf(line, sizeof line, "\n%-34s %14s %14s %12s %9s  %s\n", "parameter", "base", "fitted", "std error", "support",
                "status");
  out += line;
  for (const Parameter& p : c.parameters) {
    std::snprintf(line, sizeof line, "%-34s %14.6g %14.6g %12s %9.2f  %s\n", p.name.c_str(), p.base, p.value,
                  std::isfinite(p.std_error) ? fmt("%.3g", p.std_error).c_str() : "-", p.support, p.status.c_str());
    out += line;
  }
  out += "\n";
  for (const GroupReport& g : c.groups) {
    out += residual_text(g);
    if (std::isfinite(g.max_residual)) out += ", largest " + fmt("%.2f%%", 100 * g.max_residual);
    out += "\n";
  }
  return out;
}

void write_calibration(Calibration& c, const std::string& profile_path) {
  c.report_file = report_path_for(profile_path);
  c.cluster.file = profile_path;
  const json profile = profile_json(c);
  // The loader's bounds are the physical ones (docs/reliability.md, "Limits on sizes"): a fit past
  // them (a memory rate of 1e33 B/s from a trace far faster than the base profile) is a fit that
  // failed, exit 1 with its values and residuals, and nothing is written.
  try {
    spec::cluster_from_json(profile, profile_path);
  } catch (const spec::SpecError& e) {
    throw CalibrationError(std::string("the fitted profile is outside the physical bounds a profile may hold (") +
                           e.detail() + (e.pointer().empty() ? "" : " at " + e.pointer()) +
                           "); nothing written. The fit:\n" + to_text(c));
  }
  auto write = [](const std::string& path, const json& j) { io::write_file(path, j.dump(2) + "\n"); };
  write(c.report_file, report_json(c));  // the report first: the profile names it
  write(profile_path, profile);
}

}  // namespace stagecraft::traces
