// The communicator `stagecraft probe` measures (traces/probe.hpp's ProbeComm): MPI_COMM_WORLD in
// an executable with MPI (cli/probe_comm_mpi.cpp), none in one without (cli/probe_comm_local.cpp,
// the probe then runs on a world of one). Each executable links one of the two files
// (cli/CMakeLists.txt). It lives in cli/ because it joins two layers that may not include each
// other: traces/ (the harness) and mpi/ (the MPI utility).
#pragma once

#include <memory>

#include "traces/probe.hpp"

namespace stagecraft::cli {

// nullptr when this executable has no MPI.
std::unique_ptr<traces::ProbeComm> make_mpi_probe_comm();

}  // namespace stagecraft::cli
