// AdamW on a flat shard against steps computed by hand, decay only where the layout says, and
// the local half of global-norm clipping.
#include "executor/model/adamw.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

// Step 1 with m = v = 0: m = (1-b1) g, v = (1-b2) g^2, so m_hat = g and v_hat = g^2 and the
// update is lr * g / (|g| + eps); decoupled decay first multiplies p by (1 - lr*wd).
TEST(AdamW, FirstTwoStepsMatchHandComputation) {
  const AdamWConfig cfg{0.1, 0.9, 0.95, 1e-8, 0.5};
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.2f, -0.4f, 0.0f}, m(3, 0.0f), v(3, 0.0f);
  const std::vector<Range> decayed = {{0, 2}};  // elements 0, 1 decay; element 2 (a bias) does not
  adamw_step(cfg, 1, {0, p, g, m, v}, decayed);
  // p0 = 1 * (1 - 0.05) - 0.1 * 0.2 / (0.2 + 1e-8)
  EXPECT_NEAR(p[0], 0.95 - 0.1 * 0.2 / (0.2 + 1e-8), 1e-6);
  EXPECT_NEAR(p[1], -2.0 * 0.95 + 0.1 * 0.4 / (0.4 + 1e-8), 1e-6);
  EXPECT_FLOAT_EQ(p[2], 0.5f);  // zero gradient, no decay: unchanged
  EXPECT_NEAR(m[0], 0.1 * 0.2, 1e-7);
  EXPECT_NEAR(v[1], 0.05 * 0.16, 1e-8);

  // Step 2 with g0 = 0.1: m = 0.9*0.02 + 0.1*0.1 = 0.028, v = 0.95*0.002 + 0.05*0.01 = 0.0024,
  // m_hat = 0.028 / (1 - 0.81), v_hat = 0.0024 / (1 - 0.9025).
  const double p0 = p[0];
  g = {0.1f, 0.0f, 0.0f};
  adamw_step(cfg, 2, {0, p, g, m, v}, decayed);
  const double m_hat = 0.028 / 0.19, v_hat = 0.0024 / 0.0975;
  EXPECT_NEAR(p[0], p0 * 0.95 - 0.1 * m_hat / (std::sqrt(v_hat) + 1e-8), 1e-6);
}

// The same layout elements, updated as two shards or as one buffer, end identical.
TEST(AdamW, ShardsWithOffsetsEqualOneBuffer) {
  const ParamLayout layout(test::tiny_gpt());
  const std::vector<Range> decayed = layout.decayed_ranges();
  const std::size_t n = static_cast<std::size_t>(layout.size()), cut = n / 3 + 5;
  std::vector<float> p(n), g = test::random_vector<float>(layout.size(), 3, 0.1);
  layout.init<float>(p, 7);
  std::vector<float> p_one = p, m_one(n, 0.0f), v_one(n, 0.0f), m(n, 0.0f), v(n, 0.0f);
  const AdamWConfig cfg{1e-2, 0.9, 0.95, 1e-8, 0.1};
  for (int64_t step = 1; step <= 3; ++step) {
    adamw_step(cfg, step, {0, p_one, g, m_one, v_one}, decayed, 0.5f);
    const std::span<float> ps(p), ms(m), vs(v);
    const std::span<const float> gs(g);
    adamw_step(cfg, step, {0, ps.first(cut), gs.first(cut), ms.first(cut), vs.first(cut)}, decayed, 0.5f);
    adamw_step(cfg, step, {static_cast<int64_t>(cut), ps.subspan(cut), gs.subspan(cut), ms.subspan(cut), vs.subspan(cut)},
               decayed, 0.5f);
  }
  EXPECT_EQ(p, p_one);
  EXPECT_EQ(m, m_one);
}

// grad_scale multiplies the gradient before the moments.
TEST(AdamW, GradScaleScalesTheGradient) {
  const AdamWConfig cfg{0.1, 0.9, 0.95, 1e-8, 0.0};
  std::vector<float> p = {1.0f}, g = {0.4f}, m = {0.0f}, v = {0.0f};
  adamw_step(cfg, 1, {0, p, g, m, v}, {}, 0.25f);
  EXPECT_NEAR(m[0], 0.1 * 0.1, 1e-8);
  EXPECT_NEAR(v[0], 0.05 * 0.01, 1e-9);
}

TEST(AdamW, NormAndClipScale) {
  const std::vector<float> g = {3.0f, 4.0f, 0.0f};
  EXPECT_DOUBLE_EQ(global_norm_sq(g), 25.0);
  // Two shards: squared norms add, the caller all-reduces the sum and takes the root.
  EXPECT_DOUBLE_EQ(global_norm_sq(std::span(g).first(1)) + global_norm_sq(std::span(g).subspan(1)), 25.0);
  EXPECT_FLOAT_EQ(clip_scale(5.0, 1.0), static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_scale(100.0, 0.0), 1.0f);  // clipping off
}

TEST(AdamW, BadShardsThrow) {
  std::vector<float> p(3), g(2), m(3), v(3);
  EXPECT_THROW(adamw_step({}, 1, {0, p, g, m, v}, {}), std::invalid_argument);
  g.resize(3);
  EXPECT_THROW(adamw_step({}, 0, {0, p, g, m, v}, {}), std::invalid_argument);
}

}  // namespace
}  // namespace stagecraft::executor
