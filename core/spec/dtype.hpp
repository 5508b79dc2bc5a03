// Numeric formats a training step can compute in, and their width.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace stagecraft::spec {

enum class Dtype { kFp32, kTf32, kFp16, kBf16, kFp8 };

const char* to_string(Dtype d);
std::optional<Dtype> parse_dtype(std::string_view s);
// Bytes of one element as stored (tf32 is stored as fp32).
int64_t bytes_of(Dtype d);

}  // namespace stagecraft::spec
