// The 16-bit formats of precision.hpp as the device kernels (kernels/elementwise.hpp) and the GEMMs
// (gemm.hpp) name them.
#pragma once

#include "executor/cuda/gemm.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/errors.hpp"
#include "executor/precision.hpp"

namespace stagecraft::executor::cuda {

inline Half16 half16(Format f) {
  if (f == Format::kFp32) throw ExecutorError("half16: fp32 is not a 16-bit format");
  return f == Format::kFp16 ? Half16::kFp16 : Half16::kBf16;
}
inline GemmCompute gemm_compute(Format f) {
  switch (f) {
    case Format::kBf16: return GemmCompute::kBf16Inputs;
    case Format::kFp16: return GemmCompute::kFp16Inputs;
    case Format::kFp32: break;
  }
  return GemmCompute::kFp32;
}

}  // namespace stagecraft::executor::cuda
