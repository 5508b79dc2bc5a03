// Session: MPI for the lifetime of one object. The constructor initialises MPI with the thread
// level asked for, unless MPI is already initialised (then it only joins); the destructor
// finalises MPI only when this object initialised it. There is no other hidden state: no
// atexit hook, no initialisation on first use. Errors on MPI_COMM_WORLD are returned
// (MPI_ERRORS_RETURN), so MPI_CHECK (error.hpp) turns them into MpiError.
// Not a launcher, and not a communicator: rank() and size() are those of MPI_COMM_WORLD.
#pragma once

namespace stagecraft::mpi {

// MPI's thread levels (MPI_THREAD_*), in increasing order.
enum class ThreadLevel { kSingle, kFunneled, kSerialized, kMultiple };

class Session {
 public:
  // Throws MpiError when initialisation fails or MPI provides less than `level` (after
  // finalising what it initialised). argc/argv may be null.
  explicit Session(ThreadLevel level = ThreadLevel::kFunneled, int* argc = nullptr, char*** argv = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int rank() const;   // in MPI_COMM_WORLD
  int size() const;
  bool owns() const { return owns_; }  // this object initialised MPI and will finalise it

 private:
  bool owns_ = false;
};

// MPI_Abort(MPI_COMM_WORLD, code): every rank of the job exits. For a command line's fault
// path, when a peer may be blocked forever on this rank.
[[noreturn]] void abort_job(int code);

}  // namespace stagecraft::mpi
