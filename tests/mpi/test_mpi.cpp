// The MPI utility under mpirun -n 3 (label mpi): byte strings of different lengths (one empty)
// all-gathered, gathered to a root and broadcast, byte for byte; the size guard; MPI_CHECK's
// message; a second Session joins without owning MPI.
#include <mpi.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mpi/bytes.hpp"
#include "mpi/error.hpp"
#include "mpi/session.hpp"

namespace stagecraft::mpi {
namespace {

// Rank r's string: r * 1000 bytes (rank 0's is empty), every byte value 0..255 occurring, so
// that nothing treats the bytes as text.
std::string blob_of(int r) {
  std::string s(static_cast<std::size_t>(r) * 1000, '\0');
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 7 + static_cast<std::size_t>(r)) % 256);
  return s;
}

int world_rank() {
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  return r;
}

int world_size() {
  int n = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
  return n;
}

TEST(MpiBytes, AllGatherGivesEveryRankEveryString) {
  const std::vector<std::string> all = all_gather_bytes(MPI_COMM_WORLD, blob_of(world_rank()));
  ASSERT_EQ(static_cast<int>(all.size()), world_size());
  for (int r = 0; r < world_size(); ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], blob_of(r)) << "from rank " << r;
}

TEST(MpiBytes, GatherGivesTheRootEveryStringAndOthersNothing) {
  const int root = world_size() - 1;
  const std::vector<std::string> all = gather_bytes(MPI_COMM_WORLD, blob_of(world_rank()), root);
  if (world_rank() != root) {
    EXPECT_TRUE(all.empty());
    return;
  }
  ASSERT_EQ(static_cast<int>(all.size()), world_size());
  for (int r = 0; r < world_size(); ++r) EXPECT_EQ(all[static_cast<std::size_t>(r)], blob_of(r)) << "from rank " << r;
}

TEST(MpiBytes, BroadcastGivesEveryRankTheRootsString) {
  const int root = 1 % world_size();
  const std::string mine = world_rank() == root ? blob_of(2) : std::string("ignored");
  EXPECT_EQ(broadcast_bytes(MPI_COMM_WORLD, mine, root), blob_of(2));
  EXPECT_EQ(broadcast_bytes(MPI_COMM_WORLD, "", 0), "");
}

TEST(MpiBytes, SizeGuardRefusesMoreThanAnIntOfBytes) {
  const std::vector<int64_t> fits = {1000, 0, 2000};
  EXPECT_EQ(total_bytes(fits, "test"), 3000);
  const std::vector<int64_t> too_many = {int64_t{1} << 30, int64_t{1} << 30};  // 2^31 > INT_MAX
  try {
    total_bytes(too_many, "all_gather_bytes");
    FAIL() << "no MpiError";
  } catch (const MpiError& e) {
    EXPECT_EQ(e.code(), MPI_ERR_COUNT);
    EXPECT_NE(std::string(e.what()).find("all_gather_bytes: 2147483648 bytes in all exceed"), std::string::npos) << e.what();
  }
}

TEST(MpiCheck, NamesTheCallTheFileAndLineAndMpisReason) {
  const int line = __LINE__ + 2;
  try {
    MPI_CHECK(MPI_Send(nullptr, 0, MPI_BYTE, world_size(), 0, MPI_COMM_WORLD));  // no such rank
    FAIL() << "no MpiError";
  } catch (const MpiError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("MPI_Send(nullptr, 0, MPI_BYTE, world_size(), 0, MPI_COMM_WORLD) failed at "), std::string::npos)
        << what;
    EXPECT_NE(what.find("test_mpi.cpp:" + std::to_string(line) + ": "), std::string::npos) << what;
    EXPECT_NE(e.code(), MPI_SUCCESS);
    EXPECT_GT(what.size(), what.find(": ", what.find("test_mpi.cpp")) + 2) << "MPI's error string is missing";
  }
}

TEST(MpiSession, ASecondSessionJoinsWithoutOwning) {
  const Session second(ThreadLevel::kFunneled);
  EXPECT_FALSE(second.owns());
  EXPECT_EQ(second.rank(), world_rank());
  EXPECT_EQ(second.size(), world_size());
}

}  // namespace
}  // namespace stagecraft::mpi

int main(int argc, char** argv) {
  const stagecraft::mpi::Session session(stagecraft::mpi::ThreadLevel::kFunneled, &argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  if (!session.owns()) return 1;  // this binary initialises MPI itself
  return RUN_ALL_TESTS();
}
