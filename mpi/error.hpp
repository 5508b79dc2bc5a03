// MpiError and MPI_CHECK: an MPI call that does not return MPI_SUCCESS becomes an exception
// naming the call, the file and line of the call site, and MPI's own error string. MPI only
// returns its errors when the communicator's error handler is MPI_ERRORS_RETURN, which Session
// sets on MPI_COMM_WORLD (communicators split or duplicated from it inherit it). Nothing here
// exits the process.
#pragma once

#include <stdexcept>
#include <string>

namespace stagecraft::mpi {

class MpiError : public std::runtime_error {
 public:
  MpiError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }  // the MPI error code (MPI_ERR_COUNT for a size guard)

 private:
  int code_;
};

// Throws MpiError "<call> failed at <file>:<line>: <MPI's error string>".
[[noreturn]] void fail(int code, const char* call, const char* file, int line);

}  // namespace stagecraft::mpi

#define MPI_CHECK(call)                                                    \
  do {                                                                     \
    const int stagecraft_mpi_rc_ = (call);                                 \
    if (stagecraft_mpi_rc_ != MPI_SUCCESS) {                               \
      ::stagecraft::mpi::fail(stagecraft_mpi_rc_, #call, __FILE__, __LINE__); \
    }                                                                      \
  } while (false)
