// World of one rank, without MPI (library stagecraft_executor_local); executor/world.hpp.
#include "executor/world.hpp"

#include <string>

#include "executor/comm/local.hpp"
#include "executor/errors.hpp"

namespace stagecraft::executor {

struct World::Impl {};

World::World() : impl_(std::make_unique<Impl>()) {}
World::~World() = default;

int64_t World::rank() const { return 0; }
int64_t World::size() const { return 1; }

std::unique_ptr<Communicator> World::communicator(const program::Placement& placement) const {
  if (placement.world() != 1) {
    throw ExecutorError("World: this process is a world of one rank, the plan needs " +
                        std::to_string(placement.world()));
  }
  return std::make_unique<LocalCommunicator>();
}

int World::abort(int code) const { return code; }

}  // namespace stagecraft::executor
