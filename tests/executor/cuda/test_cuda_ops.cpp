// cuda::ops (executor/cuda/ops.hpp) against the CPU model math in double (executor/model/ops.hpp)
// on the same fp32 inputs: every kernel, forward and backward. The measure is the relative error
// of the whole output, ||dev - ref|| / ||ref||, below 1e-5 (fp32 arithmetic; GEMM sums of up to a
// few hundred terms; no TF32). Needs a device (label gpu).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "executor/cuda/buffers.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/ops.hpp"
#include "executor/model/ops.hpp"

namespace stagecraft::executor {
namespace {

namespace dev = cuda::ops;
namespace host = executor::ops;

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
    ctx = std::make_unique<cuda::OpsContext>();
  }
  std::vector<float> random(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
  }
  static std::vector<double> wide(const std::vector<float>& v) { return {v.begin(), v.end()}; }
  static cuda::DeviceBuffer up(const std::vector<float>& v) {
    cuda::DeviceBuffer b(static_cast<int64_t>(v.size()));
    b.upload(v);
    return b;
  }
  static double rel_error(const cuda::DeviceBuffer& got, const std::vector<double>& want) {
    const std::vector<float> g = got.download();
    double e = 0, n = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      e += (g[i] - want[i]) * (g[i] - want[i]);
      n += want[i] * want[i];
    }
    return n > 0 ? std::sqrt(e / n) : std::sqrt(e);
  }
  std::mt19937 rng{17};
  std::unique_ptr<cuda::OpsContext> ctx;
};

constexpr double kTol = 1e-5;

TEST_F(CudaOps, LinearForwardAndBothBackwards) {
  const int64_t n = 37, in = 48, out = 40;
  const auto x = random(n * in), w = random(in * out, 0.2f), b = random(out), dy = random(n * out), dx0 = random(n * in),
             dw0 = random(in * out), db0 = random(out);
  auto dX = up(x), dW = up(w), dB = up(b), dDY = up(dy);
  cuda::DeviceBuffer dY(n * out);
  dev::linear_forward(*ctx, dX.data(), dW.data(), dB.data(), dY.data(), n, in, out);
  std::vector<double> y(static_cast<std::size_t>(n * out));
  auto xd = wide(x), wd = wide(w), bd = wide(b), dyd = wide(dy);
  host::linear_forward(xd.data(), wd.data(), bd.data(), y.data(), n, in, out);
  EXPECT_LT(rel_error(dY, y), kTol);

  auto dDX = up(dx0);  // accumulate onto a non-zero gradient
  dev::linear_backward_input(*ctx, dDY.data(), dW.data(), dDX.data(), n, in, out, true);
  auto dxd = wide(dx0);
  host::linear_backward_input(dyd.data(), wd.data(), dxd.data(), n, in, out, true);
  EXPECT_LT(rel_error(dDX, dxd), kTol);

  auto dDW = up(dw0), dDB = up(db0);
  dev::linear_backward_weight(*ctx, dX.data(), dDY.data(), dDW.data(), dDB.data(), n, in, out);
  auto dwd = wide(dw0), dbd = wide(db0);
  host::linear_backward_weight(xd.data(), dyd.data(), dwd.data(), dbd.data(), n, in, out);
  EXPECT_LT(rel_error(dDW, dwd), kTol);
  EXPECT_LT(rel_error(dDB, dbd), kTol);
}

TEST_F(CudaOps, LayerNormAndRmsNormForwardAndBackward) {
  for (const bool ln : {true, false}) {
    const int64_t n = 9, c = 300;  // more columns than a block's threads
    const auto x = random(n * c, 2.0f), w = random(c), b = random(c), dy = random(n * c), dx0 = random(n * c);
    auto dX = up(x), dW = up(w), dB = up(b), dDY = up(dy);
    cuda::DeviceBuffer y(n * c), xhat(n * c), rstd(n);
    dev::norm_forward(*ctx, ln, 1e-5, dX.data(), dW.data(), ln ? dB.data() : nullptr, y.data(), xhat.data(), rstd.data(), n, c);
    auto xd = wide(x), wd = wide(w), bd = wide(b), dyd = wide(dy);
    std::vector<double> hy(xd.size()), hh(xd.size()), hr(static_cast<std::size_t>(n));
    host::norm_forward(ln, 1e-5, xd.data(), wd.data(), ln ? bd.data() : nullptr, hy.data(), hh.data(), hr.data(), n, c);
    EXPECT_LT(rel_error(y, hy), kTol) << ln;
    EXPECT_LT(rel_error(rstd, hr), kTol) << ln;
    auto dDX = up(dx0);
    dev::norm_backward_input(*ctx, ln, dDY.data(), dW.data(), xhat.data(), rstd.data(), dDX.data(), n, c, true);
    auto dxd = wide(dx0);
    host::norm_backward_input(ln, dyd.data(), wd.data(), hh.data(), hr.data(), dxd.data(), n, c, true);
    EXPECT_LT(rel_error(dDX, dxd), kTol) << ln;
    cuda::DeviceBuffer dw(c), db(c);
    dev::norm_backward_weight(*ctx, dDY.data(), xhat.data(), dw.data(), db.data(), n, c);
    std::vector<double> hdw(static_cast<std::size_t>(c)), hdb(static_cast<std::size_t>(c));
    host::norm_backward_weight(dyd.data(), hh.data(), hdw.data(), hdb.data(), n, c);
    EXPECT_LT(rel_error(dw, hdw), kTol) << ln;
    EXPECT_LT(rel_error(db, hdb), kTol) << ln;
  }
}

TEST_F(CudaOps, ActivationsForwardAndBackward) {
  const int64_t n = 1000;
  const auto u = random(n, 2.0f), up2 = random(n), dout = random(n);
  auto dU = up(u), dUp = up(up2), dO = up(dout);
  auto ud = wide(u), upd = wide(up2), dod = wide(dout);
  std::vector<double> r(static_cast<std::size_t>(n)), r2(r.size());
  cuda::DeviceBuffer o(n), o2(n);
  for (const bool exact : {false, true}) {
    dev::gelu_forward(*ctx, dU.data(), o.data(), n, exact);
    host::gelu_forward(ud.data(), r.data(), n, exact);
    EXPECT_LT(rel_error(o, r), kTol) << "gelu " << exact;
    dev::gelu_backward(*ctx, dU.data(), dO.data(), o.data(), n, exact);
    host::gelu_backward(ud.data(), dod.data(), r.data(), n, exact);
    EXPECT_LT(rel_error(o, r), kTol) << "gelu' " << exact;
    dev::geglu_forward(*ctx, dU.data(), dUp.data(), o.data(), n, exact);
    host::geglu_forward(ud.data(), upd.data(), r.data(), n, exact);
    EXPECT_LT(rel_error(o, r), kTol) << "geglu " << exact;
    dev::geglu_backward(*ctx, dU.data(), dUp.data(), dO.data(), o.data(), o2.data(), n, exact);
    host::geglu_backward(ud.data(), upd.data(), dod.data(), r.data(), r2.data(), n, exact);
    EXPECT_LT(rel_error(o, r), kTol) << "geglu' gate " << exact;
    EXPECT_LT(rel_error(o2, r2), kTol) << "geglu' up " << exact;
  }
  dev::relu_forward(*ctx, dU.data(), o.data(), n);
  host::relu_forward(ud.data(), r.data(), n);
  EXPECT_LT(rel_error(o, r), kTol);
  dev::relu_backward(*ctx, dU.data(), dO.data(), o.data(), n);
  host::relu_backward(ud.data(), dod.data(), r.data(), n);
  EXPECT_LT(rel_error(o, r), kTol);
  dev::swiglu_forward(*ctx, dU.data(), dUp.data(), o.data(), n);
  host::swiglu_forward(ud.data(), upd.data(), r.data(), n);
  EXPECT_LT(rel_error(o, r), kTol);
  dev::swiglu_backward(*ctx, dU.data(), dUp.data(), dO.data(), o.data(), o2.data(), n);
  host::swiglu_backward(ud.data(), upd.data(), dod.data(), r.data(), r2.data(), n);
  EXPECT_LT(rel_error(o, r), kTol);
  EXPECT_LT(rel_error(o2, r2), kTol);
}

TEST_F(CudaOps, RopeTurnsAndTurnsBack) {
  const int64_t seq = 16, n = 2 * seq, heads = 3, d = 8, stride = 40, col0 = 4;
  const auto x = random(n * stride);
  for (const bool inverse : {false, true}) {
    auto dx = up(x);
    dev::rope(*ctx, dx.data(), n, seq, stride, col0, heads, d, inverse, 10000.0);
    auto xd = wide(x);
    host::rope(xd.data(), n, seq, stride, col0, heads, d, inverse, 10000.0);
    EXPECT_LT(rel_error(dx, xd), kTol) << inverse;
  }
}

// Grouped-query: 4 query heads over 2 K/V heads, 2 sequences of 24 tokens, head width 16.
TEST_F(CudaOps, GroupedQueryAttentionForwardAndBackward) {
  const cuda::AttentionShape a{2, 24, 4, 2, 16};
  const host::AttentionShape ha{a.batch, a.seq, a.heads, a.kv_heads, a.head_dim};
  const int64_t n = a.batch * a.seq;
  const auto qkv = random(n * a.qkv_cols()), dout = random(n * a.hidden());
  auto dQKV = up(qkv), dDO = up(dout);
  cuda::DeviceBuffer probs(a.batch * a.heads * a.seq * a.seq), out(n * a.hidden()), dqkv(n * a.qkv_cols());
  dev::attention_forward(*ctx, dQKV.data(), probs.data(), out.data(), a);
  auto qd = wide(qkv), dod = wide(dout);
  std::vector<double> hp(static_cast<std::size_t>(probs.size())), ho(static_cast<std::size_t>(out.size())),
      hd(static_cast<std::size_t>(dqkv.size()));
  host::attention_forward(qd.data(), hp.data(), ho.data(), ha);
  EXPECT_LT(rel_error(probs, hp), kTol);
  EXPECT_LT(rel_error(out, ho), kTol);
  dev::attention_backward(*ctx, dQKV.data(), probs.data(), dDO.data(), dqkv.data(), a);
  host::attention_backward(qd.data(), hp.data(), dod.data(), hd.data(), ha);
  EXPECT_LT(rel_error(dqkv, hd), kTol);
}

TEST_F(CudaOps, CrossEntropyLossAndGradient) {
  const int64_t n = 13, v = 300;
  const auto z = random(n * v, 3.0f);
  std::vector<int32_t> t(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < n; ++r) t[static_cast<std::size_t>(r)] = static_cast<int32_t>((r * 37) % v);
  auto dz = up(z);
  int32_t* dt = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dt), t.size() * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dt, t.data(), t.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  const float loss = dev::softmax_cross_entropy(*ctx, dz.data(), dt, n, v);
  auto zd = wide(z);
  const double want = host::softmax_cross_entropy(zd.data(), t.data(), n, v);
  EXPECT_NEAR(loss, want, kTol * want);
  EXPECT_LT(rel_error(dz, zd), kTol);  // the probabilities
  cuda::DeviceBuffer dl(n * v);
  dev::softmax_cross_entropy_backward(*ctx, dz.data(), dt, 0.25f, dl.data(), n, v);
  std::vector<double> hdl(zd.size());
  host::softmax_cross_entropy_backward(zd.data(), t.data(), 0.25, hdl.data(), n, v);
  EXPECT_LT(rel_error(dl, hdl), kTol);
  cudaFree(dt);
}

// A vocabulary slice [8, 20) of tp rank 1: tokens outside it give zero rows; positions offset 2.
TEST_F(CudaOps, EmbeddingLookupAndTableGradients) {
  const int64_t seq = 6, n = 12, h = 10, vocab0 = 8, vocab = 12, offset = 2;
  std::vector<int32_t> tokens(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < n; ++r) tokens[static_cast<std::size_t>(r)] = static_cast<int32_t>((r * 7 + 3) % 24);
  const auto wte = random(vocab * h), wpe = random((seq + offset) * h), dy = random(n * h);
  auto dWte = up(wte), dWpe = up(wpe), dDY = up(dy);
  int32_t* dt = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dt), tokens.size() * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dt, tokens.data(), tokens.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  cuda::DeviceBuffer y(n * h), gte(vocab * h), gpe((seq + offset) * h);
  dev::embedding_forward(*ctx, dt, dWte.data(), dWpe.data(), y.data(), n, h, seq, vocab0, vocab, offset);
  dev::embedding_backward_weight(*ctx, dt, dDY.data(), gte.data(), gpe.data(), n, h, seq, vocab0, vocab, offset);
  std::vector<double> hy(static_cast<std::size_t>(n * h)), hte(static_cast<std::size_t>(vocab * h)),
      hpe(static_cast<std::size_t>((seq + offset) * h));
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row = tokens[static_cast<std::size_t>(r)] - vocab0, pos = r % seq + offset;
    for (int64_t j = 0; j < h; ++j) {
      const std::size_t e = static_cast<std::size_t>(r * h + j);
      const bool mine = row >= 0 && row < vocab;
      hy[e] = (mine ? wte[static_cast<std::size_t>(row * h + j)] : 0.0) + wpe[static_cast<std::size_t>(pos * h + j)];
      if (mine) hte[static_cast<std::size_t>(row * h + j)] += dy[e];
      hpe[static_cast<std::size_t>(pos * h + j)] += dy[e];
    }
  }
  EXPECT_LT(rel_error(y, hy), kTol);
  EXPECT_LT(rel_error(gte, hte), kTol);
  EXPECT_LT(rel_error(gpe, hpe), kTol);
  cudaFree(dt);
}

}  // namespace
}  // namespace stagecraft::executor
