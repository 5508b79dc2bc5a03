// Shard: how one search is split over processes. A single process is the one-rank shard; under
// `mpirun -np N stagecraft search …` (built with STAGECRAFT_WITH_MPI) every rank enumerates and
// simulates its share and the ranks exchange what they found after each step, so every rank
// holds the same survivors and results, and rank 0 reports and writes the store.
// MPI is initialised only when the process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK in the environment), so a plain run needs no MPI runtime.
// make_shard() and built_with_mpi() are defined twice and a program links one of the two:
// stagecraft_planner_mpi (planner/mpi_shard.cpp, built only with STAGECRAFT_WITH_MPI) or
// stagecraft_planner_local (planner/shard_local.cpp: always the one-rank shard). The rest of the
// planner, stagecraft_planner, has no MPI.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace stagecraft::planner {

class Shard {
 public:
  virtual ~Shard() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank contributes `mine`; every rank receives all contributions in rank order.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // Rank 0's `data`, on every rank.
  virtual std::string broadcast(const std::string& data) = 0;
  // True on every rank when `flag` is true on any rank.
  virtual bool any(bool flag) = 0;
};

std::unique_ptr<Shard> local_shard();
// The MPI shard when the program links stagecraft_planner_mpi and the process was launched
// under an MPI launcher; otherwise the local one.
std::unique_ptr<Shard> make_shard();
bool launched_under_mpi();
bool built_with_mpi();

}  // namespace stagecraft::planner
