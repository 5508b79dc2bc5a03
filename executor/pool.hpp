// BlockPool: a caching allocator over a raw one (cudaMalloc / cudaFree on a device, aligned operator
// new on the host), so that a training step, whose buffers are the previous step's sizes again,
// allocates nothing once the first step has run: PyTorch's CUDACachingAllocator's idea
// (c10/cuda/CUDACachingAllocator.cpp), without its block splitting.
//   * sizes are rounded up to a class: a multiple of 512 bytes up to 1 MiB, of 2 MiB above
//     (kMinBlockSize, kSmallSize and kRoundLarge there);
//   * a released block goes to its class's free list, and an allocation of that class takes one
//     from there before it asks the raw allocator;
//   * when the raw allocator fails (a device out of memory), every cached block is given back and
//     the allocation tried once more, as PyTorch does before it reports an out-of-memory error.
// A raw allocation and a raw release on a device synchronise it (cudaFree does), which is what the
// pool saves every step. Blocks are handed out whole: the caller's buffer is the start of one.
// Thread-safe (one mutex): a rank uses one pool from its interpreter's thread, tests from several.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace stagecraft::executor {

class BlockPool {
 public:
  struct Raw {
    std::function<void*(std::size_t)> allocate;  // throws (or returns nullptr) when it cannot
    std::function<void(void*)> release;
  };
  struct Stats {
    int64_t raw_allocations = 0;  // calls to the raw allocator that succeeded
    int64_t raw_releases = 0;
    int64_t held_bytes = 0;       // raw bytes held: in use plus cached
    int64_t in_use_bytes = 0;     // rounded bytes handed out and not yet released
    int64_t peak_held_bytes = 0;
    int64_t reuses = 0;           // allocations served from the cache
  };

  // `caching` false: every release goes straight back to the raw allocator (the sanitized build's
  // host pool, so that AddressSanitizer sees a use after release, which reuse would hide).
  explicit BlockPool(Raw raw, bool caching = true) : raw_(std::move(raw)), caching_(caching) {}
  ~BlockPool();  // gives back every cached block (blocks still in use are the caller's leak)
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least `bytes` (nullptr for 0). Its contents are what the last user left.
  void* allocate(std::size_t bytes);
  // Back to the cache; `p` must come from allocate() (nullptr is ignored).
  void release(void* p);
  // Every cached block back to the raw allocator.
  void release_cached();
  Stats stats() const;
  bool caching() const { return caching_; }

  static std::size_t rounded(std::size_t bytes);

 private:
  void* raw_allocate(std::size_t size, std::string& error);
  void release_cached_locked();

  Raw raw_;
  bool caching_ = true;
  mutable std::mutex mu_;
  std::unordered_map<void*, std::size_t> in_use_;  // block -> its rounded size
  std::multimap<std::size_t, void*> cached_;       // free blocks by rounded size
  Stats stats_;
};

// The host's pool (64-byte aligned operator new): the CPU backend's buffers. Not caching in the
// sanitized build (STAGECRAFT_SANITIZED).
BlockPool& host_pool();

}  // namespace stagecraft::executor
