// The units against a naive reference written a different way: plain loops over named tensors
// (no Eigen, no shared kernels), HF-style RoPE (cat(freqs, freqs) and rotate_half), a triple-loop
// causal softmax attention. Each unit's output and the whole model's loss must agree to 1e-12
// (double); the float path must agree with double to float precision.
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "executor/model/layers.hpp"
#include "executor/model/params.hpp"
#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

using Rows = std::vector<std::vector<double>>;  // [N][width]

class Naive {
 public:
  Naive(const ParamLayout& layout, const std::vector<double>& p) : layout_(layout), p_(p), m_(layout.model()) {}

  bool has(const std::string& name) const { return layout_.contains(name); }
  double at(const std::string& name, int64_t i) const { return p_[static_cast<std::size_t>(layout_.find(name).offset + i)]; }
  double at(const std::string& name, int64_t r, int64_t c) const { return at(name, r * layout_.find(name).cols + c); }

  Rows embed(const std::vector<int32_t>& tokens, int64_t T) const {
    Rows x(tokens.size(), std::vector<double>(static_cast<std::size_t>(m_.hidden)));
    for (std::size_t n = 0; n < tokens.size(); ++n) {
      for (int64_t c = 0; c < m_.hidden; ++c) {
        x[n][c] = at("embedding.wte", tokens[n], c);
        if (has("embedding.wpe")) x[n][c] += at("embedding.wpe", static_cast<int64_t>(n) % T, c);
      }
    }
    return x;
  }

  Rows norm(const std::string& prefix, const Rows& x) const {
    Rows y = x;
    const double C = static_cast<double>(m_.hidden);
    for (std::size_t n = 0; n < x.size(); ++n) {
      double mean = 0, var = 0;
      if (m_.norm == spec::Norm::kLayerNorm) {
        for (double v : x[n]) mean += v / C;
      }
      for (double v : x[n]) var += (v - mean) * (v - mean) / C;
      for (int64_t c = 0; c < m_.hidden; ++c) {
        y[n][c] = (x[n][c] - mean) / std::sqrt(var + 1e-5) * at(prefix + ".w", c);
        if (has(prefix + ".b")) y[n][c] += at(prefix + ".b", c);
      }
    }
    return y;
  }

  Rows linear(const std::string& prefix, const Rows& x) const {
    const TensorSlot& w = layout_.find(prefix + ".w");
    Rows y(x.size(), std::vector<double>(static_cast<std::size_t>(w.cols), 0.0));
    for (std::size_t n = 0; n < x.size(); ++n) {
      for (int64_t o = 0; o < w.cols; ++o) {
        for (int64_t i = 0; i < w.rows; ++i) y[n][o] += x[n][i] * at(prefix + ".w", i, o);
        if (has(prefix + ".b")) y[n][o] += at(prefix + ".b", o);
      }
    }
    return y;
  }

  // HF LLaMA: q_embed = q * cos + rotate_half(q) * sin, emb = cat(freqs, freqs).
  void rope(Rows& qkv, int64_t col0, int64_t heads, int64_t T) const {
    const int64_t D = m_.head_dim();
    for (std::size_t n = 0; n < qkv.size(); ++n) {
      const double t = static_cast<double>(static_cast<int64_t>(n) % T);
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> v(qkv[n].begin() + col0 + h * D, qkv[n].begin() + col0 + (h + 1) * D);
        for (int64_t i = 0; i < D; ++i) {
          const double freq = 1.0 / std::pow(10000.0, static_cast<double>(2 * (i % (D / 2))) / static_cast<double>(D));
          const double rotated = i < D / 2 ? -v[i + D / 2] : v[i - D / 2];
          qkv[n][col0 + h * D + i] = v[i] * std::cos(t * freq) + rotated * std::sin(t * freq);
        }
      }
    }
  }

  // Triple loop: for each sequence, head and query i, softmax over keys j <= i, then sum p_ij v_j.
  Rows attention(const Rows& qkv, Dims d) const {
    const int64_t C = m_.hidden, D = m_.head_dim(), KV = m_.kv_dim(), group = m_.heads / m_.kv_heads;
    Rows out(qkv.size(), std::vector<double>(static_cast<std::size_t>(C), 0.0));
    for (int64_t b = 0; b < d.batch; ++b) {
      for (int64_t h = 0; h < m_.heads; ++h) {
        const int64_t k0 = C + (h / group) * D, v0 = C + KV + (h / group) * D;
        for (int64_t i = 0; i < d.seq; ++i) {
          std::vector<double> score(static_cast<std::size_t>(i + 1));
          double max = -1e300, sum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            double s = 0;
            for (int64_t k = 0; k < D; ++k) s += qkv[b * d.seq + i][h * D + k] * qkv[b * d.seq + j][k0 + k];
            score[j] = s / std::sqrt(static_cast<double>(D));
            max = std::max(max, score[j]);
          }
          for (double& s : score) sum += (s = std::exp(s - max));
          for (int64_t j = 0; j <= i; ++j) {
            for (int64_t k = 0; k < D; ++k) out[b * d.seq + i][h * D + k] += score[j] / sum * qkv[b * d.seq + j][v0 + k];
          }
        }
      }
    }
    return out;
  }

  Rows attention_sublayer(int64_t block, const Rows& x, Dims d) const {
    const std::string p = "block." + std::to_string(block) + ".attn.";
    Rows qkv = linear(p + "qkv", norm(p + "norm1", x));
    if (m_.position == spec::Position::kRope) {
      rope(qkv, 0, m_.heads, d.seq);
      rope(qkv, m_.hidden, m_.kv_heads, d.seq);
    }
    return add(x, linear(p + "out", attention(qkv, d)));
  }

  Rows mlp_sublayer(int64_t block, const Rows& x) const {
    const std::string p = "block." + std::to_string(block) + ".mlp.";
    const Rows a = norm(p + "norm2", x);
    Rows mid = linear(p + "up", a);
    const Rows gate = m_.mlp == spec::Mlp::kSwiglu ? linear(p + "gate", a) : Rows{};
    for (std::size_t n = 0; n < mid.size(); ++n) {
      for (std::size_t f = 0; f < mid[n].size(); ++f) {
        const double u = mid[n][f];
        if (m_.mlp == spec::Mlp::kSwiglu) {
          mid[n][f] = gate[n][f] / (1.0 + std::exp(-gate[n][f])) * u;
        } else {
          mid[n][f] = 0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (u + 0.044715 * u * u * u)));
        }
      }
    }
    return add(x, linear(p + "down", mid));
  }

  double head_loss(const Rows& x, const std::vector<int32_t>& targets) const {
    const Rows a = norm("head.normf", x);
    double total = 0;
    for (std::size_t n = 0; n < a.size(); ++n) {
      std::vector<double> logits(static_cast<std::size_t>(m_.vocab), 0.0);
      for (int64_t v = 0; v < m_.vocab; ++v) {
        for (int64_t c = 0; c < m_.hidden; ++c) {
          logits[v] += a[n][c] * (m_.tied_embeddings ? at("embedding.wte", v, c) : at("head.lm_head.w", c, v));
        }
      }
      double sum = 0;
      for (double l : logits) sum += std::exp(l);
      total += std::log(sum) - logits[targets[n]];
    }
    return total / static_cast<double>(a.size());
  }

 private:
  static Rows add(Rows a, const Rows& b) {
    for (std::size_t n = 0; n < a.size(); ++n)
      for (std::size_t c = 0; c < a[n].size(); ++c) a[n][c] += b[n][c];
    return a;
  }

  const ParamLayout& layout_;
  const std::vector<double>& p_;
  spec::Model m_;
};

std::vector<double> flatten(const Rows& r) {
  std::vector<double> out;
  for (const auto& row : r) out.insert(out.end(), row.begin(), row.end());
  return out;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LE(worst, tol) << what << ": max |difference| " << worst;
}

// Every unit's output against the naive one on the same input, then the loss of the whole chain.
void check_model(const spec::Model& m) {
  const ParamLayout layout(m);
  const Dims d = test::tiny_dims();
  const test::Tokens tokens = test::random_tokens(m, d, 3);
  const std::vector<double> p = test::random_params<double>(layout, 4);
  const Naive naive(layout, p);
  test::StageRunner<double> run(layout);

  Rows x = naive.embed(tokens.inputs, d.seq);
  std::vector<double> y(static_cast<std::size_t>(d.rows() * m.hidden));
  run.layers()[0].forward(tokens.view(), p, {}, y, run.caches()[0]);
  expect_close(y, flatten(x), 1e-12, "embedding");
  for (int64_t u = 1; u + 1 < unit_count(m); ++u) {
    const std::vector<double> in = flatten(x);
    const int64_t block = unit_block(m, u);
    x = unit_kind(m, u) == UnitKind::kAttention ? naive.attention_sublayer(block, x, d) : naive.mlp_sublayer(block, x);
    run.layers()[static_cast<std::size_t>(u)].forward(tokens.view(), p, in, y, run.caches()[static_cast<std::size_t>(u)]);
    expect_close(y, flatten(x), 1e-12, unit_name(m, u));
  }
  const double want = naive.head_loss(x, tokens.targets);
  const std::vector<double> loss = run.forward(tokens.view(), p, {});
  EXPECT_NEAR(loss[0], want, 1e-12 * want);
  EXPECT_GT(want, 0.5);  // a real loss, not a degenerate zero
}

TEST(Reference, GptUnitsAndLossMatchNaiveLoops) { check_model(test::tiny_gpt()); }

// Includes the attention with 4 query heads over 2 K/V heads and RoPE against the triple loop.
TEST(Reference, LlamaGqaRopeUnitsAndLossMatchNaiveLoops) { check_model(test::tiny_llama()); }

// GQA with kv_heads == 1 (multi-query) and no RoPE: the group mapping on its own.
TEST(Reference, MultiQueryAttentionMatchesTripleLoop) {
  spec::Model m = test::tiny_llama();
  m.kv_heads = 1;
  m.position = spec::Position::kLearned;
  check_model(m);
}

// The float instantiation (what training runs) against double on the whole model.
TEST(Reference, FloatPathMatchesDouble) {
  for (const spec::Model& m : {test::tiny_gpt(), test::tiny_llama()}) {
    const ParamLayout layout(m);
    const test::Tokens tokens = test::random_tokens(m, test::tiny_dims(), 5);
    const std::vector<double> pd = test::random_params<double>(layout, 6);
    const std::vector<float> pf(pd.begin(), pd.end());
    test::StageRunner<double> run_d(layout);
    test::StageRunner<float> run_f(layout);
    const double loss_d = run_d.forward(tokens.view(), pd, {})[0];
    const float loss_f = run_f.forward(tokens.view(), pf, {})[0];
    EXPECT_NEAR(loss_f, loss_d, 1e-5 * loss_d) << m.name;
    std::vector<double> gd(pd.size(), 0.0);
    std::vector<float> gf(pd.size(), 0.0f);
    run_d.backward(pd, {1.0}, gd);
    run_f.backward(pf, {1.0f}, gf);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < gd.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(gf[i]) - gd[i]));
      scale = std::max(scale, std::abs(gd[i]));
    }
    EXPECT_LE(worst, 1e-5 * scale) << m.name << ": float vs double gradients";
  }
}

}  // namespace
}  // namespace stagecraft::executor
