// parallel_for (core/thread/parallel_for.hpp): every index exactly once, whatever the thread count,
// and the exception of the lowest index that threw.
#include "core/thread/parallel_for.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

namespace stagecraft::thread {
namespace {

TEST(ParallelFor, RunsEveryIndexOnce) {
  for (int threads : {0, 1, 2, 3, 64}) {
    for (std::size_t n : {0u, 1u, 2u, 7u, 100u}) {
      std::vector<std::atomic<int>> runs(n);
      parallel_for(n, threads, [&](std::size_t i) { ++runs[i]; });
      for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << threads << " threads, n " << n << ", index " << i;
    }
  }
}

TEST(ParallelFor, RethrowsTheLowestIndexThatThrewAfterEveryIndexRan) {
  // indexes 3 and 5 throw; on 4 threads either may throw first, 3's is the one rethrown, and the
  // others all run
  std::atomic<int> ran{0};
  try {
    parallel_for(10, 4, [&](std::size_t i) {
      ++ran;
      if (i == 3 || i == 5) throw std::runtime_error("index " + std::to_string(i));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "index 3");
  }
  EXPECT_EQ(ran.load(), 10);
}

}  // namespace
}  // namespace stagecraft::thread
