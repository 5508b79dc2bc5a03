// `mpirun -n 2`: the search sharded over two ranks returns exactly what one process returns —
// the same top plans, step times, Pareto front and counts — on every rank.
#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "planner/shard.hpp"

namespace stagecraft::planner {
namespace {

TEST(MpiSearch, TwoRanksMatchOneProcess) {
  if (!launched_under_mpi()) GTEST_SKIP() << "run me under mpiexec -n 2";
  std::unique_ptr<Shard> shard = make_shard();
  ASSERT_GE(shard->size(), 2);
  SpaceLimits l;
  l.zero = {1, 3};
  l.reduce_bucket = {10'000'000, 1'000'000'000};
  l.prefetch_bucket = {10'000'000};
  l.max_live_parameters = {1'000'000'000};
  const Space space = test::medium_space(l);
  SearchOptions o;
  o.top_k = 5;
  o.threads = 1;
  o.shard = shard.get();
  const SearchResult sharded = search(space, o);
  o.shard = nullptr;   // this process alone
  const SearchResult alone = search(space, o);
  ASSERT_FALSE(alone.top.empty());
  EXPECT_EQ(test::keys(sharded.top), test::keys(alone.top)) << "rank " << shard->rank();
  for (std::size_t i = 0; i < alone.top.size() && i < sharded.top.size(); ++i) {
    EXPECT_EQ(sharded.top[i].metrics.step_time_s, alone.top[i].metrics.step_time_s);
    EXPECT_EQ(sharded.top[i].metrics.peak_memory_bytes, alone.top[i].metrics.peak_memory_bytes);
  }
  EXPECT_EQ(test::keys(sharded.pareto), test::keys(alone.pareto));
  EXPECT_EQ(sharded.counts.candidates, alone.counts.candidates);
  EXPECT_EQ(sharded.counts.pruned_memory, alone.counts.pruned_memory);
  EXPECT_EQ(sharded.counts.pruned_bound, alone.counts.pruned_bound);
  EXPECT_EQ(sharded.counts.evaluated, alone.counts.evaluated);
}

}  // namespace
}  // namespace stagecraft::planner
