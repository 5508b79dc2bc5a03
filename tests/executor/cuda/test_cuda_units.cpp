// The units on the device — the one composition (executor/model/units_impl.hpp) over the device
// kernels, LayerT<float, DeviceKernels> — against the host oracle Layer<double> on the same
// parameters and tokens, for the GPT family (LayerNorm, GELU, learned positions, biases, tied
// head) and the LLaMA family (RMSNorm, RoPE, SwiGLU, GQA, untied head): every unit's forward
// (the loss), its input gradient and its parameter gradients, with the full backward, with the
// zero-bubble split and with recompute from a kept input. Relative error of each whole buffer
// below 1e-5 (fp32 against double). Needs a device (label gpu).
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "executor/cuda/buffers.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/device_kernels.hpp"
#include "executor/model/tiny.hpp"
#include "unit_passes.hpp"

namespace stagecraft::executor {
namespace {

using DeviceLayer = LayerT<float, cuda::DeviceKernels>;

double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0, n = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    e += (got[i] - want[i]) * (got[i] - want[i]);
    n += want[i] * want[i];
  }
  return n > 0 ? std::sqrt(e / n) : std::sqrt(e);
}

cuda::DeviceBuffer up(const std::vector<double>& v) {
  cuda::DeviceBuffer b(static_cast<int64_t>(v.size()));
  b.upload(std::vector<float>(v.begin(), v.end()));
  return b;
}

enum class Path { kFull, kSplit, kRecompute };

void check_model(const spec::Model& m, Path path) {
  const ParamLayout layout(m);
  const test::Tokens tokens = test::random_tokens(m, test::tiny_dims(), 3);
  const TokenBatch tb = tokens.view();
  // float-representable parameters, so both sides compute from the same values
  std::vector<double> p = test::random_params<double>(layout, 4);
  for (double& x : p) x = static_cast<float>(x);
  cuda::OpsContext ctx;
  cuda::DeviceKernels k(ctx);
  cuda::DeviceBuffer dp = up(p), dgrads(layout.size());
  std::vector<double> hgrads(p.size(), 0.0);
  const int32_t units = static_cast<int32_t>(layout.end());
  std::vector<Layer<double>> host;
  std::vector<DeviceLayer> dev;
  for (int32_t u = 0; u < units; ++u) {
    host.emplace_back(layout, u);
    dev.emplace_back(layout, u, k);
  }
  std::vector<UnitCache<double>> hc(static_cast<std::size_t>(units));
  std::vector<DeviceLayer::Cache> dc(static_cast<std::size_t>(units));
  const CacheMode mode = path == Path::kRecompute ? CacheMode::kInputOnly : CacheMode::kFull;
  const std::string what = m.name + (path == Path::kFull ? " full" : path == Path::kSplit ? " split" : " recompute");
  std::vector<double> hx;
  cuda::DeviceBuffer dx;
  for (int32_t u = 0; u < units; ++u) {
    const std::size_t i = static_cast<std::size_t>(u);
    std::vector<double> hy(static_cast<std::size_t>(host[i].output_size(tb.dims)));
    host[i].forward(tb, p, hx, hy, hc[i], mode);
    cuda::DeviceBuffer dy(dev[i].output_size(tb.dims));
    dev[i].forward(tb, std::span<const float>(dp.view()), std::span<const float>(dx.view()), dy.view(), dc[i], mode);
    EXPECT_LT(rel_error(dy.download(), hy), 1e-5) << what << ": unit " << u << " forward";
    hx = std::move(hy);
    dx = std::move(dy);
  }
  std::vector<double> hd{0.5};  // dL/dloss
  cuda::DeviceBuffer dd = up(hd);
  for (int32_t u = units - 1; u >= 0; --u) {
    const std::size_t i = static_cast<std::size_t>(u);
    std::vector<double> hdx(static_cast<std::size_t>(host[i].input_size(hc[i].dims)));
    cuda::DeviceBuffer ddx(dev[i].input_size(dc[i].dims));
    test::backward_both(path == Path::kSplit, host[i], p, hd, hdx, hgrads, hc[i], dev[i], dp, dd, ddx, dgrads, dc[i]);
    if (!hdx.empty()) {
      EXPECT_LT(rel_error(ddx.download(), hdx), 1e-5) << what << ": unit " << u << " input gradient";
    }
    hd = std::move(hdx);
    dd = std::move(ddx);
  }
  EXPECT_LT(rel_error(dgrads.download(), hgrads), 1e-5) << what << ": parameter gradients";
}

class CudaUnits : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

TEST_P(CudaUnits, GptFamilyEqualsTheHostOracle) { check_model(test::tiny_gpt(), GetParam()); }
TEST_P(CudaUnits, LlamaFamilyEqualsTheHostOracle) { check_model(test::tiny_llama(), GetParam()); }
INSTANTIATE_TEST_SUITE_P(Paths, CudaUnits, ::testing::Values(Path::kFull, Path::kSplit, Path::kRecompute),
                         [](const ::testing::TestParamInfo<Path>& i) {
                           return std::string(i.param == Path::kFull ? "FullBackward" : i.param == Path::kSplit ? "SplitBackward"
                                                                                                              : "Recompute");
                         });

}  // namespace
}  // namespace stagecraft::executor
