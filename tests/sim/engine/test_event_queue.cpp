// EventQueue: events come out by time, and events at the same time in the order they went in,
// whatever order the times were pushed in.
#include "sim/engine/event_queue.hpp"

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

namespace stagecraft::sim {
namespace {

TEST(EventQueue, EqualTimesPopInInsertionOrder) {
  EventQueue q;
  q.push(5, 0, 0);
  q.push(3, 1, 0);
  q.push(5, 2, 0);
  q.push(3, 3, 0);
  q.push(4, 4, 0);
  // by time: 3 (a=1, then a=3), 4 (a=4), 5 (a=0, then a=2)
  const int expected[] = {1, 3, 4, 0, 2};
  for (int a : expected) {
    ASSERT_FALSE(q.empty());
    EXPECT_EQ(q.pop().a, a);
  }
  EXPECT_TRUE(q.empty());
}

TEST(EventQueue, MatchesAStableSortOfRandomPushesAndPops) {
  // Reference: every event ever pushed, stably sorted by time, is the order a queue that is only
  // popped at the end must give; interleaved pops must give the running minimum by (time, order).
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> time(0, 50);  // few distinct times: many ties
  EventQueue q;
  std::vector<std::tuple<int64_t, int32_t>> pending;  // (time, insertion number)
  int32_t n = 0;
  for (int round = 0; round < 2000; ++round) {
    if (pending.empty() || rng() % 3 != 0) {
      const int64_t t = time(rng);
      q.push(t, n, 0);
      pending.emplace_back(t, n++);
    } else {
      const auto first = std::min_element(pending.begin(), pending.end());  // smallest (time, number)
      const Event e = q.pop();
      EXPECT_EQ(e.time_ns, std::get<0>(*first));
      EXPECT_EQ(e.a, std::get<1>(*first));
      pending.erase(first);
    }
    EXPECT_EQ(q.size(), pending.size());
  }
}

}  // namespace
}  // namespace stagecraft::sim
