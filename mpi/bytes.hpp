// Byte strings of any length (up to MPI's int counts in total) over a communicator: every
// rank's string on every rank, every rank's string on the root, the root's string on every
// rank. Lengths travel first (as 64-bit integers, to every rank), so the size guard is checked
// identically on every rank: when the strings together exceed INT_MAX bytes, every rank throws
// MpiError (code MPI_ERR_COUNT) before any byte moves, and no rank is left waiting.
// Collective: every rank of `comm` calls the same function in the same order.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stagecraft::mpi {

// Completes a request of the non-blocking collectives these functions start: MPI_Wait by default;
// a caller that must not block inside MPI polls instead (MpiCommunicator's watchdog).
using Waiter = std::function<void(MPI_Request*)>;

// Every rank's `mine`, on every rank, in rank order.
std::vector<std::string> all_gather_bytes(MPI_Comm comm, std::string_view mine, const Waiter& wait = {});
// Every rank's `mine` on `root`, in rank order; other ranks get an empty vector.
std::vector<std::string> gather_bytes(MPI_Comm comm, std::string_view mine, int root = 0, const Waiter& wait = {});
// `root`'s `data` on every rank (what other ranks pass is ignored).
std::string broadcast_bytes(MPI_Comm comm, std::string_view data, int root = 0, const Waiter& wait = {});

// The size guard: the sum of `lengths` as an MPI int count, or MpiError (MPI_ERR_COUNT)
// "<what>: <n> bytes in all exceed MPI's int counts (2147483647)".
int total_bytes(std::span<const int64_t> lengths, const char* what);

}  // namespace stagecraft::mpi
