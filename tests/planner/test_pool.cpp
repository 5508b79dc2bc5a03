#include "planner/pool.hpp"

#include <sys/resource.h>

#include <atomic>
#include <cstdlib>

#include <gtest/gtest.h>

namespace stagecraft::planner {
namespace {

TEST(ThreadPool, RunsEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(hits.size(), [&](std::size_t i, int) { ++hits[i]; });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

#if !defined(STAGECRAFT_SANITIZED)
// With the address space capped, the system refuses a thread (each reserves an 8 MiB stack):
// the pool must report it and join the workers it started, not hang in a condition variable
// destructor (the search used to, deaf to Ctrl-C). Run in a child process with its own limit.
TEST(ThreadPoolDeathTest, ThreadStartFailureIsReportedAndJoined) {
  EXPECT_EXIT(
      {
        rlimit limit{};
        getrlimit(RLIMIT_AS, &limit);
        limit.rlim_cur = rlim_t{1} << 30;  // 1 GiB: room for fewer than 128 stacks of 8 MiB
        setrlimit(RLIMIT_AS, &limit);
        try {
          ThreadPool pool(1000);
        } catch (const ThreadStartError& e) {
          std::exit(std::string(e.what()).find("cannot start 1000 worker threads") != std::string::npos ? 7 : 8);
        }
        std::exit(9);
      },
      ::testing::ExitedWithCode(7), "");
}
#endif

}  // namespace
}  // namespace stagecraft::planner
