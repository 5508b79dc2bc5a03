// Counter-based random numbers: every value is a pure function of (key, counter), never of call
// order, so any rank can regenerate any element on its own (parameter init, synthetic data).
// It is not a cryptographic generator; the mixer is splitmix64's finaliser (Steele et al. 2014).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>

namespace stagecraft::executor::rng {

// splitmix64 finaliser: a bijection on 64-bit words with good avalanche.
constexpr uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A stream key combined with a counter (or a second key).
constexpr uint64_t combine(uint64_t key, uint64_t counter) { return mix(key ^ mix(counter)); }

// FNV-1a of a name, mixed, so tensor names become independent stream keys.
constexpr uint64_t hash_name(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return mix(h);
}

// Uniform in (0, 1), never exactly 0 or 1 (53 random bits, centred in their cell).
inline double uniform(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

// Standard normal number `index` of stream `key` (Box-Muller, cosine branch).
inline double normal(uint64_t key, uint64_t index) {
  const double u1 = uniform(combine(key, 2 * index));
  const double u2 = uniform(combine(key, 2 * index + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace stagecraft::executor::rng
