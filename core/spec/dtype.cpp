#include "core/spec/dtype.hpp"

namespace stagecraft::spec {

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::kFp32: return "fp32";
    case Dtype::kTf32: return "tf32";
    case Dtype::kFp16: return "fp16";
    case Dtype::kBf16: return "bf16";
    case Dtype::kFp8: return "fp8";
  }
  return "?";
}

std::optional<Dtype> parse_dtype(std::string_view s) {
  for (Dtype d : {Dtype::kFp32, Dtype::kTf32, Dtype::kFp16, Dtype::kBf16, Dtype::kFp8}) {
    if (s == to_string(d)) return d;
  }
  return std::nullopt;
}

Dtype storage_dtype(Dtype d) { return d == Dtype::kFp8 ? Dtype::kBf16 : d; }

int64_t bytes_of(Dtype d) {
  switch (d) {
    case Dtype::kFp32:
    case Dtype::kTf32: return 4;
    case Dtype::kFp16:
    case Dtype::kBf16: return 2;
    case Dtype::kFp8: return 1;
  }
  return 4;
}

}  // namespace stagecraft::spec
