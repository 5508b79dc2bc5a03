#include "core/a.hpp"
#include "mpi/session.hpp"
#include <mpi.h>
