#include "core/program/program.hpp"

#include "sim/simulator.hpp"
