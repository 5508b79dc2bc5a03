// The mixture-of-experts unit (executor/model/moe_impl.hpp) against what can be derived by hand:
//   * experts with identical weights and renormalised gates (sum_j g_j = 1) compute the dense MLP
//     of those weights, whatever the router picks: y_moe = y_dense; the router's gradient is 0
//     (d g_j = dy . y_e is the same D for every j, so d p_j = (D − sum_i D g_i) / S = 0) and the
//     experts' weight gradients sum to the dense MLP's;
//   * without renormalisation the gates are the k chosen softmax values: a zero router gives
//     p = 1/E everywhere, the ties go to experts 0 .. k−1, and y − x = (k / E) · (y_dense − x);
//   * that uniform router's balancing loss: c_e = N for e < k (0 otherwise), P_e = N / E, so
//     aux = E / (k N²) · k · (N / E) · N = 1.
#include <set>
#include <span>

#include <gtest/gtest.h>

#include "core/spec/model.hpp"
#include "executor/model/layers.hpp"
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

}  // namespace
}  // namespace stagecraft::executor
