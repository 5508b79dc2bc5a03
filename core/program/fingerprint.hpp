// The fingerprint of a lowered Program: FNV-1a (core/text/hash.hpp) over everything that decides
// what its ranks do — the placement, the bytes per element, and every role's ranks, instructions
// (each field) and dependencies — as 16 hex digits. Traces carry it, so that compare and
// calibrate can check that the Program they lower from a trace's header is the one that ran.
#pragma once

#include <string>

#include "core/program/program.hpp"

namespace stagecraft::program {

std::string fingerprint(const Program& prog);

}  // namespace stagecraft::program
