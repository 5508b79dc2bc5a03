// The MPI shard (library stagecraft_planner_mpi, built only with STAGECRAFT_WITH_MPI): the shard
// owns an mpi::Session (MPI_THREAD_FUNNELED: only the calling thread talks to MPI), so MPI is
// initialised when the first MPI shard is made and finalised when that shard is destroyed.
// Byte strings travel with mpi::all_gather_bytes / broadcast_bytes over MPI_COMM_WORLD.
#include <mpi.h>

#include <string>

#include "mpi/bytes.hpp"
#include "mpi/error.hpp"
#include "mpi/session.hpp"
#include "planner/shard.hpp"

namespace stagecraft::planner {

namespace {

class MpiShard final : public Shard {
 public:
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> allgather(const std::string& mine) override {
    return mpi::all_gather_bytes(MPI_COMM_WORLD, mine);
  }

  std::string broadcast(const std::string& data) override { return mpi::broadcast_bytes(MPI_COMM_WORLD, data); }

  bool any(bool flag) override {
    int mine = flag ? 1 : 0, all = 0;
    MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    return all != 0;
  }

 private:
  mpi::Session session_{mpi::ThreadLevel::kFunneled};
  int rank_ = session_.rank(), size_ = session_.size();
};

}  // namespace

std::unique_ptr<Shard> make_shard() {
  if (launched_under_mpi()) return std::make_unique<MpiShard>();
  return local_shard();
}

bool built_with_mpi() { return true; }

}  // namespace stagecraft::planner
