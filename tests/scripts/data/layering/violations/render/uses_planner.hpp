#include "render/colours.hpp"
#include "planner/search.hpp"
