// FNV-1a (64-bit) over bytes, and its 16-hex-digit rendering: the checksums of parameters and
// checkpoints and the fingerprint of a lowered Program use this one hash.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace stagecraft::text {

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ULL;

inline uint64_t fnv1a(const void* data, std::size_t bytes, uint64_t h = kFnv1aBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

inline std::string hex16(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace stagecraft::text
