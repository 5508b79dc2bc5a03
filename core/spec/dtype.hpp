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
// What a training of compute dtype `d` stores its activations, working parameters and gradients
// in: fp8 training (Transformer Engine's recipe: the block GEMMs' operands cast to FP8 E4M3
// forward and E5M2 backward, everything else 16-bit) keeps them in bf16; any other dtype is itself.
Dtype storage_dtype(Dtype d);

}  // namespace stagecraft::spec
