// World: the job this process is one rank of — its rank and size, a Communicator for a
// Program's Placement, and how to end the whole job. It is the one place that decides between
// MPI and a single process, so its callers (cli/run.cpp) need no MPI and no build switch.
//
// The class has two definitions, one per library, and a program links exactly one of them:
//   stagecraft_executor_mpi    executor/world_mpi.cpp: joins MPI_COMM_WORLD (mpi::Session,
//                              MPI_THREAD_FUNNELED; finalised with the World when it
//                              initialised MPI), hands out MpiCommunicators, aborts the job
//                              with MPI_Abort. Built only with STAGECRAFT_WITH_MPI.
//   stagecraft_executor_local  executor/world_local.cpp: a world of one rank with a
//                              LocalCommunicator; abort() returns the code to its caller.
// cli/CMakeLists.txt says which executable links which. Not a launcher: mpirun starts the ranks.
#pragma once

#include <cstdint>
#include <memory>

#include "core/program/program.hpp"
#include "executor/comm/communicator.hpp"

namespace stagecraft::executor {

class World {
 public:
  World();
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int64_t rank() const;
  int64_t size() const;
  // The groups of `placement` over this world (collective: every rank calls it). Throws
  // ExecutorError when the world's size is not placement.world().
  std::unique_ptr<Communicator> communicator(const program::Placement& placement) const;
  // Ends every rank of the job with exit status `code`, for the fault path, where a peer may
  // wait forever on this rank. A world of one has no peers: it returns `code`.
  int abort(int code) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagecraft::executor
