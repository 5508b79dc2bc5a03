// executor::World without MPI (stagecraft_executor_local): a world of one rank whose
// communicator is a LocalCommunicator, which refuses a plan for more ranks, and whose abort
// hands the exit status back instead of ending the process.
#include <vector>

#include <gtest/gtest.h>

#include "executor/errors.hpp"
#include "executor/world.hpp"

namespace stagecraft::executor {
namespace {

TEST(WorldLocal, IsOneRankWithALocalCommunicator) {
  const World world;
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  std::unique_ptr<Communicator> comm = world.communicator(program::Placement{1, 1, 1});
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> sent = {1, 2, 3}, received(3, 0);
  Request s = comm->isend(sent, 0, 5), r = comm->irecv(received, 0, 5);
  comm->wait(s);
  comm->wait(r);
  EXPECT_EQ(received, sent);
}

// A world of one: a typed all-gather is in place already, an all-to-all copies its one block.
TEST(WorldLocal, TypedCollectivesOverAGroupOfOne) {
  const World world;
  std::unique_ptr<Communicator> comm = world.communicator(program::Placement{1, 1, 1});
  std::vector<int8_t> bytes = {1, -2, 3}, received(3, 0);
  const Channel ch{program::Group::kDpLocal, program::Lane::kDpReduce};
  Request g = comm->iall_gather_typed(ch, std::span<int8_t>(bytes), std::vector<int64_t>{3});
  Request a = comm->iall_to_all(ch, std::span<int8_t>(bytes), std::vector<int64_t>{3}, std::span<int8_t>(received),
                                std::vector<int64_t>{3});
  comm->wait(g);
  comm->wait(a);
  EXPECT_EQ(received, bytes);
  std::vector<float> scales = {0.5f}, out(1);
  Request f = comm->iall_to_all(ch, std::span<float>(scales), std::vector<int64_t>{1}, std::span<float>(out), std::vector<int64_t>{1});
  comm->wait(f);
  EXPECT_EQ(out, scales);
  EXPECT_THROW(comm->iall_to_all(ch, std::span<int8_t>(bytes), std::vector<int64_t>{3}, std::span<float>(out),
                                 std::vector<int64_t>{1}),
               CommError);
}

TEST(WorldLocal, RefusesAPlanForMoreRanks) {
  const World world;
  EXPECT_THROW(world.communicator(program::Placement{1, 2, 2}), ExecutorError);
}

TEST(WorldLocal, AbortReturnsTheExitStatus) {
  const World world;
  EXPECT_EQ(world.abort(3), 3);
}

}  // namespace
}  // namespace stagecraft::executor
