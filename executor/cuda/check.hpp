// Error checks for CUDA runtime, cuBLAS(Lt) and NCCL calls: a failing call throws ExecutorError
// naming the call, the file and line, and the library's own error name and message.
#pragma once

#include <string>

#include <cuda_runtime_api.h>

#include "executor/errors.hpp"

namespace stagecraft::executor::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw ExecutorError(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + cudaGetErrorName(e) + " (" +
                      cudaGetErrorString(e) + ")");
}

}  // namespace stagecraft::executor::cuda

#define STAGECRAFT_CUDA_CHECK(call)                                                                   \
  do {                                                                                                \
    const cudaError_t stagecraft_cuda_e = (call);                                                     \
    if (stagecraft_cuda_e != cudaSuccess) ::stagecraft::executor::cuda::throw_cuda(stagecraft_cuda_e, #call, __FILE__, __LINE__); \
  } while (0)
