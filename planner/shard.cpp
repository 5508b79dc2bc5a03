#include "planner/shard.hpp"

#include <cstdlib>

namespace stagecraft::planner {

namespace {

class LocalShard final : public Shard {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> allgather(const std::string& mine) override { return {mine}; }
  std::string broadcast(const std::string& data) override { return data; }
  bool any(bool flag) override { return flag; }
};

}  // namespace

std::unique_ptr<Shard> local_shard() { return std::make_unique<LocalShard>(); }

bool launched_under_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(name); v && *v) return true;
  }
  return false;
}

}  // namespace stagecraft::planner
