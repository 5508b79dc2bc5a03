// cuBLASLt GEMMs: D = alpha * op(A) * op(B) + beta * C in column-major terms (the row-major forms
// of executor/model/ops.hpp map onto these, ../docs: CUDA backend), operands fp32 or bf16,
// accumulation and D in fp32 (CUBLAS_COMPUTE_32F, never TF32). A 16-bit Program's linear layers
// multiply values that are bf16 (fp16) already, held in fp32 (precision.hpp: every store rounded):
// GemmCompute::kBf16Inputs runs them on the tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF: the inputs
// converted to bf16, which loses nothing for such values, products accumulated in fp32), the
// arithmetic of a bf16 GEMM with fp32 accumulation; kFp16Inputs the same in fp16
// (CUBLAS_COMPUTE_32F_FAST_16F). Where cuBLASLt offers no algorithm for it the GEMM runs in
// CUBLAS_COMPUTE_32F, the same products summed in another order (LtGemm::compute_used says which). The algorithm for each shape is
// chosen once by cuBLASLt's heuristic and reused, so a shape always runs the same kernel (runs
// are reproducible); the workspace is 32 MiB (cuBLAS's recommendation for Hopper).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

namespace stagecraft::executor::cuda {

enum class GemmType { kFp32, kBf16 };
enum class GemmCompute { kFp32, kBf16Inputs, kFp16Inputs };

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;  // D is m x n, op(A) m x k, op(B) k x n
  int64_t lda = 0, ldb = 0, ldd = 0;
  GemmType ab = GemmType::kFp32;  // A and B; C and D are fp32
  GemmCompute compute = GemmCompute::kFp32;
  // D += a bias vector of m elements (one per row of D, broadcast over its n columns) in the GEMM's
  // epilogue (CUBLASLT_EPILOGUE_BIAS, fp32), where cuBLASLt has an algorithm for it
  bool bias = false;
  // The alignment in bytes every pointer of the call has (a power of two up to 256): the algorithm
  // is chosen for it (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), as views into the flat parameter
  // buffer sit at any float offset; alignment_of gives it.
  int align = 256;
  auto key() const { return std::tuple(trans_a, trans_b, m, n, k, lda, ldb, ldd, ab, compute, bias, align); }
};

// The largest power of two up to 256 dividing every address (a null pointer constrains nothing).
int alignment_of(std::initializer_list<const void*> pointers);

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // D = alpha op(A) op(B) + beta D (C is D itself, in place), on `stream`; with s.bias, + `bias`
  // added in the epilogue. Returns whether it was (false: the caller adds it; no algorithm had it).
  bool run(const GemmShape& s, const void* a, const void* b, float* d, float alpha, float beta, cudaStream_t stream,
           const float* bias = nullptr);
  // The compute type the plan of `s` runs (s.compute, or kFp32 where cuBLASLt had no algorithm for it).
  GemmCompute compute_used(const GemmShape& s);

 private:
  struct Plan;
  Plan& plan_for(const GemmShape& s);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = std::size_t{32} << 20;
  std::map<decltype(GemmShape{}.key()), std::unique_ptr<Plan>> plans_;
};

}  // namespace stagecraft::executor::cuda
