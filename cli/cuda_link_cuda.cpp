#include <cuda_runtime_api.h>

#include "cli/cuda_link.hpp"
#include "cli/common.hpp"
#include "executor/cuda/backend.hpp"
#include "executor/cuda/buffers.hpp"
#include "executor/cuda/check.hpp"
#include "executor/cuda/device.hpp"
#include "executor/cuda/gemm.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/cuda/kernels/probe.hpp"
#include "executor/cuda/nccl_communicator.hpp"

namespace stagecraft::cli {

namespace {

namespace cu = executor::cuda;

// Times one enqueued piece of work on `stream` by a pair of events (resolution about 0.5 us).
class EventTimer {
 public:
  EventTimer() {
    STAGECRAFT_CUDA_CHECK(cudaEventCreate(&start_));
    STAGECRAFT_CUDA_CHECK(cudaEventCreate(&end_));
  }
  ~EventTimer() {
    cudaEventDestroy(end_);
    cudaEventDestroy(start_);
  }
  template <typename F>
  double seconds(cudaStream_t stream, F&& enqueue) {
    STAGECRAFT_CUDA_CHECK(cudaEventRecord(start_, stream));
    enqueue();
    STAGECRAFT_CUDA_CHECK(cudaEventRecord(end_, stream));
    STAGECRAFT_CUDA_CHECK(cudaEventSynchronize(end_));
    float ms = 0;
    STAGECRAFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, end_));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

class CudaCompute final : public traces::ProbeCompute {
 public:
  explicit CudaCompute(const cu::DeviceInfo& d) : info_(d) { STAGECRAFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaCompute() override {
    a_ = {};
    b_ = {};
    d_ = {};
    cudaStreamDestroy(stream_);
  }
  std::string dtype() const override { return "bf16"; }
  std::string device() const override {
    return info_.name + " (cuBLASLt " + std::to_string(info_.cublaslt_version) + ", bf16 operands, fp32 accumulate)";
  }
  // Two bf16 operands and the fp32 result.
  double gemm_bytes(int64_t n) const override { return 8.0 * static_cast<double>(n) * static_cast<double>(n); }
  void prepare_gemm(int64_t n) override {
    n_ = n;
    // bf16 operands: n*n halves each, in buffers of fp32 elements (rounded up).
    const int64_t halves = (n * n + 1) / 2;
    a_ = cu::DeviceBuffer(halves);
    b_ = cu::DeviceBuffer(halves);
    d_ = cu::DeviceBuffer(n * n);
    cu::fill_probe_operands(a_.data(), b_.data(), n, true, stream_);
    STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    shape_ = {false, false, n, n, n, n, n, n, cu::GemmType::kBf16};
  }
  double gemm() override {
    return timer_.seconds(stream_, [&] { gemm_.run(shape_, a_.data(), b_.data(), d_.data(), 1.0f, 0.0f, stream_); });
  }
  int64_t gemm_wrong() override {
    const std::vector<float> c = d_.download();
    const int64_t n = n_;
    return traces::probe_gemm_wrong(n, [&](int64_t i, int64_t j) { return c[static_cast<std::size_t>(i + j * n)]; });
  }
  void prepare_triad(int64_t elems) override {
    a_ = cu::DeviceBuffer(elems);
    b_ = cu::DeviceBuffer(elems);
    d_ = cu::DeviceBuffer(elems);
    cu::fill(b_.data(), 1.0f, elems, stream_);
    cu::fill(d_.data(), 2.0f, elems, stream_);
    STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  double triad() override {
    return timer_.seconds(stream_, [&] { cu::triad(a_.data(), b_.data(), d_.data(), 3.0f, a_.size(), stream_); });
  }

 private:
  cu::DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  cu::LtGemm gemm_;
  EventTimer timer_;
  cu::GemmShape shape_;
  int64_t n_ = 0;
  cu::DeviceBuffer a_, b_, d_;
};

}  // namespace

std::unique_ptr<traces::ProbeCompute> make_cuda_probe_compute(std::string& why) {
  if (!cu::available(&why)) return nullptr;
  return std::make_unique<CudaCompute>(cu::device_info(0));
}

std::string cuda_plan_unsupported(const spec::Plan& plan) { return cu::plan_unsupported(plan); }

std::string use_cuda_backend(const program::Program& prog, double needed_bytes, executor::RunnerOptions& o) {
  if (std::string why = cu::cuda_unsupported(prog); !why.empty()) return why;
  const double free = static_cast<double>(cu::free_bytes());
  if (needed_bytes > free) {
    return "this run needs about " + short_bytes(needed_bytes) + " on the GPU (the simulator's memory model of this plan), and " +
           cu::device_info(0).name + " has " + short_bytes(free) + " free; use a smaller model, micro-batch or recompute";
  }
  o.make_backend = [](const executor::StageLayout& layout, bool offload, executor::MemoryTracker& memory, bool forward_only,
                      int64_t slots) -> std::unique_ptr<executor::Backend> {
    return std::make_unique<cu::CudaBackend>(layout, offload, memory, forward_only, slots);
  };
  return "";
}

std::unique_ptr<executor::Communicator> make_cuda_communicator(const program::Program& prog, executor::Communicator& control,
                                                               std::string& why) {
  if (!cu::available(&why)) return nullptr;
  return std::make_unique<cu::NcclCommunicator>(prog, control);
}

}  // namespace stagecraft::cli
