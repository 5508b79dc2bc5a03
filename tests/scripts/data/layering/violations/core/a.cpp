// core includes only core.
#include "core/a.hpp"
#include "sim/simulator.hpp"
