// The CUDA backend's device code against the CPU backend. Every test but CudaRuntime.* needs a
// device and skips without one (label gpu; CTest shows them as skipped, never as passed). Without
// a driver the runtime answers cudaErrorInsufficientDriver (35), which must read as "no device".
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/cpu_backend.hpp"
#include "executor/cuda/buffers.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/gemm.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/cuda/kernels/probe.hpp"
#include "executor/cuda/state_memory.hpp"
#include "executor/zero/stage_state.hpp"
#include "traces/probe.hpp"
#include "executor/errors.hpp"
#include "executor/runner/plans.hpp"
#include "support.hpp"

namespace stagecraft::executor {
namespace {

class RequireGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

// Runs everywhere: asking is never an error, and without a device the answer says why.
TEST(CudaRuntime, AskingForADeviceNeverThrows) {
  std::string why;
  const bool there = cuda::available(&why);
  if (!there) {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(cuda::device_info(), ExecutorError);
  }
}

using CudaDevice = RequireGpu;
using CudaKernels = RequireGpu;
using CudaGemm = RequireGpu;
using CudaState = RequireGpu;

TEST_F(CudaDevice, Describes) {
  const cuda::DeviceInfo d = cuda::device_info();
  std::printf("%s\n", cuda::describe(d).c_str());
  EXPECT_GT(d.sm_count, 0);
  EXPECT_GT(d.memory_bytes, 0);
  EXPECT_GT(d.nccl_version, 0);
}

// The element moves the interpreter's communication instructions make, on the device and in
// the CPU backend from the same inputs: equal bit for bit (one IEEE addition per element). The
// length is odd and spans several blocks of the grid-stride loop.
TEST_F(CudaKernels, ElementMovesEqualTheCpuBackend) {
  const int64_t n = 100003;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> a(static_cast<std::size_t>(n)), b(a.size());
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);

  const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), test::make_plan({.micro_batches = 8}));
  const StageLayout layout(prog, 0, 0, 0);
  MemoryTracker memory;
  CpuBackend cpu(layout, false, memory, false, 1);
  Buffer ca = cpu.alloc(n), cb = cpu.alloc(n);
  cpu.copy(ca.view(), a);
  cpu.copy(cb.view(), b);
  cpu.add(ca.view(), cb.view());
  cpu.fill(cb.view().subspan(17, 1000), -2.5f);
  cpu.add(ca.view().subspan(5, 5000), cb.view().subspan(0, 5000));

  cuda::DeviceBuffer da(n), db(n);
  da.upload(a);
  db.upload(b);
  cuda::add(da.data(), db.data(), n, nullptr);
  cuda::fill(db.data() + 17, -2.5f, 1000, nullptr);
  cuda::add(da.data() + 5, db.data(), 5000, nullptr);
  const std::vector<float> got = da.download();
  const std::span<const float> want = ca.view();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
  EXPECT_EQ(db.download(), std::vector<float>(cb.view().begin(), cb.view().end()));
}

// The probe's operands are small integers, exact in bf16, and their products' sums exact in the
// fp32 accumulator: the device GEMM must equal the exact product in every checked element, for a
// size that is not a multiple of the tile sizes.
TEST_F(CudaGemm, ProbeOperandsMultiplyExactlyInBf16AndFp32) {
  for (const bool bf16 : {true, false}) {
    const int64_t n = 1000;
    const int64_t elems = bf16 ? (n * n + 1) / 2 : n * n;
    cuda::DeviceBuffer a(elems), b(elems), d(n * n);
    cuda::fill_probe_operands(a.data(), b.data(), n, bf16, nullptr);
    cuda::LtGemm gemm;
    gemm.run({false, false, n, n, n, n, n, n, bf16 ? cuda::GemmType::kBf16 : cuda::GemmType::kFp32}, a.data(), b.data(),
             d.data(), 1.0f, 0.0f, nullptr);
    const std::vector<float> c = d.download();
    EXPECT_EQ(traces::probe_gemm_wrong(n, [&](int64_t i, int64_t j) { return c[static_cast<std::size_t>(i + j * n)]; }), 0)
        << (bf16 ? "bf16" : "fp32");
  }
}

// D = A^T B + D (beta 1, the weight-gradient accumulation form) in fp32 on random values against
// a double-precision host product: relative error of the whole result below 1e-6 (fp32 sums of 96
// terms; no TF32).
TEST_F(CudaGemm, TransposedFp32AccumulatesAsTheHostProduct) {
  const int64_t m = 70, n = 50, k = 96;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(k * m)), b(static_cast<std::size_t>(k * n)), d0(static_cast<std::size_t>(m * n));
  for (float& v : a) v = normal(rng);  // stored k x m (column-major), used transposed
  for (float& v : b) v = normal(rng);  // k x n
  for (float& v : d0) v = normal(rng);
  cuda::DeviceBuffer da(k * m), db(k * n), dd(m * n);
  da.upload(a);
  db.upload(b);
  dd.upload(d0);
  cuda::LtGemm gemm;
  gemm.run({true, false, m, n, k, k, k, m, cuda::GemmType::kFp32}, da.data(), db.data(), dd.data(), 1.0f, 1.0f, nullptr);
  const std::vector<float> got = dd.download();
  double err = 0, norm = 0;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      double want = d0[static_cast<std::size_t>(i + j * m)];
      for (int64_t p = 0; p < k; ++p) {
        want += static_cast<double>(a[static_cast<std::size_t>(p + i * k)]) * b[static_cast<std::size_t>(p + j * k)];
      }
      const double diff = got[static_cast<std::size_t>(i + j * m)] - want;
      err += diff * diff;
      norm += want * want;
    }
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-6);
}

// StageState on the device and on the host from the same initial values and gradients: two
// AdamW steps with weight decay and clipping leave the same owned state bit for bit (the kernel
// repeats the host's operations one rounding at a time); the gradient norm agrees to double
// rounding (a different summation order); packing the reduced gradients gives the same values.
// ZeRO-0 (one rank) and ZeRO-3 over dp 2 with persistent tensors (rank 1's view).
TEST_F(CudaState, OptimizerAndNormEqualTheHost) {
  for (const int zero : {0, 3}) {
    const int dp = zero == 3 ? 2 : 1;
    const program::Program prog = program::lower(
        test::tiny_model(), test::tiny_training(),
        test::make_plan({.dp = dp, .micro_batches = 8 / dp, .zero = zero, .persistence = 100}));
    const StageLayout layout(prog, 0, dp - 1, 0);
    MemoryTracker host_tracker, device_tracker;
    cuda::DeviceMemory device_memory;
    StageState host(layout, false, host_tracker);
    StageState device(layout, false, device_tracker, false, &device_memory);
    host.init_params(9);
    device.init_params(9);
    std::mt19937 rng(zero + 1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    auto random_grads = [&](std::span<float> h, std::span<float> d) {
      std::vector<float> g(h.size());
      for (float& x : g) x = normal(rng);
      std::copy(g.begin(), g.end(), h.begin());
      device_memory.upload(g, d);
    };
    const AdamWConfig cfg{1e-3, 0.9, 0.95, 1e-8, 0.1};
    for (int64_t step = 1; step <= 2; ++step) {
      random_grads(host.grads(), device.grads());
      random_grads(host.shard_grads(), device.shard_grads());
      random_grads(host.persistent_grads(), device.persistent_grads());
      const double hn = host.owned_grad_norm_sq(), dn = device.owned_grad_norm_sq();
      EXPECT_NEAR(dn, hn, 1e-12 * hn) << "zero " << zero;
      host.optimizer_step(cfg, step, 0.7f);
      device.optimizer_step(cfg, step, 0.7f);
    }
    EXPECT_EQ(device.owned_state(), host.owned_state()) << "zero " << zero;
    const std::vector<Range> ranges = {{0, layout.padded_elems()}};
    std::vector<float> hp(static_cast<std::size_t>(layout.padded_elems()));
    host.pack_reduced_grads(ranges, hp);
    cuda::DeviceBuffer dp_buf(layout.padded_elems());
    device.pack_reduced_grads(ranges, dp_buf.view());
    EXPECT_EQ(dp_buf.download(), hp) << "zero " << zero;
  }
}

}  // namespace
}  // namespace stagecraft::executor
