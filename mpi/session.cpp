#include "mpi/session.hpp"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "mpi/error.hpp"

namespace stagecraft::mpi {

namespace {

int to_mpi(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::kSingle: return MPI_THREAD_SINGLE;
    case ThreadLevel::kFunneled: return MPI_THREAD_FUNNELED;
    case ThreadLevel::kSerialized: return MPI_THREAD_SERIALIZED;
    case ThreadLevel::kMultiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

}  // namespace

Session::Session(ThreadLevel level, int* argc, char*** argv) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, to_mpi(level), &provided));
    owns_ = true;
    if (provided < to_mpi(level)) {
      MPI_Finalize();
      owns_ = false;
      throw MpiError(MPI_ERR_OTHER, "MPI_Init_thread: asked for thread level " + std::to_string(to_mpi(level)) +
                                        ", MPI provides " + std::to_string(provided));
    }
  }
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
}

Session::~Session() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int Session::rank() const {
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  return r;
}

int Session::size() const {
  int n = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &n));
  return n;
}

void abort_job(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

}  // namespace stagecraft::mpi
