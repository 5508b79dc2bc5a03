// Indexing a std::vector with the signed 64-bit ids the Program uses (instruction, tensor and
// stage ids are int64_t; a negative one never reaches an index, the lowering rejects it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace stagecraft::executor {

inline std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace stagecraft::executor
