// A mixture-of-experts MLP unit's math (Megatron-Core's MoELayer with the alltoall dispatcher on
// one expert-parallel rank; transformers' MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock), host
// kernels only. Internal to executor/model: LayerT calls it for UnitKind::kMoe.
//
// Shape legend: N rows, C hidden, E experts, k chosen per token, R = N·k routed copies, f one
// expert's width, F_s the shared experts'.
//   a = norm2(x)
//   router     z [N, E] = a . W_r (+ gpt-oss's logit bias);  p = softmax(z) per row (fp32-like
//              accumulation in double), or with the "sigmoid" router p = σ(z) (DeepSeek-V3)
//   top-k      per row the k largest selection scores p + b (b: DeepSeek-V3's expert bias, only with
//              moe.router_bias; ties: the lower expert) — with group-limited routing among the
//              experts of the row's router_group_top_k best groups, a group scored by the sum of its
//              top (k / router_group_top_k) selection scores (Megatron-Core group_limited_topk) —,
//              g_j = p_j, divided by their sum (+1e-20 with sigmoid, Megatron-Core's and
//              transformers' DeepSeek-V3) when the model normalises the top k (Mixtral, Megatron's
//              default, norm_topk_prob), times moe.router_scaling (routed_scaling_factor)
//   dispatch   copy n·k + j goes to expert e_j; the copies sorted by expert (stable: by token)
//              are the permuted rows x_e [R, C] (Megatron's permute)
//   experts    y_e = MLP_e(x_e), each expert's MLP of width f over its rows (its grouped GEMM)
//   combine    y[n] = x[n] + sum_j g_j · y_e[row of n·k + j] + s(a)[n]
//   shared     s(a) = MLP_s(a), times sigmoid(a . w_g) with Qwen2-MoE's shared gate
//   balancing  aux = E / (k·T²) · sum_e P_e · c_e (Megatron-Core router.py aux_loss_load_balancing,
//              switch_load_balancing_loss_func) over its own scores s and routing map
//              (compute_routing_scores_for_aux_loss): s = p with softmax, s = p / (sum_e p_e + 1e-20)
//              with sigmoid; c_e = the rows whose top k of s (no expert bias, no group limit; ties:
//              the lower expert) hold e, P_e = sum_n s[n, e]. T = N and c_e this rank's; with tp·cp
//              > 1 the Program's counts all-reduce makes c_e the group's and T its tokens, so the
//              ranks' terms add up to the micro-batch's loss. Its gradient enters with the
//              micro-batch's TokenBatch::moe_aux_grad: d aux / d s[n, e] = a_e = E · c_e / (k·T²);
//              through the sigmoid's normalisation d p_j = (a_j − sum_e a_e s_e) / S, S = sum p + 1e-20
// tp > 1 with shared experts (their MLP tp-split: column-parallel up/gate, row-parallel down, as
// Megatron-Core's SharedExpertMLP): the unit takes the tp group's whole rows; the norm, the
// shared experts' slice and the shared gate run over them all, the router and the routed
// experts over this rank's own rows [row0, row0 + N/tp) (routed_rows); y and d a are this rank's
// parts (the residual and the down projection's bias on tp rank 0), summed by the Program's
// reduce-scatter, after which finish_input_grad runs the norm's backward on the rank's rows.
// Backward: d y_e[r] = g · dy[n];  d g_j = dy[n] . y_e[r];  through the experts' MLPs to d x_e,
// summed back per token into d a; normalised top k: d p_j = ρ (d g_j − sum_i d g_i u_i) / sum p
// (u_i = g_i / ρ, ρ the scaling); softmax: d z = p ⊙ (d p − sum_e d p_e p_e), sigmoid:
// d z = d p ⊙ p (1 − p) (the bias only selects: no gradient); d a += d z . W_r^T, plus the shared
// experts' and their gate's; then the norm's backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

#include "executor/model/units_impl.hpp"

namespace stagecraft::executor::detail {

[[noreturn]] inline void moe_on_device() {
  throw std::logic_error("mixture-of-experts units run on the host kernels only");
}

// Expert e's linears: the stacked tensors' slices.
inline std::vector<LinearSlot> expert_slices(const UnitSlots& s, int64_t e) {
  std::vector<LinearSlot> out = s.expert_linears;
  for (LinearSlot& l : out) {
    l.w += e * l.in * l.out;
    if (l.b >= 0) l.b += e * l.out;
  }
  return out;
}

// Per expert the copies routed to it: c_e = offsets[e + 1] − offsets[e].
template <typename C>
double expert_count(const C& c, int64_t e) {
  return static_cast<double>(c.moe_offsets[static_cast<std::size_t>(e + 1)] - c.moe_offsets[static_cast<std::size_t>(e)]);
}

// The k experts a row takes by selection score `sel` [E] (ties: the lower expert), among the best
// groups' experts with group-limited routing; written to ids[0, k).
inline void select_top_k(const spec::Model& m, const double* sel, std::vector<int64_t>& ids) {
  const int64_t E = m.moe.experts, top = m.moe.top_k, G = m.moe.router_groups;
  ids.resize(static_cast<std::size_t>(E));
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](int64_t a, int64_t b) { return sel[a] > sel[b] || (sel[a] == sel[b] && a < b); };
  if (G > 1) {
    const int64_t per = E / G, take = top / m.moe.router_group_top_k;
    std::vector<double> score(static_cast<std::size_t>(G), 0.0);
    std::vector<int64_t> members(static_cast<std::size_t>(per));
    for (int64_t g = 0; g < G; ++g) {
      std::iota(members.begin(), members.end(), g * per);
      std::partial_sort(members.begin(), members.begin() + take, members.end(), better);
      for (int64_t j = 0; j < take; ++j) score[static_cast<std::size_t>(g)] += sel[members[static_cast<std::size_t>(j)]];
    }
    std::vector<int64_t> groups(static_cast<std::size_t>(G));
    std::iota(groups.begin(), groups.end(), 0);
    std::partial_sort(groups.begin(), groups.begin() + m.moe.router_group_top_k, groups.end(), [&](int64_t a, int64_t b) {
      return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)] || (score[static_cast<std::size_t>(a)] == score[static_cast<std::size_t>(b)] && a < b);
    });
    std::vector<bool> open(static_cast<std::size_t>(G), false);
    for (int64_t j = 0; j < m.moe.router_group_top_k; ++j) open[static_cast<std::size_t>(groups[static_cast<std::size_t>(j)])] = true;
    std::stable_partition(ids.begin(), ids.end(), [&](int64_t e) { return open[static_cast<std::size_t>(e / per)]; });
    const auto candidates = ids.begin() + m.moe.router_group_top_k * per;
    std::partial_sort(ids.begin(), ids.begin() + top, candidates, better);
    return;
  }
  std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), better);
}

// Router, top-k and the dispatch order; fills probs (the scores p), moe_route, moe_gate, moe_order,
// moe_offsets and the load-balancing loss.
template <typename S, typename K>
void moe_route(K& k, const spec::Model& m, const UnitSlots& s, const S* params, UnitCacheT<S, K>& c) {
  const RoutedRows own = routed_rows(s, c.dims.rows());
  const int64_t n = own.n, h = m.hidden, E = m.moe.experts, top = m.moe.top_k;
  const bool sigmoid = m.moe.router == "sigmoid";
  resize(c.probs, n * E);
  k.linear_forward(c.a.data() + own.row0 * h, params + s.router, s.router_logit_bias >= 0 ? params + s.router_logit_bias : static_cast<const S*>(nullptr),
                   c.probs.data(), n, h, E);
  resize(c.moe_route, n * top);
  resize(c.moe_gate, n * top);
  std::vector<int64_t> ids;
  std::vector<double> sel(static_cast<std::size_t>(E));
  for (int64_t i = 0; i < n; ++i) {
    S* z = c.probs.data() + i * E;
    if (sigmoid) {
      for (int64_t e = 0; e < E; ++e) z[e] = static_cast<S>(1.0 / (1.0 + std::exp(-static_cast<double>(z[e]))));
    } else {
      const S mx = *std::max_element(z, z + E);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(z[e] - mx));
      for (int64_t e = 0; e < E; ++e) z[e] = static_cast<S>(std::exp(static_cast<double>(z[e] - mx)) / sum);
    }
    for (int64_t e = 0; e < E; ++e) {
      sel[static_cast<std::size_t>(e)] = static_cast<double>(z[e]) + (s.router_bias >= 0 ? static_cast<double>(params[s.router_bias + e]) : 0.0);
    }
    select_top_k(m, sel.data(), ids);
    double chosen = sigmoid ? 1e-20 : 0.0;
    for (int64_t j = 0; j < top; ++j) chosen += static_cast<double>(z[ids[static_cast<std::size_t>(j)]]);
    for (int64_t j = 0; j < top; ++j) {
      const int64_t e = ids[static_cast<std::size_t>(j)];
      c.moe_route[static_cast<std::size_t>(i * top + j)] = static_cast<int32_t>(e);
      const double g = static_cast<double>(z[e]);
      c.moe_gate[static_cast<std::size_t>(i * top + j)] = static_cast<S>((m.moe.normalize_top_k ? g / chosen : g) * m.moe.router_scaling);
    }
  }
  // counting sort by expert, stable in the copy index
  resize(c.moe_offsets, E + 1);
  std::fill(c.moe_offsets.begin(), c.moe_offsets.end(), 0);
  for (int32_t e : c.moe_route) ++c.moe_offsets[static_cast<std::size_t>(e + 1)];
  for (int64_t e = 0; e < E; ++e) c.moe_offsets[static_cast<std::size_t>(e + 1)] += c.moe_offsets[static_cast<std::size_t>(e)];
  resize(c.moe_order, n * top);
  std::vector<int32_t> next(c.moe_offsets.begin(), c.moe_offsets.end() - 1);
  for (int64_t r = 0; r < n * top; ++r) {
    const int32_t e = c.moe_route[static_cast<std::size_t>(r)];
    c.moe_order[static_cast<std::size_t>(next[static_cast<std::size_t>(e)]++)] = static_cast<int32_t>(r);
  }
  // the balancing loss: its own scores' top k per row, their counts and the scores' sums
  c.moe_loss_counts.assign(static_cast<std::size_t>(E), 0.0);
  c.moe_loss_tokens = static_cast<double>(n);
  ids.resize(static_cast<std::size_t>(E));
  std::vector<double> score_sum(static_cast<std::size_t>(E), 0.0);
  auto better = [&](int64_t a, int64_t b) { return sel[a] > sel[b] || (sel[a] == sel[b] && a < b); };
  for (int64_t i = 0; i < n; ++i) {
    const S* p = c.probs.data() + i * E;
    double norm = 1;
    if (sigmoid) {
      norm = 1e-20;
      for (int64_t e = 0; e < E; ++e) norm += static_cast<double>(p[e]);
    }
    for (int64_t e = 0; e < E; ++e) {
      sel[static_cast<std::size_t>(e)] = static_cast<double>(p[e]) / norm;
      score_sum[static_cast<std::size_t>(e)] += sel[static_cast<std::size_t>(e)];
    }
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), better);
    for (int64_t j = 0; j < top; ++j) c.moe_loss_counts[static_cast<std::size_t>(ids[static_cast<std::size_t>(j)])] += 1;
  }
  double aux = 0;
  for (int64_t e = 0; e < E; ++e) aux += score_sum[static_cast<std::size_t>(e)] * c.moe_loss_counts[static_cast<std::size_t>(e)];
  c.moe_aux_loss = aux * static_cast<double>(E) / (static_cast<double>(top) * static_cast<double>(n) * static_cast<double>(n));
}

// ---- the phases (expert parallelism runs them around its all-to-alls; ep 1 composes them) -------
// Source side (the rank's own tokens): route (norm, router, top-k, the copies sorted by expert:
// moe_x, the send rows, and the shared experts), combine (the experts' outputs for those rows back,
// in that order: y), backward_send (d of those outputs: moe_dy; the router's and the shared
// experts' part of d a), backward_finish (the copies' input gradients back: d a complete, the norm).
// Expert side (the rows its experts receive, from each source rank, by local expert): experts and
// experts_backward over them in expert-major order (moe_eperm maps an expert-major row to its
// received row).

// The expert-major order of received rows: `counts` [sources x local experts] rows from each source,
// each source's by local expert.
template <typename S, typename K>
void moe_expert_order(UnitCacheT<S, K>& c, std::span<const int64_t> counts, int64_t local_experts) {
  const int64_t sources = static_cast<int64_t>(counts.size()) / local_experts;
  std::vector<int64_t> start(counts.size());  // the received row of (source, expert)'s first
  int64_t row = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    start[i] = row;
    row += counts[i];
  }
  resize(c.moe_eperm, row);
  resize(c.moe_eoffsets, local_experts + 1);
  int64_t r = 0;
  for (int64_t e = 0; e < local_experts; ++e) {
    c.moe_eoffsets[static_cast<std::size_t>(e)] = static_cast<int32_t>(r);
    for (int64_t src = 0; src < sources; ++src) {
      const std::size_t i = static_cast<std::size_t>(src * local_experts + e);
      for (int64_t j = 0; j < counts[i]; ++j) c.moe_eperm[static_cast<std::size_t>(r++)] = static_cast<int32_t>(start[i] + j);
    }
  }
  c.moe_eoffsets[static_cast<std::size_t>(local_experts)] = static_cast<int32_t>(r);
}

template <typename C>
int64_t expert_rows(const C& c, int64_t e, int64_t& r0) {
  r0 = c.moe_eoffsets[static_cast<std::size_t>(e)];
  return c.moe_eoffsets[static_cast<std::size_t>(e + 1)] - r0;
}

// f(e, first row, rows, e's linears) for each local expert with rows (expert-major order).
template <typename C, typename F>
void for_each_expert(const C& c, const UnitSlots& s, F&& f) {
  for (int64_t e = 0; e < s.experts; ++e) {
    int64_t r0 = 0;
    const int64_t rows = expert_rows(c, e, r0);
    if (rows > 0) f(r0, rows, expert_slices(s, e));
  }
}

template <typename S, typename K>
void moe_route_phase(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* x, UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, top = m.moe.top_k;
  const RoutedRows own = routed_rows(s, n);
  const int64_t R = own.n * top;
  norm_forward(k, m, s, params, x, c);
  moe_route(k, m, s, params, c);
  resize(c.moe_x, R * h);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t token = own.row0 + c.moe_order[static_cast<std::size_t>(r)] / top;
    std::copy_n(c.a.data() + token * h, h, c.moe_x.data() + r * h);
  }
  if (s.shared_ffn > 0) {
    const int64_t fs = s.shared_ffn;
    resize(c.sh_pre, n * fs);
    resize(c.sh_mid, n * fs);
    if (spec::gated(m.mlp)) resize(c.sh_pre2, n * fs);
    resize(c.sh_out, n * h);
    // over the whole rows; tp > 1: this rank's slice of the width, the row-parallel bias on tp rank 0
    mlp_core_forward(k, m, std::span<const LinearSlot>(s.shared_linears), params, c.a.data(), c.sh_pre.data(),
                     c.sh_pre2.data(), c.sh_mid.data(), c.sh_out.data(), n, h, fs, s.adds_residual);
    if (s.shared_gate >= 0) {
      resize(c.sh_gate, n);
      k.linear_forward(c.a.data(), params + s.shared_gate, static_cast<const S*>(nullptr), c.sh_gate.data(), n, h, 1);
      for (S& v : c.sh_gate) v = static_cast<S>(1.0 / (1.0 + std::exp(-static_cast<double>(v))));
    }
  }
}

// The local experts over received rows `in` (counts: sources x local experts); `out` in the
// received order.
template <typename S, typename K>
void moe_experts_phase(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* in,
                       std::span<const int64_t> counts, S* out, UnitCacheT<S, K>& c) {
  const int64_t h = m.hidden, f = s.expert_ffn;
  moe_expert_order(c, counts, s.experts);
  const int64_t R = static_cast<int64_t>(c.moe_eperm.size());
  resize(c.moe_xe, R * h);
  for (int64_t r = 0; r < R; ++r) std::copy_n(in + c.moe_eperm[static_cast<std::size_t>(r)] * h, h, c.moe_xe.data() + r * h);
  resize(c.pre, R * f);
  resize(c.mid, R * f);
  if (spec::gated(m.mlp)) resize(c.pre2, R * f);
  typename K::template Vec<S> ye;
  resize(ye, R * h);
  for_each_expert(c, s, [&](int64_t r0, int64_t rows, const std::vector<LinearSlot>& l) {
    mlp_core_forward(k, m, std::span<const LinearSlot>(l), params, c.moe_xe.data() + r0 * h, c.pre.data() + r0 * f,
                     c.pre2.empty() ? nullptr : c.pre2.data() + r0 * f, c.mid.data() + r0 * f, ye.data() + r0 * h, rows, h,
                     f, true);
  });
  for (int64_t r = 0; r < R; ++r) std::copy_n(ye.data() + r * h, h, out + c.moe_eperm[static_cast<std::size_t>(r)] * h);
}

// y = x + sum_j g_j · (the experts' output rows, send order) + the shared experts; keeps the rows.
template <typename S, typename K>
void moe_combine_phase(K& k, const spec::Model& m, const UnitSlots& s, const S* x, const S* rows, S* y, UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, top = m.moe.top_k;
  const RoutedRows own = routed_rows(s, n);
  const int64_t R = own.n * top;
  k.assign(c.moe_y, rows, R * h);
  // tp > 1 with shared experts: this rank's part of the whole rows' output, summed over tp by the
  // Program's reduce-scatter — the residual once (tp rank 0), the routed copies of its own rows,
  // its slice of the shared experts' output
  if (s.adds_residual || own.n == n) {
    std::copy_n(x, n * h, y);
  } else {
    std::fill_n(y, n * h, S(0));
  }
  for (int64_t r = 0; r < R; ++r) {
    const int64_t copy = c.moe_order[static_cast<std::size_t>(r)];
    const S g = c.moe_gate[static_cast<std::size_t>(copy)];
    S* out = y + (own.row0 + copy / top) * h;
    const S* ye = rows + r * h;
    for (int64_t i = 0; i < h; ++i) out[i] += g * ye[i];
  }
  if (s.shared_ffn > 0) {
    for (int64_t i = 0; i < n; ++i) {
      const S g = s.shared_gate >= 0 ? c.sh_gate[static_cast<std::size_t>(i)] : S(1);
      for (int64_t j = 0; j < h; ++j) y[i * h + j] += g * c.sh_out[static_cast<std::size_t>(i * h + j)];
    }
  }
  k.round(y, n * h);  // the unit's stored output
}

// From dy: d(expert outputs) in send order (moe_dy), and d a's router and shared-expert parts.
template <typename S, typename K>
void moe_backward_send_phase(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* dy,
                             UnitCacheT<S, K>& c) {
  const int64_t rows = c.dims.rows(), h = m.hidden, E = m.moe.experts, top = m.moe.top_k;
  const RoutedRows own = routed_rows(s, rows);
  int64_t n = own.n;  // the routed rows; the shared experts' below take them all
  const int64_t R = n * top;
  k.assign(c.d_out, dy, rows * h);
  resize(c.moe_dy, R * h);
  std::vector<double> d_gate(static_cast<std::size_t>(R), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t copy = c.moe_order[static_cast<std::size_t>(r)];
    const S g = c.moe_gate[static_cast<std::size_t>(copy)];
    const S* d = dy + (own.row0 + copy / top) * h;
    const S* ye = c.moe_y.data() + r * h;
    S* out = c.moe_dy.data() + r * h;
    double dot = 0;
    for (int64_t i = 0; i < h; ++i) {
      out[i] = g * d[i];
      dot += static_cast<double>(d[i]) * static_cast<double>(ye[i]);
    }
    d_gate[static_cast<std::size_t>(copy)] = dot;
  }
  k.round(c.moe_dy.data(), R * h);
  resize(c.d_a, rows * h);
  std::fill(c.d_a.begin(), c.d_a.end(), S(0));
  // the router: the gates' gradient through the scaling and the top-k normalisation, the balancing
  // loss, the softmax (or the sigmoid)
  resize(c.moe_dlogits, n * E);
  std::vector<double> dp(static_cast<std::size_t>(E));
  const bool sigmoid = m.moe.router == "sigmoid";
  const double rho = m.moe.router_scaling;
  const double T = c.moe_loss_tokens;
  const double scale = T > 0 ? c.moe_aux_grad * static_cast<double>(E) / (static_cast<double>(top) * T * T) : 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const S* p = c.probs.data() + i * E;
    // the balancing loss's a_e = d aux / d s[n, e], through the sigmoid scores' normalisation
    for (int64_t e = 0; e < E; ++e) dp[static_cast<std::size_t>(e)] = scale * c.moe_loss_counts[static_cast<std::size_t>(e)];
    if (sigmoid && c.moe_aux_grad != 0) {
      double norm = 1e-20, weighted_a = 0;
      for (int64_t e = 0; e < E; ++e) norm += static_cast<double>(p[e]);
      for (int64_t e = 0; e < E; ++e) weighted_a += dp[static_cast<std::size_t>(e)] * static_cast<double>(p[e]) / norm;
      for (int64_t e = 0; e < E; ++e) dp[static_cast<std::size_t>(e)] = (dp[static_cast<std::size_t>(e)] - weighted_a) / norm;
    }
    double chosen = sigmoid ? 1e-20 : 0.0, weighted = 0;
    for (int64_t j = 0; j < top; ++j) {
      const std::size_t copy = static_cast<std::size_t>(i * top + j);
      chosen += static_cast<double>(p[c.moe_route[copy]]);
      weighted += d_gate[copy] * static_cast<double>(c.moe_gate[copy]) / rho;
    }
    for (int64_t j = 0; j < top; ++j) {
      const std::size_t copy = static_cast<std::size_t>(i * top + j);
      dp[static_cast<std::size_t>(c.moe_route[copy])] += rho * (m.moe.normalize_top_k ? (d_gate[copy] - weighted) / chosen : d_gate[copy]);
    }
    S* dz = c.moe_dlogits.data() + i * E;
    if (sigmoid) {
      for (int64_t e = 0; e < E; ++e) {
        const double pe = static_cast<double>(p[e]);
        dz[e] = static_cast<S>(dp[static_cast<std::size_t>(e)] * pe * (1.0 - pe));
      }
    } else {
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += dp[static_cast<std::size_t>(e)] * static_cast<double>(p[e]);
      for (int64_t e = 0; e < E; ++e) dz[e] = static_cast<S>(static_cast<double>(p[e]) * (dp[static_cast<std::size_t>(e)] - dot));
    }
  }
  k.round(c.moe_dlogits.data(), n * E);
  k.linear_backward_input(c.moe_dlogits.data(), params + s.router, c.d_a.data() + own.row0 * h, n, h, E, true);
  if (s.shared_ffn > 0) {  // over the whole rows (tp > 1: this rank's part of d a, summed over tp)
    const int64_t fs = s.shared_ffn;
    n = rows;
    resize(c.sh_dout, n * h);
    if (s.shared_gate >= 0) {
      resize(c.sh_dgate, n);
      for (int64_t i = 0; i < n; ++i) {
        const double g = static_cast<double>(c.sh_gate[static_cast<std::size_t>(i)]);
        double dot = 0;
        for (int64_t j = 0; j < h; ++j) {
          const std::size_t at_ij = static_cast<std::size_t>(i * h + j);
          c.sh_dout[at_ij] = static_cast<S>(g * static_cast<double>(dy[i * h + j]));
          dot += static_cast<double>(dy[i * h + j]) * static_cast<double>(c.sh_out[at_ij]);
        }
        c.sh_dgate[static_cast<std::size_t>(i)] = static_cast<S>(dot * g * (1.0 - g));
      }
      k.round(c.sh_dout.data(), n * h);
      k.linear_backward_input(c.sh_dgate.data(), params + s.shared_gate, c.d_a.data(), n, h, 1, true);
    } else {
      std::copy_n(dy, n * h, c.sh_dout.data());
    }
    resize(c.sh_d_pre, n * fs);
    if (spec::gated(m.mlp)) resize(c.sh_d_pre2, n * fs);
    typename K::template Vec<S> sh_d_mid;
    resize(sh_d_mid, n * fs);
    mlp_core_backward_input(k, m, std::span<const LinearSlot>(s.shared_linears), params, c.sh_dout.data(), c.sh_pre.data(),
                            c.sh_pre2.data(), sh_d_mid.data(), c.sh_d_pre.data(), c.sh_d_pre2.data(), c.d_a.data(), n, h,
                            fs, true);
  }
}

// The local experts' backward over received d(output) rows (received order, as the forward's):
// `out` their input gradients, received order; keeps what the weight gradients need.
template <typename S, typename K>
void moe_experts_backward_phase(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* in, S* out,
                                UnitCacheT<S, K>& c) {
  const int64_t h = m.hidden, f = s.expert_ffn, R = static_cast<int64_t>(c.moe_eperm.size());
  resize(c.moe_dye, R * h);
  for (int64_t r = 0; r < R; ++r) std::copy_n(in + c.moe_eperm[static_cast<std::size_t>(r)] * h, h, c.moe_dye.data() + r * h);
  resize(c.d_pre, R * f);
  if (spec::gated(m.mlp)) resize(c.d_pre2, R * f);
  typename K::template Vec<S> d_mid, d_x;
  resize(d_mid, R * f);
  resize(d_x, R * h);
  for_each_expert(c, s, [&](int64_t r0, int64_t rows, const std::vector<LinearSlot>& l) {
    mlp_core_backward_input(k, m, std::span<const LinearSlot>(l), params, c.moe_dye.data() + r0 * h, c.pre.data() + r0 * f,
                            c.pre2.empty() ? nullptr : c.pre2.data() + r0 * f, d_mid.data() + r0 * f, c.d_pre.data() + r0 * f,
                            c.d_pre2.empty() ? nullptr : c.d_pre2.data() + r0 * f, d_x.data() + r0 * h, rows, h, f, false);
  });
  for (int64_t r = 0; r < R; ++r) std::copy_n(d_x.data() + r * h, h, out + c.moe_eperm[static_cast<std::size_t>(r)] * h);
}

// d a += the copies' input gradients (send order), then the norm's backward: dx.
template <typename S, typename K>
void moe_backward_finish_phase(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* rows, S* dx,
                               UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden, top = m.moe.top_k;
  const RoutedRows own = routed_rows(s, n);
  const int64_t R = own.n * top;
  for (int64_t r = 0; r < R; ++r) {
    S* out = c.d_a.data() + (own.row0 + c.moe_order[static_cast<std::size_t>(r)] / top) * h;
    const S* in = rows + r * h;
    for (int64_t i = 0; i < h; ++i) out[i] += in[i];
  }
  k.round(c.d_a.data(), n * h);
  if (s.tp > 1 && s.shared_ffn > 0) {  // this rank's part of d_a: summed over tp, then finish_input_grad
    k.copy(dx, c.d_a.data(), n * h);
    return;
  }
  norm_backward_input(k, m, s, params, c.d_out.data(), dx, c);
}

// The weight gradients of the source side (router, shared experts) and of the expert side.
template <typename S, typename K>
void moe_source_weights(K& k, const spec::Model& m, const UnitSlots& s, S* grads, UnitCacheT<S, K>& c) {
  const int64_t n = c.dims.rows(), h = m.hidden;
  const RoutedRows own = routed_rows(s, n);
  linear_backward_weight(k, LinearSlot{s.router, s.router_logit_bias, h, m.moe.experts}, c.a.data() + own.row0 * h,
                         c.moe_dlogits.data(), grads, own.n);
  if (s.shared_ffn > 0) {
    mlp_core_backward_weight(k, m, std::span<const LinearSlot>(s.shared_linears), c.a.data(), c.sh_mid.data(),
                             c.sh_dout.data(), c.sh_d_pre.data(), c.sh_d_pre2.data(), grads, n);
    if (s.shared_gate >= 0) linear_backward_weight(k, LinearSlot{s.shared_gate, -1, h, 1}, c.a.data(), c.sh_dgate.data(), grads, n);
  }
}

template <typename S, typename K>
void moe_expert_weights(K& k, const spec::Model& m, const UnitSlots& s, S* grads, UnitCacheT<S, K>& c) {
  const int64_t h = m.hidden, f = s.expert_ffn;
  for_each_expert(c, s, [&](int64_t r0, int64_t rows, const std::vector<LinearSlot>& l) {
    mlp_core_backward_weight(k, m, std::span<const LinearSlot>(l), c.moe_xe.data() + r0 * h, c.mid.data() + r0 * f,
                             c.moe_dye.data() + r0 * h, c.d_pre.data() + r0 * f,
                             c.d_pre2.empty() ? nullptr : c.d_pre2.data() + r0 * f, grads, rows);
  });
}

// ---- ep 1: the phases composed on one rank --------------------------------------------------------

// The rows of each expert of the route, as one source's counts.
template <typename C>
std::vector<int64_t> routed_counts(const C& c, int64_t experts) {
  std::vector<int64_t> out(static_cast<std::size_t>(experts));
  for (int64_t e = 0; e < experts; ++e) out[static_cast<std::size_t>(e)] = static_cast<int64_t>(expert_count(c, e));
  return out;
}

template <typename S, typename K>
void moe_forward(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* x, S* y, UnitCacheT<S, K>& c) {
  if constexpr (!K::kHost) {
    moe_on_device();
  } else {
    if (s.experts != m.moe.experts || s.expert_ffn != m.moe.ffn_hidden) {
      throw std::logic_error("a MoE unit with ep > 1 or etp > 1 runs in phases (moe_dispatch ...)");
    }
    moe_route_phase(k, m, s, params, x, c);
    typename K::template Vec<S> rows;
    resize(rows, static_cast<int64_t>(c.moe_x.size()));
    const std::vector<int64_t> counts = routed_counts(c, m.moe.experts);
    moe_experts_phase(k, m, s, params, c.moe_x.data(), std::span<const int64_t>(counts), rows.data(), c);
    decltype(c.moe_x)().swap(c.moe_x);  // the experts' side keeps its copy (moe_xe)
    moe_combine_phase(k, m, s, x, rows.data(), y, c);
  }
}

template <typename S, typename K>
void moe_backward_input(K& k, const spec::Model& m, const UnitSlots& s, const S* params, const S* dy, S* dx,
                        UnitCacheT<S, K>& c) {
  if constexpr (!K::kHost) {
    moe_on_device();
  } else {
    moe_backward_send_phase(k, m, s, params, dy, c);
    typename K::template Vec<S> rows;
    resize(rows, static_cast<int64_t>(c.moe_dy.size()));
    moe_experts_backward_phase(k, m, s, params, c.moe_dy.data(), rows.data(), c);
    decltype(c.moe_dy)().swap(c.moe_dy);  // likewise (moe_dye)
    moe_backward_finish_phase(k, m, s, params, rows.data(), dx, c);
  }
}

template <typename S, typename K>
void moe_backward_weight(K& k, const spec::Model& m, const UnitSlots& s, S* grads, UnitCacheT<S, K>& c) {
  if constexpr (!K::kHost) {
    moe_on_device();
  } else {
    moe_source_weights(k, m, s, grads, c);
    moe_expert_weights(k, m, s, grads, c);
  }
}

}  // namespace stagecraft::executor::detail
