// make_shard() and built_with_mpi() of a program without MPI (library stagecraft_planner_local):
// every search is the one-rank shard. planner/shard.hpp.
#include "planner/shard.hpp"

namespace stagecraft::planner {

std::unique_ptr<Shard> make_shard() { return local_shard(); }
bool built_with_mpi() { return false; }

}  // namespace stagecraft::planner
