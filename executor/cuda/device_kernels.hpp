// DeviceKernels: the kernel set (model/host_kernels.hpp's calls) over device memory — the CUDA
// ops (ops.hpp) on one OpsContext's stream, vectors in GPU memory. With it the units' composition
// (model/units_impl.hpp) and LayerT run on the device unchanged: LayerT<float, DeviceKernels>.
// DeviceKernels is StoredKernels<DeviceOps> (model/stored_kernels.hpp): with `format` bf16 or fp16
// every store the host oracle rounds is rounded here by a device pass (kernels/elementwise.hpp
// round16), and the linear layers' GEMMs take their 16-bit inputs on the tensor cores
// (GemmCompute::kBf16Inputs). The values are 16-bit ones held in fp32 storage: the arithmetic of a
// bf16 run, the memory and HBM traffic of an fp32 one (docs/gpu.md). The attention's GEMMs stay
// fp32, as the oracle's probabilities are. The tensor-parallel head stays on the host kernels
// (refused here).
#pragma once

#include <cstdint>
#include <utility>

#include <cuda_runtime_api.h>

#include "executor/cuda/buffers.hpp"
#include "executor/cuda/check.hpp"
#include "executor/cuda/formats.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/cuda/ops.hpp"
#include "executor/errors.hpp"
#include "executor/model/layers.hpp"
#include "executor/model/ops.hpp"
#include "executor/model/stored_kernels.hpp"
#include "executor/precision.hpp"

namespace stagecraft::executor::cuda {

// A std::vector-like array of T in device memory: resize keeps the elements it had and zeroes new
// ones (as std::vector value-initialises them); storage grows, never shrinks, until released.
template <typename T>
class DeviceVector {
 public:
  DeviceVector() = default;
  ~DeviceVector() { device_pool().release(data_); }
  DeviceVector(DeviceVector&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), capacity_(std::exchange(o.capacity_, 0)) {}
  DeviceVector& operator=(DeviceVector&& o) noexcept {
    swap(o);
    return *this;
  }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;

  void swap(DeviceVector& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  void resize(std::size_t n) {
    if (n > capacity_) {
      T* fresh = static_cast<T*>(device_pool().allocate(n * sizeof(T)));
      if (size_ > 0) {
        STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(fresh, data_, size_ * sizeof(T), cudaMemcpyDeviceToDevice, device_stream()));
      }
      device_pool().release(data_);
      data_ = fresh;
      capacity_ = n;
    }
    if (n > size_) {
      STAGECRAFT_CUDA_CHECK(cudaMemsetAsync(data_ + size_, 0, (n - size_) * sizeof(T), device_stream()));
      // on the legacy stream work on non-blocking streams does not wait for it: done before return
      if (device_stream() == nullptr) STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    }
    size_ = n;
  }
  void clear() { size_ = 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0, capacity_ = 0;
};

class DeviceOps {
 public:
  static constexpr bool kHost = false;
  template <typename T>
  using Vec = DeviceVector<T>;

  explicit DeviceOps(OpsContext& ctx) : c_(ctx) {}
  OpsContext& context() { return c_; }

  // What stored values are rounded to (StoredKernels rounds them).
  Format format = Format::kFp32;
  void round(float* x, int64_t count) const {
    if (format != Format::kFp32) round16(half16(format), x, count, c_.stream());
  }
  void round_columns(float* x, int64_t n, int64_t row_stride, int64_t col0, int64_t width) const {
    if (format != Format::kFp32) round16_columns(half16(format), x, n, row_stride, col0, width, c_.stream());
  }

  void linear_forward(const float* x, const float* w, const float* b, float* y, int64_t n, int64_t in, int64_t out) {
    ops::linear_forward(c_, x, w, b, y, n, in, out, gemm_compute(format));
  }
  void linear_backward_input(const float* dy, const float* w, float* dx, int64_t n, int64_t in, int64_t out, bool acc) {
    ops::linear_backward_input(c_, dy, w, dx, n, in, out, acc, gemm_compute(format));
  }
  void linear_backward_weight(const float* x, const float* dy, float* dw, float* db, int64_t n, int64_t in, int64_t out) {
    ops::linear_backward_weight(c_, x, dy, dw, db, n, in, out, gemm_compute(format));
  }
  void norm_forward(bool ln, double eps, const float* x, const float* w, const float* b, float* y, float* xhat, float* rstd,
                    int64_t n, int64_t c) {
    ops::norm_forward(c_, ln, eps, x, w, b, y, xhat, rstd, n, c);
  }
  void norm_backward_input(bool ln, const float* dy, const float* w, const float* xhat, const float* rstd, float* dx,
                           int64_t n, int64_t c, bool acc) {
    ops::norm_backward_input(c_, ln, dy, w, xhat, rstd, dx, n, c, acc);
  }
  void norm_backward_weight(const float* dy, const float* xhat, float* dw, float* db, int64_t n, int64_t c) {
    ops::norm_backward_weight(c_, dy, xhat, dw, db, n, c);
  }
  void gelu_forward(const float* u, float* out, int64_t n, bool exact) { ops::gelu_forward(c_, u, out, n, exact); }
  void gelu_backward(const float* u, const float* d, float* du, int64_t n, bool exact) {
    ops::gelu_backward(c_, u, d, du, n, exact);
  }
  void swiglu_forward(const float* g, const float* u, float* out, int64_t n) { ops::swiglu_forward(c_, g, u, out, n); }
  void swiglu_backward(const float* g, const float* u, const float* d, float* dg, float* du, int64_t n) {
    ops::swiglu_backward(c_, g, u, d, dg, du, n);
  }
  void relu_forward(const float* u, float* out, int64_t n) { ops::relu_forward(c_, u, out, n); }
  void relu_backward(const float* u, const float* d, float* du, int64_t n) { ops::relu_backward(c_, u, d, du, n); }
  void geglu_forward(const float* g, const float* u, float* out, int64_t n, bool exact) {
    ops::geglu_forward(c_, g, u, out, n, exact);
  }
  void geglu_backward(const float* g, const float* u, const float* d, float* dg, float* du, int64_t n, bool exact) {
    ops::geglu_backward(c_, g, u, d, dg, du, n, exact);
  }
  void rope(float* x, int64_t n, int64_t seq, int64_t stride, int64_t col0, int64_t heads, int64_t d, bool inverse,
            double base) {
    ops::rope(c_, x, n, seq, stride, col0, heads, d, inverse, base);
  }
  void attention_forward(const float* qkv, float* probs, float* out, const executor::ops::AttentionShape& a) {
    ops::attention_forward(c_, qkv, probs, out, shape(a));
  }
  void attention_backward(const float* qkv, const float* probs, const float* dout, float* dqkv,
                          const executor::ops::AttentionShape& a) {
    ops::attention_backward(c_, qkv, probs, dout, dqkv, shape(a));
  }
  float softmax_cross_entropy(float* logits, const int32_t* targets, int64_t n, int64_t v) {
    return ops::softmax_cross_entropy(c_, logits, targets, n, v);
  }
  void softmax_cross_entropy_backward(const float* probs, const int32_t* targets, float scale, float* d, int64_t n,
                                      int64_t v) {
    ops::softmax_cross_entropy_backward(c_, probs, targets, scale, d, n, v);
  }
  // `pos` (context parallelism's positions) is the host kernels' only: cp is refused on the device.
  void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* y, int64_t n, int64_t h,
                         int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset, const int64_t* pos = nullptr) {
    if (pos != nullptr) throw ExecutorError("DeviceKernels: the embedding at context-parallel positions runs on the host only");
    ops::embedding_forward(c_, tokens, wte, wpe, y, n, h, seq, vocab0, vocab, pos_offset);
  }
  void embedding_backward_weight(const int32_t* tokens, const float* dy, float* dwte, float* dwpe, int64_t n, int64_t h,
                                 int64_t seq, int64_t vocab0, int64_t vocab, int64_t pos_offset) {
    ops::embedding_backward_weight(c_, tokens, dy, dwte, dwpe, n, h, seq, vocab0, vocab, pos_offset);
  }
  void add(float* y, const float* x, int64_t n) { ops::add(c_, y, x, n); }
  void copy(float* dst, const float* src, int64_t n) {
    if (n > 0) STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, c_.stream()));
  }
  template <typename T>
  void assign(Vec<T>& v, const T* src, int64_t n) {  // src: device memory
    v.resize(static_cast<std::size_t>(n));
    if (n > 0) STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(v.data(), src, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, c_.stream()));
  }
  template <typename T>
  void upload(Vec<T>& v, const T* host, int64_t n) {
    v.resize(static_cast<std::size_t>(n));
    if (n > 0) {
      STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(v.data(), host, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyHostToDevice, c_.stream()));
      STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(c_.stream()));  // `host` may go when this returns
    }
  }
  float load(const float* p) {
    float v = 0;
    STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(&v, p, sizeof v, cudaMemcpyDeviceToHost, c_.stream()));
    STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(c_.stream()));
    return v;
  }
  void store(float* p, float value) {
    STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(p, &value, sizeof value, cudaMemcpyHostToDevice, c_.stream()));
    STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(c_.stream()));  // `value` is on this stack
  }

 private:
  static AttentionShape shape(const executor::ops::AttentionShape& a) {
    return {a.batch, a.seq, a.heads, a.kv_heads, a.head_dim};
  }
  OpsContext& c_;
};

using DeviceKernels = StoredKernels<DeviceOps>;

}  // namespace stagecraft::executor::cuda

namespace stagecraft::executor {
extern template struct UnitCacheT<float, cuda::DeviceKernels>;
extern template class LayerT<float, cuda::DeviceKernels>;
}  // namespace stagecraft::executor
