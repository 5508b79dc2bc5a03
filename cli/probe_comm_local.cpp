// The probe's communicator in an executable without MPI: none (cli/probe_comm.hpp).
#include "cli/probe_comm.hpp"

namespace stagecraft::cli {

std::unique_ptr<traces::ProbeComm> make_mpi_probe_comm() { return nullptr; }

}  // namespace stagecraft::cli
