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
