// The NCCL transport (executor/cuda/nccl_communicator.hpp) at a world of one rank, the one a
// single-GPU machine can run (NCCL 2.28 refuses two ranks on one GPU: docs/gpu.md): the bootstrap
// over a LocalCommunicator, every collective on device buffers (a world of one leaves them as they
// are: the sum over one member), the host double all-reduce through pinned staging, the refusals
// (16-bit wires, typed collectives), and the tiny model trained through it equal, bit for bit, to
// the same run over LocalCommunicator. Needs a device (label gpu).
#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/comm/local.hpp"
#include "executor/cuda/backend.hpp"
#include "executor/cuda/buffers.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/nccl_communicator.hpp"
#include "executor/errors.hpp"
#include "executor/runner.hpp"
#include "executor/runner/plans.hpp"

namespace stagecraft::executor {
namespace {

class CudaNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
  program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), test::make_plan({}));
};

TEST_F(CudaNccl, AWorldOfOneMovesEveryCollective) {
  LocalCommunicator control;
  cuda::NcclCommunicator nccl(prog, control);
  EXPECT_EQ(nccl.size(), 1);
  EXPECT_EQ(nccl.device(), 0);
  const std::vector<float> values = {1.5f, -2.25f, 3.0f, 0.125f, 7.0f};
  cuda::DeviceBuffer a(5), b(5);
  a.upload(values);
  const Channel dp{program::Group::kDp, program::Lane::kDpReduce};
  const std::vector<int64_t> one = {5};
  Request r = nccl.iall_gather({program::Group::kDp, program::Lane::kDpGather}, a.view(), one, Format::kFp32);
  nccl.wait(r);
  EXPECT_EQ(a.download(), values);
  r = nccl.ireduce_scatter(dp, a.view(), b.view(), one, Format::kFp32);
  nccl.wait(r);
  EXPECT_EQ(b.download(), values);  // the sum over one member
  r = nccl.iall_reduce(dp, b.view(), Format::kFp32);
  nccl.wait(r);
  r = nccl.iall_reduce_max({program::Group::kTp, program::Lane::kTp}, b.view());
  nccl.wait(r);
  EXPECT_EQ(b.download(), values);
  std::vector<double> norm = {2.5, 4.0};
  r = nccl.iall_reduce({program::Group::kWorld, program::Lane::kDpReduce}, std::span<double>(norm));
  nccl.wait(r);
  EXPECT_EQ(norm, (std::vector<double>{2.5, 4.0}));
  std::vector<int8_t> q(4);
  const std::vector<int64_t> four = {4};
  EXPECT_THROW(nccl.iall_gather_typed(dp, TypedSpan(std::span<int8_t>(q)), four), CommError);
}

TEST_F(CudaNccl, TrainingThroughNcclEqualsTheLocalTransport) {
  const program::Program p = program::lower(test::tiny_model(), executed_training(test::tiny_training()),
                                            test::make_plan({.micro_batches = 8, .zero = 0}));
  const Corpus corpus = Corpus::synthetic(p.model.vocab, p.model.seq_len, 7);
  RunnerOptions o;
  o.make_backend = [](const StageLayout& l, bool offload, MemoryTracker& m, bool fwd, int64_t slots) -> std::unique_ptr<Backend> {
    return std::make_unique<cuda::CudaBackend>(l, offload, m, fwd, slots);
  };
  std::vector<double> local, nccl;
  {
    LocalCommunicator comm;
    Runner runner(p, comm, corpus, o);
    for (int s = 0; s < 3; ++s) local.push_back(runner.step().loss);
  }
  {
    LocalCommunicator control;
    cuda::NcclCommunicator comm(p, control);
    Runner runner(p, comm, corpus, o);
    for (int s = 0; s < 3; ++s) nccl.push_back(runner.step().loss);
  }
  EXPECT_EQ(nccl, local);
}

}  // namespace
}  // namespace stagecraft::executor
