#include "executor/zero/state_memory.hpp"

#include <algorithm>
#include <string>

#include "executor/errors.hpp"
#include "executor/index.hpp"

namespace stagecraft::executor {

std::span<float> HostMemory::allocate(int64_t elems) {
  blocks_.emplace_back(at(elems), 0.0f);
  return blocks_.back();
}

void HostMemory::fill(std::span<float> dst, float value) { std::fill(dst.begin(), dst.end(), value); }

void HostMemory::copy(std::span<float> dst, std::span<const float> src) {
  if (dst.size() != src.size()) {
    throw ExecutorError("HostMemory::copy: " + std::to_string(src.size()) + " elements into " + std::to_string(dst.size()));
  }
  std::copy(src.begin(), src.end(), dst.begin());
}

void HostMemory::round_copy(std::span<float> dst, std::span<const float> src, Format f) {
  if (dst.size() != src.size()) {
    throw ExecutorError("HostMemory::round_copy: " + std::to_string(src.size()) + " elements into " +
                        std::to_string(dst.size()));
  }
  for (std::size_t i = 0; i < src.size(); ++i) dst[i] = round_to(f, src[i]);
}

void HostMemory::add_sum_sq(std::span<const float> values, double& sum) {
  for (float g : values) {
    const double d = g;
    sum += d * d;
  }
}

}  // namespace stagecraft::executor
