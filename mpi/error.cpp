#include "mpi/error.hpp"

#include <mpi.h>

namespace stagecraft::mpi {

void fail(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  throw MpiError(code, std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           std::string(text, static_cast<std::size_t>(len)));
}

}  // namespace stagecraft::mpi
