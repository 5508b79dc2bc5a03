#include "executor/pool.hpp"

#include <algorithm>
#include <new>
#include <stdexcept>
#include <string>

#include "executor/errors.hpp"

namespace stagecraft::executor {

namespace {
constexpr std::size_t kMinBlock = 512;               // PyTorch's kMinBlockSize
constexpr std::size_t kSmallSize = std::size_t{1} << 20;  // kSmallSize: 1 MiB
constexpr std::size_t kRoundLarge = std::size_t{2} << 20;  // kRoundLarge: 2 MiB
}  // namespace

std::size_t BlockPool::rounded(std::size_t bytes) {
  const std::size_t step = bytes <= kSmallSize ? kMinBlock : kRoundLarge;
  return (bytes + step - 1) / step * step;
}

BlockPool::~BlockPool() {
  const std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void* BlockPool::raw_allocate(std::size_t size, std::string& error) {
  try {
    void* p = raw_.allocate(size);
    if (p == nullptr) error = "the allocator returned nothing";
    return p;
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
}

void* BlockPool::allocate(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t size = rounded(bytes);
  const std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  if (auto it = cached_.find(size); it != cached_.end()) {
    p = it->second;
    cached_.erase(it);
    ++stats_.reuses;
  } else {
    std::string error;
    p = raw_allocate(size, error);
    if (p == nullptr && !cached_.empty()) {  // out of memory: give the cache back, then once more
      release_cached_locked();
      p = raw_allocate(size, error);
    }
    if (p == nullptr) {
      throw ExecutorError("cannot allocate " + std::to_string(size) + " bytes (" + std::to_string(stats_.in_use_bytes) +
                          " in use, the cache given back): " + error);
    }
    ++stats_.raw_allocations;
    stats_.held_bytes += static_cast<int64_t>(size);
    stats_.peak_held_bytes = std::max(stats_.peak_held_bytes, stats_.held_bytes);
  }
  in_use_[p] = size;
  stats_.in_use_bytes += static_cast<int64_t>(size);
  return p;
}

void BlockPool::release(void* p) {
  if (p == nullptr) return;
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = in_use_.find(p);
  if (it == in_use_.end()) throw std::logic_error("BlockPool::release: a block this pool did not hand out");
  stats_.in_use_bytes -= static_cast<int64_t>(it->second);
  if (caching_) {
    cached_.emplace(it->second, p);
  } else {
    raw_.release(p);
    ++stats_.raw_releases;
    stats_.held_bytes -= static_cast<int64_t>(it->second);
  }
  in_use_.erase(it);
}

void BlockPool::release_cached() {
  const std::lock_guard<std::mutex> lock(mu_);
  release_cached_locked();
}

void BlockPool::release_cached_locked() {
  for (const auto& [size, p] : cached_) {
    raw_.release(p);
    ++stats_.raw_releases;
    stats_.held_bytes -= static_cast<int64_t>(size);
  }
  cached_.clear();
}

BlockPool::Stats BlockPool::stats() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

BlockPool& host_pool() {
#if defined(STAGECRAFT_SANITIZED)
  constexpr bool kCaching = false;
#else
  constexpr bool kCaching = true;
#endif
  static BlockPool pool({[](std::size_t bytes) { return ::operator new(bytes, std::align_val_t{64}); },
                         [](void* p) { ::operator delete(p, std::align_val_t{64}); }},
                        kCaching);
  return pool;
}

}  // namespace stagecraft::executor
