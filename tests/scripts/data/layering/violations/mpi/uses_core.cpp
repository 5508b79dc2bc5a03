#include "mpi/error.hpp"
#include "core/spec/error.hpp"
