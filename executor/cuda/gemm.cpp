#include "executor/cuda/gemm.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "executor/cuda/check.hpp"

namespace stagecraft::executor::cuda {

namespace {

void check_lt(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw ExecutorError(std::string("cuBLASLt: ") + call + ": status " + std::to_string(static_cast<int>(s)));
  }
}

cudaDataType_t data_type(GemmType t) { return t == GemmType::kBf16 ? CUDA_R_16BF : CUDA_R_32F; }

cublasComputeType_t compute_type(GemmCompute c) {
  switch (c) {
    case GemmCompute::kBf16Inputs: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GemmCompute::kFp16Inputs: return CUBLAS_COMPUTE_32F_FAST_16F;
    case GemmCompute::kFp32: break;
  }
  return CUBLAS_COMPUTE_32F;
}

}  // namespace

struct LtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  GemmCompute compute = GemmCompute::kFp32;
  bool bias = false;  // the epilogue adds the bias
  void destroy_op() {
    if (op) cublasLtMatmulDescDestroy(op);
    op = nullptr;
  }
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

LtGemm::LtGemm() {
  check_lt(cublasLtCreate(&handle_), "cublasLtCreate");
  STAGECRAFT_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

LtGemm::Plan& LtGemm::plan_for(const GemmShape& s) {
  auto it = plans_.find(s.key());
  if (it != plans_.end()) return *it->second;
  auto p = std::make_unique<Plan>();
  // Stored shapes: A is m x k (k x m when transposed), B k x n (n x k when transposed).
  const uint64_t a_rows = static_cast<uint64_t>(s.trans_a ? s.k : s.m), a_cols = static_cast<uint64_t>(s.trans_a ? s.m : s.k);
  const uint64_t b_rows = static_cast<uint64_t>(s.trans_b ? s.n : s.k), b_cols = static_cast<uint64_t>(s.trans_b ? s.k : s.n);
  check_lt(cublasLtMatrixLayoutCreate(&p->a, data_type(s.ab), a_rows, a_cols, s.lda), "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&p->b, data_type(s.ab), b_rows, b_cols, s.ldb), "layout B");
  check_lt(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, static_cast<uint64_t>(s.m), static_cast<uint64_t>(s.n), s.ldd),
           "layout D");
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                sizeof workspace_bytes_),
           "set workspace");
  const uint32_t align = static_cast<uint32_t>(s.align);
  for (const cublasLtMatmulPreferenceAttributes_t a :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, a, &align, sizeof align), "set alignment");
  }
  const cublasOperation_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  // the compute asked for (with the bias epilogue, then without), then plain fp32 where cuBLASLt
  // has no algorithm for it
  struct Try {
    GemmCompute compute;
    bool bias;
  };
  std::vector<Try> tries;
  std::vector<GemmCompute> computes = {s.compute};
  if (s.compute != GemmCompute::kFp32) computes.push_back(GemmCompute::kFp32);
  for (GemmCompute c : computes) {
    if (s.bias) tries.push_back({c, true});
    tries.push_back({c, false});
  }
  for (const Try& t : tries) {
    p->destroy_op();
    check_lt(cublasLtMatmulDescCreate(&p->op, compute_type(t.compute), CUDA_R_32F), "cublasLtMatmulDescCreate");
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "set TRANSA");
    check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "set TRANSB");
    if (t.bias) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bias_type = CUDA_R_32F;
      check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), "set EPILOGUE");
      check_lt(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type),
               "set BIAS_DATA_TYPE");
    }
    found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(handle_, p->op, p->a, p->b, p->d, p->d, pref, 1, &result, &found);
    p->compute = t.compute;
    p->bias = t.bias;
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) break;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  check_lt(st, "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0) {
    throw ExecutorError("cuBLASLt has no algorithm for a " + std::to_string(s.m) + " x " + std::to_string(s.n) + " x " +
                        std::to_string(s.k) + " GEMM");
  }
  p->algo = result.algo;
  Plan& ref = *p;
  plans_.emplace(s.key(), std::move(p));
  return ref;
}

int alignment_of(std::initializer_list<const void*> pointers) {
  int align = 256;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    while (align > 1 && address % static_cast<std::uintptr_t>(align) != 0) align /= 2;
  }
  return align;
}

GemmCompute LtGemm::compute_used(const GemmShape& s) { return plan_for(s).compute; }

bool LtGemm::run(const GemmShape& s, const void* a, const void* b, float* d, float alpha, float beta, cudaStream_t stream,
                 const float* bias) {
  Plan& p = plan_for(s);
  if (p.bias) {
    check_lt(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "set BIAS_POINTER");
  }
  check_lt(cublasLtMatmul(handle_, p.op, &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d, &p.algo, workspace_,
                          workspace_bytes_, stream),
           "cublasLtMatmul");
  return p.bias;
}

}  // namespace stagecraft::executor::cuda
