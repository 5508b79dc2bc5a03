// The mixture-of-experts unit (executor/model/moe_impl.hpp) against what can be derived by hand:
//   * experts with identical weights and renormalised gates (sum_j g_j = 1) compute the dense MLP
//     of those weights, whatever the router picks: y_moe = y_dense; the router's gradient is 0
//     (d g_j = dy . y_e is the same D for every j, so d p_j = (D − sum_i D g_i) / S = 0) and the
//     experts' weight gradients sum to the dense MLP's;
//   * without renormalisation the gates are the k chosen softmax values: a zero router gives
//     p = 1/E everywhere, the ties go to experts 0 .. k−1, and y − x = (k / E) · (y_dense − x);
//   * that uniform router's balancing loss: c_e = N for e < k (0 otherwise), P_e = N / E, so
//     aux = E / (k N²) · k · (N / E) · N = 1;
//   * expert parallelism's phases (ep 2, the all-to-alls done by hand between two layers) give each
//     rank's y and dx of the one-rank unit, each rank's experts the one-rank unit's gradients of
//     those experts, and the ranks' router and norm gradients summed the one-rank unit's.
#include <set>
#include <span>

#include <gtest/gtest.h>

#include "core/spec/model.hpp"
#include "executor/model/layers.hpp"
#include "executor/model/moe_impl.hpp"
#include "executor/model/params.hpp"
#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

constexpr int64_t kExperts = 4, kTop = 2;

spec::Model moe_model(bool normalize) {
  spec::Model m = test::tiny_llama();
  m.name = "tiny-moe";
  m.moe.experts = kExperts, m.moe.top_k = kTop, m.moe.ffn_hidden = m.ffn_hidden;
  m.moe.normalize_top_k = normalize;
  return m;
}

// Block 0's MLP unit (unit 2) of `m`, its layout alone.
struct Unit {
  ParamLayout layout;
  Layer<double> layer;
  explicit Unit(const spec::Model& m) : layout(m, 2, 3), layer(layout, 2) {}
  const TensorSlot& t(const std::string& name) const { return layout.find("block.0.mlp." + name); }
};

// The MoE unit's parameters with every expert a copy of the dense unit's MLP (same norm), the
// router given by `router_scale` times random values.
std::vector<double> copy_dense_into_experts(const Unit& dense, const std::vector<double>& dp, const Unit& moe,
                                            double router_scale) {
  std::vector<double> p = test::random_params<double>(moe.layout, 7);
  for (double& v : std::span<double>(p).subspan(static_cast<std::size_t>(moe.t("router.w").offset),
                                                 static_cast<std::size_t>(moe.t("router.w").size()))) {
    v *= router_scale;
  }
  auto copy = [&](const TensorSlot& from, const TensorSlot& to, int64_t at) {
    std::copy_n(dp.begin() + from.offset, from.size(), p.begin() + to.offset + at);
  };
  copy(dense.t("norm2.w"), moe.t("norm2.w"), 0);
  for (const char* l : {"gate", "up", "down"}) {
    const TensorSlot& d = dense.t(std::string(l) + ".w");
    for (int64_t e = 0; e < kExperts; ++e) copy(d, moe.t(std::string("experts.") + l + ".w"), e * d.size());
  }
  return p;
}

TEST(MoeUnit, IdenticalRenormalisedExpertsAreTheDenseMlp) {
  const spec::Model dm = test::tiny_llama();
  const spec::Model mm = moe_model(true);
  const Unit dense(dm), moe(mm);
  ASSERT_EQ(moe.layer.kind(), UnitKind::kMoe);
  const std::vector<double> dp = test::random_params<double>(dense.layout, 3);
  const std::vector<double> mp = copy_dense_into_experts(dense, dp, moe, 1.0);
  const Dims d = test::tiny_dims();
  const int64_t n = d.rows() * dm.hidden;
  const std::vector<double> x = test::random_vector<double>(n, 5, 1.0), dy = test::random_vector<double>(n, 6, 1.0);
  const test::Tokens tokens = test::random_tokens(dm, d, 1);
  std::vector<double> yd(static_cast<std::size_t>(n)), ym(static_cast<std::size_t>(n));
  UnitCache<double> cd, cm;
  dense.layer.forward(tokens.view(), dp, x, yd, cd);
  moe.layer.forward(tokens.view(), mp, x, ym, cm);
  EXPECT_LT(test::max_rel(ym, yd), 1e-12);
  // the router picked more than one pair of experts (else the check would not exercise the routing)
  std::set<std::pair<int32_t, int32_t>> pairs;
  for (int64_t i = 0; i < d.rows(); ++i) pairs.insert({cm.moe_route[2 * i], cm.moe_route[2 * i + 1]});
  EXPECT_GT(pairs.size(), 1u);

  std::vector<double> dxd(static_cast<std::size_t>(n)), dxm(static_cast<std::size_t>(n));
  std::vector<double> gd(dp.size(), 0.0), gm(mp.size(), 0.0);
  dense.layer.backward(dp, dy, dxd, gd, cd);
  moe.layer.backward(mp, dy, dxm, gm, cm);
  EXPECT_LT(test::max_rel(dxm, dxd), 1e-12);
  const TensorSlot& r = moe.t("router.w");
  for (int64_t i = r.offset; i < r.offset + r.size(); ++i) EXPECT_NEAR(gm[static_cast<std::size_t>(i)], 0.0, 1e-12);
  for (const char* l : {"gate", "up", "down"}) {
    const TensorSlot& dt = dense.t(std::string(l) + ".w");
    const TensorSlot& mt = moe.t(std::string("experts.") + l + ".w");
    std::vector<double> sum(static_cast<std::size_t>(dt.size()), 0.0), want(gd.begin() + dt.offset, gd.begin() + dt.offset + dt.size());
    for (int64_t e = 0; e < kExperts; ++e) {
      for (int64_t i = 0; i < dt.size(); ++i) sum[static_cast<std::size_t>(i)] += gm[static_cast<std::size_t>(mt.offset + e * dt.size() + i)];
    }
    EXPECT_LT(test::max_rel(sum, want), 1e-12) << l;
  }
}

TEST(MoeUnit, UniformRouterWithoutRenormalisingScalesTheMlpByKOverE) {
  const spec::Model dm = test::tiny_llama();
  const spec::Model mm = moe_model(false);
  const Unit dense(dm), moe(mm);
  const std::vector<double> dp = test::random_params<double>(dense.layout, 3);
  const std::vector<double> mp = copy_dense_into_experts(dense, dp, moe, 0.0);  // a zero router: p = 1/E
  const Dims d = test::tiny_dims();
  const int64_t n = d.rows() * dm.hidden, rows = d.rows();
  const std::vector<double> x = test::random_vector<double>(n, 5, 1.0);
  const test::Tokens tokens = test::random_tokens(dm, d, 1);
  std::vector<double> yd(static_cast<std::size_t>(n)), ym(static_cast<std::size_t>(n));
  UnitCache<double> cd, cm;
  dense.layer.forward(tokens.view(), dp, x, yd, cd);
  moe.layer.forward(tokens.view(), mp, x, ym, cm);
  std::vector<double> want(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < want.size(); ++i) {
    want[i] = static_cast<double>(kTop) / kExperts * (yd[i] - x[i]);
    got[i] = ym[i] - x[i];
  }
  EXPECT_LT(test::max_rel(got, want), 1e-12);
  // ties to the lower experts: 0 .. k−1 take every token
  for (int64_t e = 0; e <= kExperts; ++e) {
    EXPECT_EQ(cm.moe_offsets[static_cast<std::size_t>(e)], std::min(e, kTop) * rows) << "expert " << e;
  }
  EXPECT_NEAR(cm.moe_aux_loss, 1.0, 1e-12);
}

// The balancing loss counts its own top k of the scores (Megatron-Core
// compute_routing_scores_for_aux_loss), not the routing the expert biases shift. A sigmoid router
// with zero weights: sigma = 1/2 for every expert, so the scores s = (1/2) / (E/2) = 1/E tie and
// the loss's top k are experts 0 .. k-1 (c_e = N there, 0 elsewhere), P_e = N/E, and
// aux = E / (k N^2) * k * (N/E) * N = 1; the biases (+1 on the last k experts) send every copy to
// experts E-k .. E-1 instead.
TEST(MoeUnit, BalancingLossCountsItsOwnTopKOfTheScoresNotTheBiasedRouting) {
  spec::Model m = moe_model(true);
  m.moe.router = "sigmoid", m.moe.router_bias = true;
  const ParamLayout layout(m, 2, 3);
  const Layer<double> layer(layout, 2);
  std::vector<double> p = test::random_params<double>(layout, 7);
  const TensorSlot& w = layout.find("block.0.mlp.router.w");
  const TensorSlot& b = layout.find("block.0.mlp.router.b");
  std::fill_n(p.begin() + w.offset, w.size(), 0.0);
  for (int64_t e = 0; e < kExperts; ++e) p[static_cast<std::size_t>(b.offset + e)] = e >= kExperts - kTop ? 1.0 : 0.0;
  const Dims d = test::tiny_dims();
  const int64_t n = d.rows() * m.hidden, rows = d.rows();
  const std::vector<double> x = test::random_vector<double>(n, 5, 1.0);
  const test::Tokens tokens = test::random_tokens(m, d, 1);
  std::vector<double> y(static_cast<std::size_t>(n));
  UnitCache<double> c;
  layer.forward(tokens.view(), p, x, y, c);
  for (int64_t e = 0; e < kExperts; ++e) {
    const double routed = c.moe_offsets[static_cast<std::size_t>(e + 1)] - c.moe_offsets[static_cast<std::size_t>(e)];
    EXPECT_EQ(routed, e >= kExperts - kTop ? rows : 0) << "expert " << e;
    EXPECT_EQ(c.moe_loss_counts[static_cast<std::size_t>(e)], e < kTop ? rows : 0) << "expert " << e;
  }
  EXPECT_EQ(c.moe_loss_tokens, static_cast<double>(rows));
  EXPECT_NEAR(c.moe_aux_loss, 1.0, 1e-12);
}

// Rows [first, first + count) of a [rows x h] buffer.
std::vector<double> rows_of(const std::vector<double>& v, int64_t first, int64_t count, int64_t h) {
  return {v.begin() + first * h, v.begin() + (first + count) * h};
}

// `uniform`: a zero router, so every copy goes to experts 0 and 1 (ties to the lower expert), both
// on rank 0: rank 1's experts receive no row at all.
void expect_expert_parallel_phases_equal_one_rank(bool uniform) {
  const spec::Model m = moe_model(true);
  const int64_t h = m.hidden, ep = 2, local = kExperts / ep;
  const ParamLayout whole(m, 2, 3);
  const std::vector<ParamLayout> layouts = {ParamLayout(m, 2, 3, 1, 0, ep, 0), ParamLayout(m, 2, 3, 1, 0, ep, 1)};
  // the seeded initialisation depends on the element's place in the unsharded tensor: the ranks'
  // values are the one-rank unit's (scaled so that the routing is far from uniform)
  auto init = [&](const ParamLayout& l) {
    std::vector<double> p(static_cast<std::size_t>(l.size()));
    l.init<double>(p, 5);
    for (double& v : p) v *= 15;
    const TensorSlot& router = l.find("block.0.mlp.router.w");
    if (uniform) std::fill_n(p.begin() + router.offset, router.size(), 0.0);
    return p;
  };
  const std::vector<double> pw = init(whole);
  const std::vector<std::vector<double>> pr = {init(layouts[0]), init(layouts[1])};
  const Layer<double> one(whole, 2);
  const std::vector<Layer<double>> ranks = {Layer<double>(layouts[0], 2), Layer<double>(layouts[1], 2)};
  const Dims d = test::tiny_dims();
  const int64_t n = d.rows() * h;
  const test::Tokens tokens = test::random_tokens(m, d, 1);
  TokenBatch batch = tokens.view();
  batch.moe_aux_grad = 0.3;
  std::vector<std::vector<double>> x, dy, y_ref, dx_ref;
  std::vector<double> g_ref(pw.size(), 0.0);
  for (int64_t r = 0; r < ep; ++r) {
    x.push_back(test::random_vector<double>(n, static_cast<uint32_t>(10 + r), 1.0));
    dy.push_back(test::random_vector<double>(n, static_cast<uint32_t>(20 + r), 1.0));
    UnitCache<double> c;
    std::vector<double> y(static_cast<std::size_t>(n)), dx(static_cast<std::size_t>(n));
    one.forward(batch, pw, x.back(), y, c);
    one.backward(pw, dy.back(), dx, g_ref, c);
    y_ref.push_back(y);
    dx_ref.push_back(dx);
  }
  // The all-to-all by hand: block[src][dst] = src's rows for dst's experts; dst receives them by src.
  std::vector<UnitCache<double>> caches(2);
  std::vector<std::vector<int64_t>> sent(2, std::vector<int64_t>(2)), counts(2, std::vector<int64_t>(ep * local));
  std::vector<std::vector<double>> send(2);
  for (int64_t r = 0; r < ep; ++r) {
    std::vector<int64_t> per_expert(kExperts);
    send[r].resize(static_cast<std::size_t>(ranks[r].moe_rows(d) * h));
    ranks[r].moe_dispatch(batch, pr[r], x[r], send[r], per_expert, caches[r]);
    for (int64_t e = 0; e < kExperts; ++e) {
      sent[r][e / local] += per_expert[e];
      counts[e / local][r * local + e % local] = per_expert[e];
    }
  }
  // to the experts (out) and back (in): a row block of src for dst starts after src's blocks for lower dst
  auto exchange = [&](const std::vector<std::vector<double>>& from, bool out) {
    std::vector<std::vector<double>> to(2);
    for (int64_t dst = 0; dst < ep; ++dst) {
      for (int64_t src = 0; src < ep; ++src) {
        int64_t first = 0;
        if (out) {
          for (int64_t j = 0; j < dst; ++j) first += sent[src][j];
          const std::vector<double> b = rows_of(from[src], first, sent[src][dst], h);
          to[dst].insert(to[dst].end(), b.begin(), b.end());
        } else {  // from[src] holds src's experts' rows by source rank; dst's block is the dst-th
          for (int64_t j = 0; j < dst; ++j) first += sent[j][src];
          const std::vector<double> b = rows_of(from[src], first, sent[dst][src], h);
          to[dst].insert(to[dst].end(), b.begin(), b.end());
        }
      }
    }
    return to;
  };
  const std::vector<std::vector<double>> received = exchange(send, true);
  std::vector<std::vector<double>> expert_out(2);
  for (int64_t j = 0; j < ep; ++j) {
    expert_out[j].resize(received[j].size());
    ranks[j].moe_experts(pr[j], received[j], counts[j], expert_out[j], caches[j]);
  }
  const std::vector<std::vector<double>> back = exchange(expert_out, false);
  std::vector<std::vector<double>> grads = {std::vector<double>(pr[0].size(), 0.0), std::vector<double>(pr[1].size(), 0.0)};
  std::vector<std::vector<double>> dsend(2);
  for (int64_t r = 0; r < ep; ++r) {
    std::vector<double> y(static_cast<std::size_t>(n));
    ranks[r].moe_combine(back[r], y, caches[r]);
    EXPECT_LT(test::max_rel(y, y_ref[r]), 1e-12) << "rank " << r << " y";
    dsend[r].resize(send[r].size());
    ranks[r].moe_backward_send(pr[r], dy[r], dsend[r], caches[r]);
  }
  const std::vector<std::vector<double>> dreceived = exchange(dsend, true);
  std::vector<std::vector<double>> dexpert(2);
  for (int64_t j = 0; j < ep; ++j) {
    dexpert[j].resize(dreceived[j].size());
    ranks[j].moe_experts_backward(pr[j], dreceived[j], dexpert[j], grads[j], true, caches[j]);
  }
  const std::vector<std::vector<double>> dback = exchange(dexpert, false);
  for (int64_t r = 0; r < ep; ++r) {
    std::vector<double> dx(static_cast<std::size_t>(n));
    ranks[r].moe_backward_finish(pr[r], dback[r], dx, grads[r], true, caches[r]);
    EXPECT_LT(test::max_rel(dx, dx_ref[r]), 1e-12) << "rank " << r << " dx";
  }
  for (const TensorSlot& t : whole.tensors()) {
    std::vector<double> want(g_ref.begin() + t.offset, g_ref.begin() + t.offset + t.size()), got;
    if (t.expert) {  // rank j's band of the stacked rows
      for (int64_t j = 0; j < ep; ++j) {
        const TensorSlot& s = layouts[j].find(t.name);
        got.insert(got.end(), grads[j].begin() + s.offset, grads[j].begin() + s.offset + s.size());
      }
    } else {  // each rank's tokens' part
      got.assign(static_cast<std::size_t>(t.size()), 0.0);
      for (int64_t j = 0; j < ep; ++j) {
        const TensorSlot& s = layouts[j].find(t.name);
        for (int64_t i = 0; i < t.size(); ++i) got[static_cast<std::size_t>(i)] += grads[j][static_cast<std::size_t>(s.offset + i)];
      }
    }
    EXPECT_LT(test::max_rel(got, want), 1e-12) << t.name;
  }
  if (uniform) {
    EXPECT_TRUE(received[1].empty());
  }
}

// Group-limited selection (Megatron-Core group_limited_topk), worked by hand: 8 experts in 4 groups
// of 2, top 4 from the best 2 groups, a group scored by its top 4 / 2 = 2 scores. Scores
// 0.1 0.9 | 0.8 0.7 | 0.2 0.3 | 0.95 0.05: groups 1.0, 1.5, 0.5, 1.0 — group 1, then group 0 (tied
// with group 3 at 1.0: the lower). So experts 1, 2, 3, 0 in score order, and expert 6, the single
// best score, is not among them; without groups the top 4 are 6, 1, 2, 3.
TEST(MoeRouter, GroupLimitedSelectionTakesTheBestGroupsExperts) {
  spec::Model m;
  m.moe.experts = 8, m.moe.top_k = 4, m.moe.router_groups = 4, m.moe.router_group_top_k = 2;
  const std::vector<double> sel = {0.1, 0.9, 0.8, 0.7, 0.2, 0.3, 0.95, 0.05};
  std::vector<int64_t> ids;
  detail::select_top_k(m, sel.data(), ids);
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 4), (std::vector<int64_t>{1, 2, 3, 0}));
  m.moe.router_groups = m.moe.router_group_top_k = 0;
  detail::select_top_k(m, sel.data(), ids);
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 4), (std::vector<int64_t>{6, 1, 2, 3}));
}

// The bias step by hand: counts 6, 2, 4, 4 (mean 4), rate 1e-3: the overloaded expert's bias falls
// by 1e-3, the underloaded one's rises, the two at the mean stay.
TEST(MoeRouter, ExpertBiasMovesEachExpertTowardsTheMeanLoad) {
  const std::vector<double> counts = {6, 2, 4, 4};
  const std::vector<float> d = expert_bias_update(counts, 1e-3);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_FLOAT_EQ(d[0], -1e-3f);
  EXPECT_FLOAT_EQ(d[1], 1e-3f);
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(d[3], 0.0f);
}

TEST(MoeUnit, ExpertParallelPhasesEqualOneRank) { expect_expert_parallel_phases_equal_one_rank(false); }
TEST(MoeUnit, ExpertParallelRankWithoutRowsStillAnswers) { expect_expert_parallel_phases_equal_one_rank(true); }

}  // namespace
}  // namespace stagecraft::executor
