// The Program interpreter on the CUDA backend against the same interpreter on the CPU backend:
// one rank, the tiny model, fp32, ten steps under 1F1B with ZeRO 0 and with full recompute. The
// losses agree within 1e-5 relative and the parameters within 1e-4 (relative norm), the issue's
// fp32 bounds; the same CUDA run twice gives identical losses (deterministic kernels). Training
// learns (the loss of the synthetic chain falls from above 5 to below 2 in 200 steps, the CPU
// executor's bar), and save, load, continue equals continuing, bit for bit. Needs a device
// (label gpu).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/checkpoint.hpp"
#include "executor/comm/local.hpp"
#include "executor/cuda/backend.hpp"
#include "executor/cuda/buffers.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/event_clock.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/runner.hpp"
#include "executor/runner/plans.hpp"
#include "device_runs.hpp"

namespace stagecraft::executor {
namespace {

using test::options;
using test::train;
using test::Trained;

class CudaRunner : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
};

TEST_F(CudaRunner, TrainingEqualsTheCpuBackend) {
  for (const std::string recompute : {"none", "full"}) {
    const program::Program prog = program::lower(test::tiny_model(), executed_training(test::tiny_training()),
                                                 test::make_plan({.micro_batches = 8, .recompute = recompute}));
    ASSERT_EQ(cuda::cuda_unsupported(prog), "");
    const Trained cpu = train(prog, false, 10), gpu = train(prog, true, 10);
    for (std::size_t i = 0; i < cpu.losses.size(); ++i) {
      EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 1e-5 * std::abs(cpu.losses[i])) << recompute << " step " << i + 1;
    }
    double e = 0, n = 0;
    for (std::size_t i = 0; i < cpu.params.size(); ++i) {
      e += (gpu.params[i] - cpu.params[i]) * (gpu.params[i] - cpu.params[i]);
      n += static_cast<double>(cpu.params[i]) * cpu.params[i];
    }
    EXPECT_LT(std::sqrt(e / n), 1e-4) << recompute;
    EXPECT_EQ(train(prog, true, 10).losses, gpu.losses) << recompute << ": run to run";
  }
}

TEST_F(CudaRunner, TheTinyModelLearns) {
  const program::Program prog = program::lower(test::tiny_model(), executed_training(test::tiny_training()),
                                               test::make_plan({.micro_batches = 8}));
  const Trained r = train(prog, true, 200);
  EXPECT_GT(r.losses.front(), 5.0);
  EXPECT_LT(r.losses.back(), 2.0);
}

TEST_F(CudaRunner, SaveLoadContinueEqualsContinuingBitForBit) {
  const program::Program prog = program::lower(test::tiny_model(), executed_training(test::tiny_training()),
                                               test::make_plan({.micro_batches = 8}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "stagecraft-cuda-resume";
  std::filesystem::remove_all(dir);
  Runner first(prog, comm, corpus, options(true));
  first.step();
  first.step();
  save_checkpoint(first, dir.string(), {"synthetic", 7});
  const double straight = first.step().loss;
  Runner resumed(prog, comm, corpus, options(true));
  load_checkpoint(resumed, dir.string(), {"synthetic", 7});
  EXPECT_EQ(resumed.steps_done(), 2);
  EXPECT_EQ(resumed.step().loss, straight);
  EXPECT_EQ(resumed.backend().params_host(), first.backend().params_host());
  std::filesystem::remove_all(dir);
}

// Runs everywhere (the plan is refused before the device is asked for).
// Plans of several ranks run over NCCL; what the backend cannot run is refused by the plan field:
// tensor and context parallelism, ZeRO++'s quantized collectives (their payloads are host memory).
TEST(CudaRuntime, PlansItCannotRunAreRefusedWithTheField) {
  EXPECT_EQ(cuda::plan_unsupported(test::make_plan({.dp = 2, .micro_batches = 4})), "");
  EXPECT_EQ(cuda::plan_unsupported(test::make_plan({.tp = 2})).rfind("/tp: ", 0), 0u);
  EXPECT_EQ(cuda::plan_unsupported(test::make_plan({.cp = 2})).rfind("/cp: ", 0), 0u);
  test::PlanSpec qwz;
  qwz.dp = 2, qwz.zero = 3, qwz.qwz = true;
  EXPECT_EQ(cuda::plan_unsupported(test::make_plan(qwz)).rfind("/zero: ", 0), 0u);
}

// The device's caching pool serves a step whose sizes the last one had: after the first step no
// cudaMalloc (and no cudaFree, which synchronises the device) — buffers, unit caches and state alike.
TEST_F(CudaRunner, ASecondStepAllocatesNothing) {
  const program::Program prog = program::lower(test::tiny_model(), executed_training(test::tiny_training()),
                                               test::make_plan({.micro_batches = 8, .zero = 0}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  Runner runner(prog, comm, corpus, options(true));
  runner.step();
  const BlockPool::Stats one = cuda::device_pool().stats();
  runner.step();
  runner.step();
  const BlockPool::Stats three = cuda::device_pool().stats();
  EXPECT_EQ(three.raw_allocations, one.raw_allocations);
  EXPECT_EQ(three.raw_releases, one.raw_releases);
  EXPECT_GT(three.reuses, one.reuses);
}

// The event clock on its own: a fill of 2^26 floats (256 MiB) marked on one stream, then an idle
// gap the host makes, then a second fill on another stream. Each lasts more than 0 and at most the
// host's wall time around it; the second starts after the first ended (the host waited between
// them); both lie after the origin, the host's time at step_begin.
TEST_F(CudaRunner, TheEventClockTimesWorkOnAnyStream) {
  cuda::EventClock& clock = cuda::event_clock();
  const int64_t n = int64_t{1} << 26;
  cuda::DeviceBuffer a(n);
  cudaStream_t s1 = nullptr, s2 = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  const auto host_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  clock.step_begin(host_ns());
  const int64_t t0 = host_ns();
  clock.start(1, s1);
  cuda::fill(a.data(), 1.0f, n, s1);
  clock.end(1, s1);
  ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
  const int64_t t1 = host_ns();
  clock.start(2, s2);
  cuda::fill(a.data(), 2.0f, n, s2);
  clock.end(2, s2);
  ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
  const int64_t t2 = host_ns();
  clock.start(3, s2);  // started, never ended: not returned
  const auto times = clock.step_end();
  ASSERT_EQ(times.size(), 2u);
  const auto [b1, e1] = times.at(1);
  const auto [b2, e2] = times.at(2);
  EXPECT_GT(e1, b1);
  EXPECT_GT(e2, b2);
  EXPECT_LE(e1 - b1, t1 - t0);
  EXPECT_LE(e2 - b2, t2 - t1);
  EXPECT_GE(b2, e1);
  EXPECT_GE(b1, t0 - 1000);  // after the origin, the host time step_begin was given (t0 is read after it; 1 us of resolution)
  std::printf("fill of 256 MiB: %.1f us and %.1f us on the device, %.1f us and %.1f us on the host\n", (e1 - b1) / 1e3,
              (e2 - b2) / 1e3, (t1 - t0) / 1e3, (t2 - t1) / 1e3);
  EXPECT_FALSE(clock.on());
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// A traced run on the device: every compute instruction is timed by the device's events, which
// never overlap on the one compute stream and each lasts more than nothing.
TEST_F(CudaRunner, ATracedStepTimesItsComputeOnTheDevice) {
  const program::Program prog = program::lower(test::tiny_model(), executed_training(test::tiny_training()),
                                               test::make_plan({.micro_batches = 8}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  RunnerOptions o = options(true);
  o.trace = true;
  Runner runner(prog, comm, corpus, o);
  runner.step();
  std::vector<std::pair<int64_t, int64_t>> compute;
  for (const trace::Event& e : runner.tracer().events()) {
    if (e.lane == program::Lane::kCompute) compute.push_back({e.start_ns, e.end_ns});
  }
  ASSERT_FALSE(compute.empty());
  std::sort(compute.begin(), compute.end());
  for (std::size_t i = 0; i < compute.size(); ++i) {
    EXPECT_GT(compute[i].second, compute[i].first) << "instruction " << i;
    if (i > 0) {
      EXPECT_GE(compute[i].first, compute[i - 1].second) << "instruction " << i;
    }
  }
}

// Asynchronous issue: while a CUDA backend lives, device memory is ordered on its compute stream; a
// step returns with that stream's work done (finish_step), so step times are the work's; the
// backend gone, memory goes back to the legacy stream's synchronous calls.
TEST_F(CudaRunner, AStepEndsWithItsQueuedWorkDone) {
  const program::Program prog = program::lower(test::tiny_model(), executed_training(test::tiny_training()),
                                               test::make_plan({.micro_batches = 8}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  {
    LocalCommunicator comm;
    Runner runner(prog, comm, corpus, options(true));
    ASSERT_NE(cuda::device_stream(), nullptr);
    for (int s = 0; s < 3; ++s) {
      runner.step();
      EXPECT_EQ(cudaStreamQuery(cuda::device_stream()), cudaSuccess) << "step " << s + 1;
    }
  }
  EXPECT_EQ(cuda::device_stream(), nullptr);
}

}  // namespace
}  // namespace stagecraft::executor
