// The CUDA device this process computes on: whether there is one, and what it is. No CUDA types
// in this header, so host code and tests include it without the toolkit's headers.
#pragma once

#include <cstdint>
#include <string>

namespace stagecraft::executor::cuda {

// Whether a CUDA device can be used; when not, `why` (if given) says what the runtime answered.
// Without a driver (no libcuda.so.1) cudaGetDeviceCount fails with cudaErrorInsufficientDriver
// (35) and a count of 0: that is "no device", not an error of the caller.
bool available(std::string* why = nullptr);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int clock_khz = 0;          // the SM clock the runtime reports (its maximum)
  int runtime_version = 0;    // cudaRuntimeGetVersion, e.g. 13000
  int driver_version = 0;     // cudaDriverGetVersion
  int nccl_version = 0;       // ncclGetVersion, e.g. 22809
  std::size_t cublaslt_version = 0;  // cublasLtGetVersion, e.g. 130100
};

// Device `ordinal`'s properties and the libraries' run-time versions; throws ExecutorError when
// there is no such device.
DeviceInfo device_info(int ordinal = 0);
std::string describe(const DeviceInfo& d);
// Free bytes on the current device now (cudaMemGetInfo).
int64_t free_bytes();

}  // namespace stagecraft::executor::cuda
