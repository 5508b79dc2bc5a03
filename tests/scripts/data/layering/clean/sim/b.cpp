#include "core/a.hpp"
#include <Eigen/Dense>
