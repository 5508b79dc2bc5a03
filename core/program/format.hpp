// Renderings of a Program: one readable line per instruction, or JSON data (docs/program.md).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/program/program.hpp"

namespace stagecraft::program {

// "#57 RecvActivation mb=2 chunk=0 peer=stage0/chunk0 bytes=4194304"
std::string describe(const Program& prog, const RoleProgram& role, int32_t index);
// Every role (or only `rank`'s), one instruction per line, with lane and dependencies.
void print_program(std::ostream& out, const Program& prog, std::optional<int64_t> rank);
nlohmann::json to_json(const Program& prog, std::optional<int64_t> rank);

}  // namespace stagecraft::program
