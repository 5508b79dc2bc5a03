// executor::World over MPI (stagecraft_executor_mpi) under mpirun -n 4: it joins the MPI world
// the test binary already initialised (rank and size are MPI_COMM_WORLD's) and hands out an
// MpiCommunicator over the Placement's groups.
#include <mpi.h>

#include <gtest/gtest.h>

#include "executor/errors.hpp"
#include "executor/world.hpp"

namespace stagecraft::executor {
namespace {

TEST(MpiWorld, IsMpiCommWorld) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const World world;
  EXPECT_EQ(world.rank(), rank);
  EXPECT_EQ(world.size(), size);
  std::unique_ptr<Communicator> comm = world.communicator(program::Placement{1, 2, 2});
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->group_size(program::Group::kDp), 2);
  EXPECT_DOUBLE_EQ(comm->all_reduce_sum(1.0), static_cast<double>(size));
  EXPECT_THROW(world.communicator(program::Placement{1, 1, 2}), ExecutorError);
}

}  // namespace
}  // namespace stagecraft::executor
