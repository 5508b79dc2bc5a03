// executor::World without MPI (stagecraft_executor_local): a world of one rank whose
// communicator is a LocalCommunicator, which refuses a plan for more ranks, and whose abort
// hands the exit status back instead of ending the process.
#include <cmath>
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

// A world of one over 16-bit wires: what moves is rounded. bf16 in [1, 2) has spacing 2^-7:
// 1 + 2^-9 rounds to 1, 1 + 3 2^-8 (halfway, odd below) to the even 1 + 2^-6; fp16 (spacing 2^-10)
// rounds 1 + 2^-12 to 1 and 1 + 3 2^-11 to 1 + 2^-9. A sum over one member is its value rounded.
TEST(WorldLocal, SixteenBitWiresRoundWhatTheyMove) {
  const World world;
  std::unique_ptr<Communicator> comm = world.communicator(program::Placement{1, 1, 1});
  const Channel ch{program::Group::kDp, program::Lane::kDpReduce};
  const float a = 1 + std::ldexp(1.0f, -9), b = 1 + 3 * std::ldexp(1.0f, -8);
  const float q = 1 + std::ldexp(1.0f, -12), h = 1 + 3 * std::ldexp(1.0f, -11);
  const std::vector<float> bf16 = {1.0f, 1 + std::ldexp(1.0f, -6)}, fp16 = {1.0f, 1 + std::ldexp(1.0f, -9)};
  ASSERT_EQ(round_to(Format::kBf16, a), bf16[0]);
  ASSERT_EQ(round_to(Format::kBf16, b), bf16[1]);
  ASSERT_EQ(round_to(Format::kFp16, q), fp16[0]);
  ASSERT_EQ(round_to(Format::kFp16, h), fp16[1]);

  std::vector<float> reduced = {a, b};
  Request r = comm->iall_reduce(ch, reduced, Format::kBf16);
  comm->wait(r);
  EXPECT_EQ(reduced, bf16);
  std::vector<float> unrounded = {a, b};
  Request r32 = comm->iall_reduce(ch, unrounded);  // fp32: as it was
  comm->wait(r32);
  EXPECT_EQ(unrounded, (std::vector<float>{a, b}));

  std::vector<float> gathered = {a, b};
  Request g = comm->iall_gather(ch, gathered, std::vector<int64_t>{2}, Format::kBf16);
  comm->wait(g);
  EXPECT_EQ(gathered, bf16);

  const std::vector<float> send = {q, h};
  std::vector<float> piece(2);
  Request rs = comm->ireduce_scatter(ch, send, piece, std::vector<int64_t>{2}, Format::kFp16);
  comm->wait(rs);
  EXPECT_EQ(piece, fp16);

  const std::vector<float> message = {a, b};
  std::vector<float> received(2);
  Request s = comm->isend(message, 0, 7, Format::kBf16);
  Request m = comm->irecv(received, 0, 7, Format::kBf16);
  comm->wait(s);
  comm->wait(m);
  EXPECT_EQ(received, bf16);
  // a receive in another format than its message's
  Request s2 = comm->isend(send, 0, 8, Format::kFp16);
  Request m2 = comm->irecv(received, 0, 8);
  comm->wait(s2);
  EXPECT_THROW(comm->wait(m2), CommError);
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
