#include "traces/probe.hpp"
#  include <mpi/session.hpp>
