// The caching pool (executor/pool.hpp): size classes, reuse, the give-back on a failed raw
// allocation; and a training step on the CPU backend whose buffers the previous step's cache serves
// entirely (the CUDA backend's, on a device: CudaRunner.ASecondStepAllocatesNothing).
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/comm/local.hpp"
#include "executor/errors.hpp"
#include "executor/pool.hpp"
#include "executor/runner.hpp"
#include "runner/plans.hpp"

namespace stagecraft::executor {
namespace {

// A raw allocator that counts, and refuses past `limit` bytes held.
struct Counting {
  int64_t held = 0, limit = 1 << 30, calls = 0;
  std::unordered_map<void*, std::size_t> sizes;
  BlockPool::Raw raw() {
    return {[this](std::size_t n) -> void* {
              ++calls;
              if (held + static_cast<int64_t>(n) > limit) throw std::bad_alloc();
              void* p = std::malloc(n);
              sizes[p] = n;
              held += static_cast<int64_t>(n);
              return p;
            },
            [this](void* p) {
              held -= static_cast<int64_t>(sizes.at(p));
              sizes.erase(p);
              std::free(p);
            }};
  }
};

TEST(BlockPool, RoundsToPyTorchsClasses) {
  EXPECT_EQ(BlockPool::rounded(1), 512u);
  EXPECT_EQ(BlockPool::rounded(512), 512u);
  EXPECT_EQ(BlockPool::rounded(513), 1024u);
  EXPECT_EQ(BlockPool::rounded(1 << 20), std::size_t{1} << 20);               // 1 MiB: still a small block
  EXPECT_EQ(BlockPool::rounded((1 << 20) + 1), std::size_t{2} << 20);         // above: 2 MiB steps
  EXPECT_EQ(BlockPool::rounded((5 << 20) + 7), std::size_t{6} << 20);
}

TEST(BlockPool, ReusesAReleasedBlockOfItsClass) {
  Counting c;
  BlockPool pool(c.raw());
  void* a = pool.allocate(1000);  // class 1024
  pool.release(a);
  void* b = pool.allocate(900);   // the same class: the same block, no raw call
  EXPECT_EQ(b, a);
  EXPECT_EQ(c.calls, 1);
  void* d = pool.allocate(2000);  // another class: raw
  EXPECT_EQ(c.calls, 2);
  EXPECT_EQ(pool.stats().in_use_bytes, 1024 + 2048);
  EXPECT_EQ(pool.stats().held_bytes, 1024 + 2048);
  EXPECT_EQ(pool.stats().reuses, 1);
  pool.release(b);
  pool.release(d);
  pool.release_cached();
  EXPECT_EQ(c.held, 0);
  EXPECT_EQ(pool.stats().raw_releases, 2);
  EXPECT_EQ(pool.allocate(0), nullptr);
  EXPECT_THROW(pool.release(&c), std::logic_error);
}

// Out of raw memory: the cached blocks go back and the allocation is tried again; when that fails
// too, the error names the size and the raw allocator's reason.
TEST(BlockPool, GivesTheCacheBackBeforeFailing) {
  Counting c;
  c.limit = 4096;
  BlockPool pool(c.raw());
  void* a = pool.allocate(3000);  // 3072 held
  pool.release(a);                // cached
  void* b = pool.allocate(2048);  // 3072 + 2048 > 4096: the cache goes back, then it fits
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(c.held, 2048);
  try {
    (void)pool.allocate(4096);
    ADD_FAILURE() << "allocated past the limit";
  } catch (const ExecutorError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot allocate 4096 bytes"), std::string::npos) << e.what();
  }
  pool.release(b);
}

// The CPU backend's buffers come from host_pool(): the second and third steps of a one-rank run
// (every unit output and input gradient the first step's sizes again) make no raw allocation.
TEST(BlockPool, ASecondStepAllocatesNoBuffer) {
  if (!host_pool().caching()) GTEST_SKIP() << "the sanitized build's host pool does not cache (AddressSanitizer sees reuse)";
  const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), test::make_plan({}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  Runner runner(prog, comm, corpus, {});
  runner.step();
  const BlockPool::Stats after_one = host_pool().stats();
  runner.step();
  runner.step();
  const BlockPool::Stats after_three = host_pool().stats();
  EXPECT_EQ(after_three.raw_allocations, after_one.raw_allocations);
  EXPECT_GT(after_three.reuses, after_one.reuses);
}

}  // namespace
}  // namespace stagecraft::executor
