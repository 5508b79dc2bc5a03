// 16-bit training on the device against the CPU oracle (precision.hpp): the rounding kernels bit
// for bit the host's, the linear layers' GEMMs on 16-bit inputs exact where the host product is,
// the working parameters rounded from the masters as the host rounds them, every unit's bf16 pass
// beside the host's bf16 pass, and bf16 and fp16 training beside the CPU backend's, through the
// local transport and through NCCL's 16-bit wire. Needs a device (label gpu).
//
// The tolerances. Both sides round at the same points (model/stored_kernels.hpp) and differ only in
// the order fp32 sums are taken (GEMM accumulation, reductions over rows and columns), which moves a
// value by a few fp32 ulps and can move its rounding to the neighbouring 16-bit value: at most one
// 16-bit ulp, a relative 2u (u = 2^-9 for bf16, 2^-11 for fp16) at each of the k rounding points on
// the way to a result. So two runs differ by at most 2·k·u of a value to first order, in the worst
// case that every rounding moves the same way; the tests hold them to that and report the largest
// difference seen.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/comm/local.hpp"
#include "executor/cuda/backend.hpp"
#include "executor/cuda/buffers.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/device_kernels.hpp"
#include "executor/cuda/gemm.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/cuda/nccl_communicator.hpp"
#include "executor/cuda/state_memory.hpp"
#include "executor/model/tiny.hpp"
#include "executor/precision.hpp"
#include "executor/runner.hpp"
#include "executor/runner/plans.hpp"
#include "device_runs.hpp"
#include "unit_passes.hpp"

namespace stagecraft::executor {
namespace sixteen_test {

constexpr double kBf16Roundoff = 1.0 / 512, kFp16Roundoff = 1.0 / 2048;

class RequireGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};
using CudaSixteen = RequireGpu;

uint32_t bits_of(float x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Values that exercise every case of a rounding: random normals over many binades, exact ties of
// both parities, the largest finite 16-bit values and just past them, subnormals, zeros, infinities
// and a NaN.
std::vector<float> awkward_values(int64_t random_count) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-30, 30);
  std::vector<float> v;
  for (int64_t i = 0; i < random_count; ++i) v.push_back(std::ldexp(normal(rng), binade(rng)));
  for (float base : {1.0f, 3.0f, 1000.0f}) {
    v.push_back(base + std::ldexp(1.0f, -8) * base);   // a bf16 tie (half an ulp of bf16 past base)
    v.push_back(base + std::ldexp(3.0f, -8) * base);   // a tie of the other parity
    v.push_back(base + std::ldexp(1.0f, -11) * base);  // an fp16 tie
  }
  for (float x : {65504.0f, 65519.0f, 65520.0f, 70000.0f, 3.3895e38f, 1e-8f, 6e-8f, 1e-40f, 0.0f, -0.0f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::max()}) {
    v.push_back(x);
    v.push_back(-x);
  }
  v.push_back(std::numeric_limits<float>::quiet_NaN());
  return v;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " element " << i;
    } else {
      ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << what << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

void check_rounding(Format f) {
  const std::vector<float> x = awkward_values(100003);
  cuda::DeviceBuffer d(static_cast<int64_t>(x.size()));
  d.upload(x);
  cuda::round16(cuda::half16(f), d.data(), d.size(), nullptr);
  std::vector<float> want = x;
  round_all(f, std::span<float>(want));
  expect_same_bits(d.download(), want, to_string(f));
}

TEST_F(CudaSixteen, Bf16RoundingIsTheHostsBitForBit) { check_rounding(Format::kBf16); }
TEST_F(CudaSixteen, Fp16RoundingIsTheHostsBitForBit) { check_rounding(Format::kFp16); }

// A wire's encoding: the device's 16-bit patterns equal precision.hpp pack16's, and unpacking them
// gives the rounded values back (exactly: every 16-bit value is an fp32 value).
TEST_F(CudaSixteen, WireBitsAreTheHostsPack16) {
  for (Format f : {Format::kBf16, Format::kFp16}) {
    const std::vector<float> x = awkward_values(5001);
    const int64_t n = static_cast<int64_t>(x.size());
    cuda::DeviceBuffer d(n), back(n);
    d.upload(x);
    uint16_t* bits = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&bits), static_cast<std::size_t>(n) * sizeof(uint16_t)), cudaSuccess);
    cuda::pack16(cuda::half16(f), d.data(), bits, n, nullptr);
    std::vector<uint16_t> got(static_cast<std::size_t>(n));
    ASSERT_EQ(cudaMemcpy(got.data(), bits, got.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost), cudaSuccess);
    cuda::unpack16(cuda::half16(f), bits, back.data(), n, nullptr);
    cudaFree(bits);
    std::vector<float> rounded = x;
    round_all(f, std::span<float>(rounded));
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) continue;
      ASSERT_EQ(got[i], pack16(f, x[i])) << to_string(f) << " element " << i;
    }
    expect_same_bits(back.download(), rounded, to_string(f));
  }
}

// RoPE's rotated columns are rounded and no other: columns [3, 3 + 5) of 7 rows 11 apart.
TEST_F(CudaSixteen, RoundingColumnsLeavesTheOtherColumns) {
  const int64_t rows = 7, stride = 11, col0 = 3, width = 5;
  std::vector<float> x = awkward_values(rows * stride);
  x.resize(static_cast<std::size_t>(rows * stride));
  cuda::DeviceBuffer d(rows * stride);
  d.upload(x);
  cuda::round16_columns(cuda::Half16::kBf16, d.data(), rows, stride, col0, width, nullptr);
  std::vector<float> want = x;
  for (int64_t r = 0; r < rows; ++r) round_all(Format::kBf16, want.data() + r * stride + col0, width);
  expect_same_bits(d.download(), want, "columns");
}

// The linear layers' GEMM form on 16-bit inputs (GemmCompute::kBf16Inputs / kFp16Inputs): operands
// small integers times a power of two (exact in bf16 and fp16, 8 and 11 significant bits), their
// products' sums exact in the fp32 accumulator (|sum| < 2^24 units), so the result must equal the
// host's double product exactly; beta 1 adds the fp32 C unrounded (the weight gradients' fp32
// accumulation): C holds values with 24 significant bits, which a 16-bit C would lose.
TEST_F(CudaSixteen, SixteenBitInputsMultiplyExactlyAndAccumulateInFp32) {
  for (const auto& [compute, name] : {std::pair{cuda::GemmCompute::kBf16Inputs, "bf16"},
                                      std::pair{cuda::GemmCompute::kFp16Inputs, "fp16"}}) {
    const int64_t m = 96, n = 80, k = 200;
    std::mt19937 rng(9);
    std::uniform_int_distribution<int> small(-15, 15);
    std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)), c(static_cast<std::size_t>(m * n));
    for (float& v : a) v = static_cast<float>(small(rng)) * 0.25f;
    for (float& v : b) v = static_cast<float>(small(rng)) * 0.5f;
    for (float& v : c) v = 1.0f + std::ldexp(static_cast<float>(small(rng) + 16), -20);  // 24 significant bits
    cuda::DeviceBuffer da(m * k), db(k * n), dd(m * n);
    da.upload(a);
    db.upload(b);
    dd.upload(c);
    cuda::LtGemm gemm;
    const cuda::GemmShape shape{false, false, m, n, k, m, k, m, cuda::GemmType::kFp32, compute};
    gemm.run(shape, da.data(), db.data(), dd.data(), 1.0f, 1.0f, nullptr);
    std::printf("%s inputs: cuBLASLt ran compute %s\n", name,
                gemm.compute_used(shape) == compute ? "as asked" : "fp32 (no algorithm for the 16-bit inputs)");
    const std::vector<float> got = dd.download();
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        double want = c[static_cast<std::size_t>(i + j * m)];
        for (int64_t p = 0; p < k; ++p) want += static_cast<double>(a[static_cast<std::size_t>(i + p * m)]) * b[static_cast<std::size_t>(p + j * k)];
        ASSERT_EQ(got[static_cast<std::size_t>(i + j * m)], static_cast<float>(want)) << name << " (" << i << ", " << j << ")";
      }
    }
  }
}

// The working copy from the masters (StateMemory::round_copy), in place and apart: the device's
// equals the host's bit for bit.
TEST_F(CudaSixteen, WorkingParametersAreTheMastersRoundedAsOnTheHost) {
  for (Format f : {Format::kBf16, Format::kFp16}) {
    const std::vector<float> x = awkward_values(4099);
    const int64_t n = static_cast<int64_t>(x.size());
    cuda::DeviceMemory dev;
    HostMemory host;
    std::span<float> dm = dev.allocate(n), dw = dev.allocate(n), hm = host.allocate(n), hw = host.allocate(n);
    dev.upload(x, dm);
    host.upload(x, hm);
    dev.round_copy(dw, dm, f);
    host.round_copy(hw, hm, f);
    dev.round_copy(dm, dm, f);
    std::vector<float> got(x.size()), got_in_place(x.size());
    dev.download(dw, got);
    dev.download(dm, got_in_place);
    const std::vector<float> want(hw.begin(), hw.end());
    expect_same_bits(got, want, "apart");
    expect_same_bits(got_in_place, want, "in place");
  }
}

// ---- units ------------------------------------------------------------------------------------

double rel_error(const std::vector<float>& got, std::span<const float> want) {
  double e = 0, n = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    e += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    n += static_cast<double>(want[i]) * want[i];
  }
  return n > 0 ? std::sqrt(e / n) : std::sqrt(e);
}

bool all_of_format(Format f, const std::vector<float>& v) {
  for (float x : v) {
    if (round_to(f, x) != x) return false;
  }
  return true;
}

// Every unit of the tiny model, forward then backward, each side feeding its own outputs on: the
// device's 16-bit units against the host's (LayerT<float, HostKernels> with the same format) from
// the same 16-bit parameters. Rounding points up to the loss: the lookup (1), 10 a layer, the
// head's norm and logits (2), k = 3 + 10 L; each output and input gradient within 2·k·u of the
// host's, and made of 16-bit values (the stores were rounded); the fp32 weight gradients within the
// same bound.
void check_units(const spec::Model& m, bool split, Format f = Format::kBf16) {
  const ParamLayout layout(m);
  const test::Tokens tokens = test::random_tokens(m, test::tiny_dims(), 3);
  const TokenBatch tb = tokens.view();
  std::vector<float> p = test::random_params<float>(layout, 4);
  round_all(f, std::span<float>(p));
  HostKernels hk;
  hk.format = f;
  cuda::OpsContext ctx;
  cuda::DeviceKernels dk(ctx);
  dk.format = f;
  cuda::DeviceBuffer dp(static_cast<int64_t>(p.size())), dgrads(layout.size());
  dp.upload(p);
  std::vector<float> hgrads(p.size(), 0.0f);
  const int32_t units = static_cast<int32_t>(layout.end());
  std::vector<LayerT<float, HostKernels>> host;
  std::vector<LayerT<float, cuda::DeviceKernels>> dev;
  for (int32_t u = 0; u < units; ++u) {
    host.emplace_back(layout, u, hk);
    dev.emplace_back(layout, u, dk);
  }
  std::vector<UnitCacheT<float, HostKernels>> hc(static_cast<std::size_t>(units));
  std::vector<UnitCacheT<float, cuda::DeviceKernels>> dc(static_cast<std::size_t>(units));
  const double bound = 2.0 * (3 + 10 * m.layers) * (f == Format::kBf16 ? kBf16Roundoff : kFp16Roundoff);
  const std::string what = m.name + " " + to_string(f) + (split ? " split" : " full");
  double largest = 0;
  std::vector<float> hx;
  cuda::DeviceBuffer dx;
  for (int32_t u = 0; u < units; ++u) {
    const std::size_t i = static_cast<std::size_t>(u);
    std::vector<float> hy(static_cast<std::size_t>(host[i].output_size(tb.dims)));
    host[i].forward(tb, p, hx, hy, hc[i], CacheMode::kFull);
    cuda::DeviceBuffer dy(dev[i].output_size(tb.dims));
    dev[i].forward(tb, std::span<const float>(dp.view()), std::span<const float>(dx.view()), dy.view(), dc[i], CacheMode::kFull);
    const std::vector<float> got = dy.download();
    const double e = rel_error(got, hy);
    largest = std::max(largest, e);
    EXPECT_LE(e, bound) << what << ": unit " << u << " forward";
    if (u + 1 < units) {
      EXPECT_TRUE(all_of_format(f, got)) << what << ": unit " << u << " stored an unrounded output";
    }
    hx = std::move(hy);
    dx = std::move(dy);
  }
  std::vector<float> hd{0.5f};
  cuda::DeviceBuffer dd(1);
  dd.upload(hd);
  for (int32_t u = units - 1; u >= 0; --u) {
    const std::size_t i = static_cast<std::size_t>(u);
    std::vector<float> hdx(static_cast<std::size_t>(host[i].input_size(hc[i].dims)));
    cuda::DeviceBuffer ddx(dev[i].input_size(dc[i].dims));
    test::backward_both(split, host[i], p, hd, hdx, hgrads, hc[i], dev[i], dp, dd, ddx, dgrads, dc[i]);
    if (!hdx.empty()) {
      const std::vector<float> got = ddx.download();
      const double e = rel_error(got, hdx);
      largest = std::max(largest, e);
      EXPECT_LE(e, bound) << what << ": unit " << u << " input gradient";
      EXPECT_TRUE(all_of_format(f, got)) << what << ": unit " << u << " stored an unrounded input gradient";
    }
    hd = std::move(hdx);
    dd = std::move(ddx);
  }
  const double eg = rel_error(dgrads.download(), hgrads);
  EXPECT_LE(eg, bound) << what << ": parameter gradients";
  std::printf("%s units: largest relative difference %.3g, weight gradients %.3g (bound %.3g)\n", what.c_str(), largest,
              eg, bound);
}

TEST_F(CudaSixteen, GptUnitsInBf16AreTheHostsBf16Units) { check_units(test::tiny_gpt(), false); }
TEST_F(CudaSixteen, LlamaUnitsInBf16AreTheHostsBf16Units) { check_units(test::tiny_llama(), false); }
TEST_F(CudaSixteen, SplitBackwardInBf16IsTheHostsBf16) { check_units(test::tiny_llama(), true); }
TEST_F(CudaSixteen, GptUnitsInFp16AreTheHostsFp16Units) { check_units(test::tiny_gpt(), false, Format::kFp16); }

// ---- training ---------------------------------------------------------------------------------

using test::options;
using test::train;
using test::Trained;

program::Program tiny_program(spec::Dtype dtype, const std::string& recompute = "none", int zero = 0) {
  spec::Training t = test::tiny_training();
  t.dtype = dtype;
  return program::lower(test::tiny_model(), executed_training(t),
                        test::make_plan({.micro_batches = 8, .zero = zero, .recompute = recompute}));
}

// The loss's rounding points (test_mixed_precision.cpp's count): the working parameters (1), the
// lookup (1), 10 a layer, the head's norm and logits (2), k = 4 + 10 L. The GPU's 16-bit run and the
// CPU's differ by at most 2·k·u of the loss; each is a 16-bit run (its working parameters are 16-bit
// values, its losses differ from the fp32 run on the same device).
void check_training(spec::Dtype dtype, double roundoff, int zero = 0) {
  const int steps = 6;
  const double k = 4 + 10 * test::tiny_model().layers, bound = 2 * k * roundoff;
  for (const std::string recompute : {"none", "full"}) {
    const program::Program prog = tiny_program(dtype, recompute, zero);
    ASSERT_EQ(prog.training.dtype, dtype);
    ASSERT_EQ(cuda::cuda_unsupported(prog), "");
    const Trained cpu = train(prog, false, steps), gpu = train(prog, true, steps);
    const Trained gpu32 = train(tiny_program(spec::Dtype::kFp32, recompute, zero), true, steps);
    double largest = 0;
    bool differs_from_fp32 = false;
    for (int s = 0; s < steps; ++s) {
      const double rel = std::abs(gpu.losses[s] - cpu.losses[s]) / cpu.losses[s];
      EXPECT_LE(rel, bound) << spec::to_string(dtype) << " " << recompute << " step " << s;
      largest = std::max(largest, rel);
      differs_from_fp32 = differs_from_fp32 || gpu.losses[s] != gpu32.losses[s];
    }
    EXPECT_TRUE(differs_from_fp32) << "the device's " << spec::to_string(dtype) << " run computed what its fp32 run did";
    const Format f = format_of(dtype);
    for (float x : gpu.params) ASSERT_EQ(round_to(f, x), x) << "a working parameter that is not a 16-bit value";
    EXPECT_EQ(train(prog, true, steps).losses, gpu.losses) << "run to run";
    std::printf("%s %s recompute, GPU vs CPU over %d steps: largest relative loss difference %.3g (bound %.3g)\n",
                spec::to_string(dtype), recompute.c_str(), steps, largest, bound);
  }
}

TEST_F(CudaSixteen, Bf16TrainingIsTheCpuBf16Oracles) { check_training(spec::Dtype::kBf16, kBf16Roundoff); }
TEST_F(CudaSixteen, Fp16TrainingIsTheCpuFp16Oracles) { check_training(spec::Dtype::kFp16, kFp16Roundoff); }
// ZeRO-3's gathers and releases of 16-bit working parameters (a world of one: each gather is the
// rank's own shard).
TEST_F(CudaSixteen, Bf16ZeroThreeIsTheCpuBf16Oracles) { check_training(spec::Dtype::kBf16, kBf16Roundoff, 3); }

// bf16 learns on the device as on the CPU: the synthetic chain's loss from above 5 to below 2 in 200
// steps (the fp32 bar).
TEST_F(CudaSixteen, TheTinyModelLearnsInBf16) {
  const Trained r = train(tiny_program(spec::Dtype::kBf16), true, 200);
  EXPECT_GT(r.losses.front(), 5.0);
  EXPECT_LT(r.losses.back(), 2.0);
}

// NCCL's 16-bit wire at a world of one: an all-reduce and an all-gather leave each value rounded to
// the wire's format (the MPI wire's rule, communicator.hpp), a max all-reduce leaves fp32 values.
TEST_F(CudaSixteen, ASixteenBitNcclWireRoundsAsTheMpiWire) {
  const program::Program p = tiny_program(spec::Dtype::kBf16);
  LocalCommunicator control;
  cuda::NcclCommunicator nccl(p, control);
  const Channel dp{program::Group::kDp, program::Lane::kDpReduce}, gather{program::Group::kDp, program::Lane::kDpGather};
  for (Format f : {Format::kBf16, Format::kFp16}) {
    const std::vector<float> x = awkward_values(1001);
    std::vector<float> finite;
    for (float v : x) {
      if (std::isfinite(v) && std::abs(v) < 6e4f) finite.push_back(v);
    }
    std::vector<float> want = finite;
    round_all(f, std::span<float>(want));
    cuda::DeviceBuffer b(static_cast<int64_t>(finite.size()));
    b.upload(finite);
    Request r = nccl.iall_reduce(dp, b.view(), f);
    nccl.wait(r);
    expect_same_bits(b.download(), want, "all-reduce");
    b.upload(finite);
    const std::vector<int64_t> counts = {static_cast<int64_t>(finite.size())};
    r = nccl.iall_gather(gather, b.view(), counts, f);
    nccl.wait(r);
    expect_same_bits(b.download(), want, "all-gather");
  }
}

// A bf16 Program through NCCL (its wires 16-bit) equals the local transport on the same device.
TEST_F(CudaSixteen, Bf16TrainingThroughNcclEqualsTheLocalTransport) {
  const program::Program p = tiny_program(spec::Dtype::kBf16);
  EXPECT_EQ(train(p, true, 3, true).losses, train(p, true, 3, false).losses);
}

}  // namespace sixteen_test
}  // namespace stagecraft::executor
