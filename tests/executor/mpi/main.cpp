// GoogleTest under mpirun: MPI is initialised once for the whole binary; every test is
// collective (every rank runs the same tests in the same order). Rank 0 prints the usual
// report; other ranks print only their failures, prefixed with their rank. A failure on any
// rank makes that rank, and so mpirun, exit non-zero.
#include <cstdio>

#include <gtest/gtest.h>

#include "mpi/session.hpp"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int64_t rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "rank %lld: %s:%d: failure\n%s\n", static_cast<long long>(rank_),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int64_t rank_;
};

}  // namespace

int main(int argc, char** argv) {
  const stagecraft::mpi::Session mpi(stagecraft::mpi::ThreadLevel::kFunneled, &argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(mpi.rank()));
  }
  return RUN_ALL_TESTS();
}
