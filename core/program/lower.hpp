// lower(): a validated plan -> the Program both interpreters run (ARCHITECTURE.md, "one Program,
// two interpreters"; docs/program.md). Pure: the same inputs give the same Program.
#pragma once

#include "core/program/program.hpp"

namespace stagecraft::program {

// Validates the plan against the model and training (tp*pp*dp ranks) and lowers it.
// Throws spec::SpecError for an invalid plan.
Program lower(const spec::Model& model, const spec::Training& training, const spec::Plan& plan);

}  // namespace stagecraft::program
