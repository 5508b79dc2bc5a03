// GEMM accounting for benchmarks: while enabled on a thread, every GEMM the units run on that
// thread (the linears in ops.hpp and the head's logits) records its form and shape, its time
// and its FLOPs, so a benchmark can say what share of a training step is GEMM and replay the
// same shapes standalone. Disabled (the default) it costs one thread-local flag test per GEMM.
// Not a general profiler: elementwise kernels and the attention's per-head products are not in it.
//
// Forms, all on row-major matrices: kNN C[m,n] = A[m,k] B[k,n];  kNT C = A[m,k] B[n,k]^T;
// kTN C[m,n] (+)= A[k,m]^T B[k,n]. FLOPs 2*m*k*n.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <tuple>

namespace stagecraft::executor {

enum class GemmForm : uint8_t { kNN, kNT, kTN };

struct GemmShape {
  GemmForm form = GemmForm::kNN;
  int64_t m = 0, k = 0, n = 0;
  bool accumulate = false;  // C += instead of C =
  auto key() const { return std::tuple(static_cast<int>(form), m, k, n, accumulate); }
  bool operator<(const GemmShape& o) const { return key() < o.key(); }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n); }
};

struct GemmStats {
  int64_t calls = 0;
  double seconds = 0;
};

class GemmProfile {
 public:
  void enable(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  void reset() { by_shape_.clear(); }
  void add(const GemmShape& s, double seconds) {
    GemmStats& st = by_shape_[s];
    ++st.calls;
    st.seconds += seconds;
  }
  const std::map<GemmShape, GemmStats>& by_shape() const { return by_shape_; }
  double seconds() const {
    double t = 0;
    for (const auto& [_, st] : by_shape_) t += st.seconds;
    return t;
  }
  double flops() const {
    double f = 0;
    for (const auto& [s, st] : by_shape_) f += s.flops() * static_cast<double>(st.calls);
    return f;
  }

 private:
  bool enabled_ = false;
  std::map<GemmShape, GemmStats> by_shape_;
};

inline GemmProfile& gemm_profile() {
  thread_local GemmProfile profile;
  return profile;
}

// Times the GEMM in its scope when the thread's profile is enabled.
class GemmTimer {
 public:
  GemmTimer(GemmForm form, int64_t m, int64_t k, int64_t n, bool accumulate)
      : on_(gemm_profile().enabled()), shape_{form, m, k, n, accumulate} {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~GemmTimer() {
    if (on_) gemm_profile().add(shape_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  GemmTimer(const GemmTimer&) = delete;
  GemmTimer& operator=(const GemmTimer&) = delete;

 private:
  bool on_;
  GemmShape shape_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace stagecraft::executor
