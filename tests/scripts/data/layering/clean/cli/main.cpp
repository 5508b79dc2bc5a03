#include "sim/b.hpp"
#include "executor/c.hpp"
#include <CLI/CLI.hpp>
