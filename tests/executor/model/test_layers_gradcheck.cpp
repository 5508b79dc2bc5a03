// Gradient checks: each unit's analytic backward against central finite differences, in double,
// for both model families on tiny shapes (h=8, b=2, s=5, V=11; LLaMA-ish with 4 heads sharing
// 2 K/V heads). Objective: L = sum(y * R) for a fixed random R (head: L = r * loss).
// Bound per element: |analytic - numeric| <= 1e-6 * max(1, |numeric|). With step 1e-5 the
// truncation error is ~1e-10 and rounding ~1e-11 at these O(1) values, so the bound has margin;
// the measured maxima are printed (per unit 1e-12 .. 1e-9; the whole LLaMA model ~1e-7, which
// shrinks 100x per 10x smaller step, i.e. truncation, not a wrong derivative).
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "executor/model/ops.hpp"

#include "core/spec/model.hpp"
#include "executor/model/layers.hpp"
#include "executor/model/params.hpp"
#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

using test::StageRunner;

constexpr double kStep = 1e-5;
constexpr double kTolerance = 1e-6;

struct Errors {
  double max_abs = 0;  // max |analytic - numeric|
  double max_rel = 0;  // max |analytic - numeric| / max(1, |numeric|)
  int64_t checked = 0;

  void add(double analytic, double numeric) {
    const double diff = std::abs(analytic - numeric);
    max_abs = std::max(max_abs, diff);
    max_rel = std::max(max_rel, diff / std::max(1.0, std::abs(numeric)));
    ++checked;
  }
};

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// L(params, x) = <unit(x), r> through the stage runner (one or many units), plus for MoE units
// the balancing loss weighted by t.moe_aux_grad (the term whose gradient backward adds).
double objective(StageRunner<double>& run, const TokenBatch& t, const std::vector<double>& p,
                 const std::vector<double>& x, const std::vector<double>& r) {
  double l = dot(run.forward(t, p, x), r);
  for (const UnitCache<double>& c : run.caches()) l += t.moe_aux_grad * c.moe_aux_loss;
  return l;
}

// Central differences of `objective` in every element of `v` (params or input), against `analytic`.
template <typename F>
Errors finite_differences(std::vector<double>& v, const std::vector<double>& analytic, F&& objective_of) {
  Errors e;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + kStep;
    const double up = objective_of();
    v[i] = saved - kStep;
    const double down = objective_of();
    v[i] = saved;
    e.add(analytic[i], (up - down) / (2 * kStep));
  }
  return e;
}

struct UnitCheck {
  Errors params, input;
};

// Checks units [begin, end) as one layout: parameter gradients and (unless it starts with the
// embedding) the input gradient.
UnitCheck check_range(const spec::Model& m, int64_t begin, int64_t end, uint32_t seed, double aux_grad = 0) {
  const ParamLayout layout(m, begin, end);
  const Dims d = test::tiny_dims();
  const test::Tokens tokens = test::random_tokens(m, d, seed);
  TokenBatch t = tokens.view();
  t.moe_aux_grad = aux_grad;
  StageRunner<double> run(layout);
  std::vector<double> p = test::random_params<double>(layout, seed + 1);
  std::vector<double> x = test::random_vector<double>(run.layers().front().input_size(d), seed + 2, 1.0);
  const std::vector<double> r = test::random_vector<double>(run.layers().back().output_size(d), seed + 3, 1.0);

  std::vector<double> grads(p.size(), 0.0);
  run.forward(t, p, x);
  const std::vector<double> dx = run.backward(p, r, grads);
  auto f = [&] { return objective(run, t, p, x, r); };
  UnitCheck c;
  c.params = finite_differences(p, grads, f);
  c.input = finite_differences(x, dx, f);
  return c;
}

void check_every_unit(const spec::Model& m, double aux_grad = 0) {
  for (int64_t u = 0; u < unit_count(m); ++u) {
    const UnitCheck c = check_range(m, u, u + 1, static_cast<uint32_t>(100 + u), aux_grad);
    std::printf("  %-12s %-14s params %4lld max_rel %.2e | input %3lld max_rel %.2e\n", m.name.c_str(),
                unit_name(m, u).c_str(), static_cast<long long>(c.params.checked), c.params.max_rel,
                static_cast<long long>(c.input.checked), c.input.max_rel);
    EXPECT_GT(c.params.checked, 0) << unit_name(m, u);
    EXPECT_LE(c.params.max_rel, kTolerance) << unit_name(m, u) << " parameter gradients";
    EXPECT_LE(c.input.max_rel, kTolerance) << unit_name(m, u) << " input gradient";
    if (unit_kind(m, u) != UnitKind::kEmbedding) {
      EXPECT_EQ(c.input.checked, test::tiny_dims().rows() * m.hidden);
    }
  }
}

TEST(GradCheck, GptEveryUnit) { check_every_unit(test::tiny_gpt()); }

TEST(GradCheck, LlamaGqaRopeEveryUnit) { check_every_unit(test::tiny_llama()); }

// The whole model as one layout: the tied wte gets the embedding's and the head's contributions.
TEST(GradCheck, GptWholeModelSharedTiedTable) {
  const spec::Model m = test::tiny_gpt();
  const UnitCheck c = check_range(m, 0, unit_count(m), 7);
  std::printf("  tiny-gpt whole model: %lld params max_rel %.2e\n", static_cast<long long>(c.params.checked),
              c.params.max_rel);
  EXPECT_LE(c.params.max_rel, kTolerance);
}

TEST(GradCheck, LlamaWholeModel) {
  const spec::Model m = test::tiny_llama();
  const UnitCheck c = check_range(m, 0, unit_count(m), 8);
  std::printf("  tiny-llama whole model: %lld params max_rel %.2e\n", static_cast<long long>(c.params.checked),
              c.params.max_rel);
  EXPECT_LE(c.params.max_rel, kTolerance);
}

// A pipeline stage in the middle (block 0 MLP .. block 1 attention): input and parameter grads.
TEST(GradCheck, MiddleStageOfSeveralUnits) {
  for (const spec::Model& m : {test::tiny_gpt(), test::tiny_llama()}) {
    const UnitCheck c = check_range(m, 2, 4, 9);
    EXPECT_LE(c.params.max_rel, kTolerance) << m.name;
    EXPECT_LE(c.input.max_rel, kTolerance) << m.name;
  }
}

// OPT's choices: ReLU, a learned table whose positions start 2 rows in.
TEST(GradCheck, ReluOffsetPositionsEveryUnit) {
  spec::Model m = test::tiny_gpt();
  m.name = "tiny-opt";
  m.mlp = spec::Mlp::kRelu;
  m.position_offset = 2;
  check_every_unit(m);
}

// Gemma's and Qwen2's: GeGLU, heads wider than hidden / heads (4 x 4 = 16 query columns on a hidden of 8),
// biases on the QKV projection only.
TEST(GradCheck, GegluWideHeadsQkvBiasEveryUnit) {
  spec::Model m = test::tiny_llama();
  m.name = "tiny-gemma";
  m.mlp = spec::Mlp::kGeglu;
  m.head_size = 4;
  m.qkv_bias = true;
  ASSERT_EQ(m.q_dim(), 16);
  check_every_unit(m);
}

// The two GELUs at u = 1: exact, Phi(1) = 0.8413447460685429 (the standard normal CDF's table value);
// tanh (gelu_new), 0.5 (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411919906082768.
TEST(GeluForms, ExactIsTheNormalCdfTanhTheApproximation) {
  const double u = 1.0;
  double exact = 0, approx = 0;
  ops::gelu_forward(&u, &exact, 1, true);
  ops::gelu_forward(&u, &approx, 1, false);
  EXPECT_NEAR(exact, 0.8413447460685429, 1e-15);
  EXPECT_NEAR(approx, 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * 1.044715)), 1e-15);
  EXPECT_NEAR(approx, 0.8411919906082768, 1e-12);
  // exact derivative at 1: Phi(1) + phi(1) = 0.8413447460685429 + 0.24197072451914337
  double d = 0;
  const double one = 1;
  ops::gelu_backward(&u, &one, &d, 1, true);
  EXPECT_NEAR(d, 0.8413447460685429 + 0.24197072451914337, 1e-15);
}

// transformers' numerics beyond the defaults: exact (erf) GELU, an RMSNorm epsilon of 1e-6 and a
// RoPE base of 500000 (Llama-3) each take their own path through forward and backward.
TEST(GradCheck, ExactGeluAndModelNumericsEveryUnit) {
  spec::Model m = test::tiny_gpt();
  m.name = "tiny-gpt-erf";
  m.gelu_exact = true;
  m.norm_eps = 1e-6;
  check_every_unit(m);
  spec::Model l = test::tiny_llama();
  l.name = "tiny-llama-3";
  l.rope_theta = 500000;
  l.norm_eps = 1e-6;
  check_every_unit(l);
}

// Mixtral's block on the LLaMA shapes: 4 SwiGLU experts of width 6, top 2 renormalised, with the
// balancing loss's gradient (weight 0.7) on the router.
TEST(GradCheck, MixtureOfExpertsTopTwoWithBalancingLoss) {
  spec::Model m = test::tiny_llama();
  m.name = "tiny-mixtral";
  m.moe.experts = 4, m.moe.top_k = 2, m.moe.ffn_hidden = 6;
  check_every_unit(m, 0.7);
}

// Qwen2-MoE's block on the GPT shapes (gelu experts with biases): top 3 of 5 not renormalised, a
// gated shared expert of width 10, block 0 dense.
TEST(GradCheck, MixtureOfExpertsSharedGatedExpertDenseFirstLayer) {
  spec::Model m = test::tiny_gpt();
  m.name = "tiny-qwen2-moe";
  m.moe.experts = 5, m.moe.top_k = 3, m.moe.ffn_hidden = 4, m.moe.normalize_top_k = false;
  m.moe.shared_ffn_hidden = 10, m.moe.shared_gate = true, m.moe.dense_layers = {0};
  ASSERT_EQ(unit_kind(m, 2), UnitKind::kMlp);
  ASSERT_EQ(unit_kind(m, 4), UnitKind::kMoe);
  check_every_unit(m, 0.3);
}

// Query and key norms before RoPE: Qwen3's RMSNorm per head (over head_dim, one weight for every
// head), OLMoE's over the whole q and k projections (qk_norm_whole), and on the GPT shapes the
// model's LayerNorm with its bias, per head.
TEST(GradCheck, QueryKeyNormsPerHeadAndWholeProjection) {
  spec::Model qwen3 = test::tiny_llama();
  qwen3.name = "tiny-qwen3";
  qwen3.qk_norm = true;
  check_every_unit(qwen3);
  spec::Model olmoe = qwen3;
  olmoe.name = "tiny-olmoe";
  olmoe.qk_norm_whole = true;
  olmoe.moe.experts = 4, olmoe.moe.top_k = 2, olmoe.moe.ffn_hidden = 6, olmoe.moe.normalize_top_k = false;
  check_every_unit(olmoe, 0.2);
  spec::Model gpt = test::tiny_gpt();
  gpt.name = "tiny-gpt-qk-norm";
  gpt.qk_norm = true;
  check_every_unit(gpt);
}

// Sliding-window attention (Mistral on every layer; Gemma-2 and gpt-oss on some): each query sees
// its 2 latest keys, on every layer and on block 0 only.
TEST(GradCheck, SlidingWindowAttention) {
  spec::Model m = test::tiny_llama();
  m.name = "tiny-mistral-window-2";
  m.sliding_window = 2;
  ASSERT_GT(test::tiny_dims().seq, m.sliding_window);
  check_every_unit(m);
  m.sliding_window_layers = {0};
  check_every_unit(m);
}

// DeepSeek-V3's router on the LLaMA shapes: sigmoid scores, the top 4 of 16 experts taken from the 2
// best of 4 groups of 4 (each scored by its top 4 / 2 = 2 selection scores) with the expert biases shifting the
// selection only (random here: their gradient is zero, which the differences confirm), the chosen
// scores normalised and scaled by 2.5, a shared expert beside them.
TEST(GradCheck, MixtureOfExpertsSigmoidGroupLimitedBiasedScaled) {
  spec::Model m = test::tiny_llama();
  m.name = "tiny-deepseek-moe";
  m.moe.experts = 16, m.moe.top_k = 4, m.moe.ffn_hidden = 4, m.moe.shared_ffn_hidden = 6;
  m.moe.router = "sigmoid", m.moe.router_bias = true, m.moe.router_scaling = 2.5;
  m.moe.router_groups = 4, m.moe.router_group_top_k = 2;
  check_every_unit(m);
  m.moe.normalize_top_k = false;  // the scores themselves, scaled
  m.moe.router_groups = m.moe.router_group_top_k = 0;
  check_every_unit(m);
  // the balancing loss on the sigmoid scores normalised over the experts (Megatron-Core
  // compute_routing_scores_for_aux_loss), over its own top k
  check_every_unit(m, 0.5);
}

// gpt-oss's router: a learned logit bias (trained by its gradient), softmax, top 2 of 4 renormalised.
TEST(GradCheck, MixtureOfExpertsRouterLogitBias) {
  spec::Model m = test::tiny_llama();
  m.name = "tiny-gpt-oss-moe";
  m.moe.experts = 4, m.moe.top_k = 2, m.moe.ffn_hidden = 6, m.moe.router_logit_bias = true;
  check_every_unit(m, 0.4);
}

TEST(ExecutorFeatures, NamesWhatItDoesNotRun) {
  const nlohmann::json phi2 = {{"model_type", "phi"}, {"num_hidden_layers", 2}, {"hidden_size", 64}, {"intermediate_size", 128},
                     {"num_attention_heads", 4}, {"vocab_size", 100}, {"max_position_embeddings", 32}};
  const std::vector<std::string> missing = unsupported_features(spec::model_from_json(phi2, "phi2.json"));
  ASSERT_EQ(missing.size(), 3u);  // parallel block, partial RoPE, LM head bias
  EXPECT_NE(missing[0].find("parallel"), std::string::npos);
  const nlohmann::json nemo = {{"model_type", "mistral"}, {"num_hidden_layers", 2}, {"hidden_size", 64}, {"head_dim", 8},
                     {"intermediate_size", 128}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                     {"vocab_size", 100}, {"max_position_embeddings", 32}};
  EXPECT_TRUE(unsupported_features(spec::model_from_json(nemo, "n.json")).empty());
  const nlohmann::json opt = {{"model_type", "opt"}, {"num_hidden_layers", 2}, {"hidden_size", 64}, {"ffn_dim", 128},
                    {"num_attention_heads", 4}, {"vocab_size", 100}, {"max_position_embeddings", 32}};
  EXPECT_TRUE(unsupported_features(spec::model_from_json(opt, "o.json")).empty());
}

}  // namespace
}  // namespace stagecraft::executor
