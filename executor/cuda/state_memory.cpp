#include "executor/cuda/state_memory.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "executor/cuda/check.hpp"
#include "executor/cuda/formats.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/cuda/kernels/optimizer.hpp"

namespace stagecraft::executor::cuda {

namespace {

void same_size(const char* what, std::size_t a, std::size_t b) {
  if (a != b) throw ExecutorError(std::string("DeviceMemory::") + what + ": " + std::to_string(b) + " elements into " + std::to_string(a));
}

}  // namespace

DeviceMemory::DeviceMemory(cudaStream_t stream) : stream_(stream) {
  STAGECRAFT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch_), (kSumSqBlocks + 1) * sizeof(double)));
}

DeviceMemory::~DeviceMemory() {
  if (scratch_) cudaFree(scratch_);
  for (auto& [key, d] : decayed_) {
    if (d.ranges) cudaFree(d.ranges);
  }
}

// The decayed positions of the shard, shard-relative [begin, end) pairs in order, in device memory:
// made on the shard's first step and kept (the layout's ranges do not change).
const DeviceMemory::DecayedRanges& DeviceMemory::decayed_ranges(const AdamWShard& shard, std::span<const Range> decayed) {
  const auto key = std::tuple(shard.params.data(), shard.params.size(), shard.offset);
  auto it = decayed_.find(key);
  if (it != decayed_.end()) return it->second;
  const int64_t lo = shard.offset, hi = shard.offset + static_cast<int64_t>(shard.params.size());
  std::vector<int64_t> pairs;
  for (const Range& r : decayed) {
    const int64_t b = std::max(lo, r.begin), e = std::min(hi, r.end);
    if (e > b) {
      if (!pairs.empty() && b < pairs.back()) throw ExecutorError("DeviceMemory::adamw: decayed ranges out of order or overlapping");
      pairs.push_back(b - lo);
      pairs.push_back(e - lo);
    }
  }
  DecayedRanges d;
  d.count = static_cast<int64_t>(pairs.size() / 2);
  if (d.count > 0) {
    STAGECRAFT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d.ranges), pairs.size() * sizeof(int64_t)));
    // on the stream the update runs on (a legacy-stream copy would not be ordered before it)
    STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(d.ranges, pairs.data(), pairs.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream_));
    STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `pairs` is a local
  }
  return decayed_.emplace(key, d).first->second;
}

std::span<float> DeviceMemory::allocate(int64_t elems) {
  blocks_.emplace_back(elems);
  return blocks_.back().view();
}

void DeviceMemory::fill(std::span<float> dst, float value) {
  cuda::fill(dst.data(), value, static_cast<int64_t>(dst.size()), stream_);
}

void DeviceMemory::copy(std::span<float> dst, std::span<const float> src) {
  same_size("copy", dst.size(), src.size());
  if (dst.empty()) return;
  STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.size() * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}

// adamw_step's arithmetic (model/adamw.cpp): decay on the decayed positions first, then the update.
void DeviceMemory::adamw(const AdamWConfig& cfg, int64_t step, const AdamWShard& shard, std::span<const Range> decayed,
                         float grad_scale) {
  const std::size_t n = shard.params.size();
  if (shard.grads.size() != n || shard.m.size() != n || shard.v.size() != n) {
    throw ExecutorError("DeviceMemory::adamw: shard at offset " + std::to_string(shard.offset) + " has mismatched spans");
  }
  if (step < 1) throw ExecutorError("DeviceMemory::adamw: step must be >= 1, got " + std::to_string(step));
  const float factor = static_cast<float>(1.0 - cfg.lr * cfg.weight_decay);
  const DecayedRanges& d = cfg.weight_decay != 0.0 ? decayed_ranges(shard, decayed) : DecayedRanges{};
  const double t = static_cast<double>(step);
  AdamWScalars s{};
  s.b1 = static_cast<float>(cfg.beta1);
  s.b2 = static_cast<float>(cfg.beta2);
  s.c1 = static_cast<float>(1.0 / (1.0 - std::pow(cfg.beta1, t)));
  s.c2 = static_cast<float>(1.0 / (1.0 - std::pow(cfg.beta2, t)));
  s.lr = static_cast<float>(cfg.lr);
  s.eps = static_cast<float>(cfg.eps);
  s.grad_scale = grad_scale;
  adamw_update(shard.params.data(), shard.grads.data(), shard.m.data(), shard.v.data(), static_cast<int64_t>(n), s, d.ranges,
               d.count, factor, stream_);
}

void DeviceMemory::add_sum_sq(std::span<const float> values, double& sum) {
  if (values.empty()) return;
  cuda::sum_sq(values.data(), static_cast<int64_t>(values.size()), scratch_, scratch_ + kSumSqBlocks, stream_);
  double part = 0;
  STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(&part, scratch_ + kSumSqBlocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  sum += part;
}

void DeviceMemory::download(std::span<const float> src, std::span<float> host) {
  same_size("download", host.size(), src.size());
  if (src.empty()) return;
  STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(host.data(), src.data(), src.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void DeviceMemory::upload(std::span<const float> host, std::span<float> dst) {
  same_size("upload", dst.size(), host.size());
  if (host.empty()) return;
  STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  STAGECRAFT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go away after this returns
}

void DeviceMemory::round_copy(std::span<float> dst, std::span<const float> src, Format f) {
  same_size("round_copy", dst.size(), src.size());
  if (dst.empty()) return;
  if (dst.data() != src.data()) copy(dst, src);
  if (f != Format::kFp32) round16(half16(f), dst.data(), static_cast<int64_t>(dst.size()), stream_);
}

}  // namespace stagecraft::executor::cuda
