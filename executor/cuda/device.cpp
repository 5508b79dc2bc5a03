#include "executor/cuda/device.hpp"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "executor/cuda/check.hpp"

namespace stagecraft::executor::cuda {

bool available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) {
      const bool absent = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
      *why = std::string(absent ? "no NVIDIA driver or GPU on this machine (" : "the CUDA runtime cannot start (") +
             "cudaGetDeviceCount: " + cudaGetErrorName(e) + ", " + cudaGetErrorString(e) + ")";
    }
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  if (count == 0) {
    if (why) *why = "cudaGetDeviceCount: 0 devices";
    return false;
  }
  return true;
}

DeviceInfo device_info(int ordinal) {
  std::string why;
  if (!available(&why)) throw ExecutorError("no CUDA device: " + why);
  cudaDeviceProp p{};
  STAGECRAFT_CUDA_CHECK(cudaGetDeviceProperties(&p, ordinal));
  DeviceInfo d;
  d.ordinal = ordinal;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  d.l2_bytes = p.l2CacheSize;
  STAGECRAFT_CUDA_CHECK(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, ordinal));
  STAGECRAFT_CUDA_CHECK(cudaRuntimeGetVersion(&d.runtime_version));
  STAGECRAFT_CUDA_CHECK(cudaDriverGetVersion(&d.driver_version));
  if (ncclGetVersion(&d.nccl_version) != ncclSuccess) d.nccl_version = 0;
  d.cublaslt_version = cublasLtGetVersion();
  return d;
}

std::string describe(const DeviceInfo& d) {
  return "device " + std::to_string(d.ordinal) + ": " + d.name + ", sm_" + std::to_string(d.cc_major) +
         std::to_string(d.cc_minor) + ", " + std::to_string(d.sm_count) + " SMs at up to " +
         std::to_string(d.clock_khz / 1000) + " MHz, " + std::to_string(d.memory_bytes >> 20) + " MiB, L2 " +
         std::to_string(d.l2_bytes >> 20) + " MiB; CUDA runtime " + std::to_string(d.runtime_version) + ", driver " +
         std::to_string(d.driver_version) + ", NCCL " + std::to_string(d.nccl_version) + ", cuBLASLt " +
         std::to_string(d.cublaslt_version);
}

int64_t free_bytes() {
  std::size_t free = 0, total = 0;
  STAGECRAFT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

}  // namespace stagecraft::executor::cuda
