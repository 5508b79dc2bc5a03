// The CUDA backend's device code against the CPU backend. Every test but CudaRuntime.* needs a
// device and skips without one (label gpu; CTest shows them as skipped, never as passed). Without
// a driver the runtime answers cudaErrorInsufficientDriver (35), which must read as "no device".
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/cpu_backend.hpp"
#include "executor/cuda/buffers.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
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

}  // namespace
}  // namespace stagecraft::executor
