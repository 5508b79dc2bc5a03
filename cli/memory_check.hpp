// Whether a CPU-executor job fits in its hosts' memory, checked before anything is allocated
// (`run`, `eval`): the simulator's memory model of the very Program the ranks will interpret, on
// the cluster profile that describes these machines (cpu-local: fp32 everywhere). Measured on
// gpt2-124m, tiny-cpu, tiny-zero3 (2 ranks): estimate 6.1 GB per rank, resident 5.8 GB.
#pragma once

#include <cstdint>
#include <string>

#include "core/program/program.hpp"
#include "executor/comm/communicator.hpp"

namespace stagecraft::cli {

// The simulator's peak memory per rank for `prog` on `cluster` (its node count raised to hold the
// plan), in bytes.
double simulated_peak_bytes(const program::Program& prog, const std::string& cluster);

// What the CUDA backend holds on a GPU for `prog`: its simulated peak for an fp32 Program. A 16-bit
// Program's values live in fp32 storage there (executor/cuda/device_kernels.hpp), so its bytes are
// those of the same plan lowered in fp32, with the model states' 16 bytes a parameter (working
// copy, gradient, Adam m and v) grown by at most 4 (the fp32 masters): at most 1.25 times that peak.
double cuda_device_bytes(const program::Program& prog, const std::string& cluster);

// "" when the ranks of `prog` on this host fit in what it has available; else why not, ending
// with `advice` (what to do instead).
std::string memory_shortfall(const program::Program& prog, const std::string& cluster, int64_t world,
                             const std::string& advice);

// Every rank checks its host; the job goes on only if every rank fits, agreed over `comm` so no
// rank waits for one that stopped. Prints the reason once (rank 0's, else the first rank's).
bool memory_fits_everywhere(executor::Communicator& comm, const std::string& why);

}  // namespace stagecraft::cli
