// World over MPI_COMM_WORLD (library stagecraft_executor_mpi); executor/world.hpp.
#include "executor/world.hpp"

#include "executor/comm/mpi.hpp"
#include "mpi/session.hpp"

namespace stagecraft::executor {

struct World::Impl {
  mpi::Session session{mpi::ThreadLevel::kFunneled};
};

World::World() : impl_(std::make_unique<Impl>()) {}
World::~World() = default;

int64_t World::rank() const { return impl_->session.rank(); }
int64_t World::size() const { return impl_->session.size(); }

std::unique_ptr<Communicator> World::communicator(const program::Placement& placement) const {
  return std::make_unique<MpiCommunicator>(placement);
}

int World::abort(int code) const { mpi::abort_job(code); }

}  // namespace stagecraft::executor
