// SimError: a Program that cannot run on the cluster it is given (too few GPUs, no peak FLOP
// rate for the training dtype) or a simulation that stalls. A std::invalid_argument, so callers
// that catch the standard type keep working.
#pragma once

#include <stdexcept>
#include <string>

namespace stagecraft::sim {

class SimError : public std::invalid_argument {
 public:
  explicit SimError(const std::string& what) : std::invalid_argument(what) {}
};

}  // namespace stagecraft::sim
