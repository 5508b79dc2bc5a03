// ZeRO++'s symmetric quantizers on the host (zero/quantize.hpp has the formulas and their source).
#include "executor/zero/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/program/zero.hpp"
#include "executor/errors.hpp"
#include "executor/index.hpp"

namespace stagecraft::executor {

namespace {

void check_groups(std::span<const int64_t> lengths, std::size_t elems, std::size_t scales, const char* what) {
  int64_t sum = 0;
  for (int64_t l : lengths) sum += l;
  if (sum != static_cast<int64_t>(elems) || lengths.size() != scales) {
    throw ExecutorError(std::string(what) + ": " + std::to_string(lengths.size()) + " groups of " + std::to_string(sum) +
                        " elements for " + std::to_string(elems) + " values and " + std::to_string(scales) + " scales");
  }
}

}  // namespace

void quantize_symmetric(std::span<const float> x, std::span<const int64_t> lengths, int bits, std::span<int8_t> q,
                        std::span<float> scales) {
  if (bits != 4 && bits != 8) throw ExecutorError("quantize_symmetric: " + std::to_string(bits) + " bits (4 or 8)");
  if (q.size() != x.size()) throw ExecutorError("quantize_symmetric: output of another size than the input");
  check_groups(lengths, x.size(), scales.size(), "quantize_symmetric");
  const int32_t q_min = -(1 << (bits - 1)), q_max = (1 << (bits - 1)) - 1;
  std::size_t at_elem = 0;
  for (std::size_t g = 0; g < lengths.size(); ++g) {
    const std::span<const float> group = x.subspan(at_elem, at(lengths[g]));
    float m = 0;
    for (float v : group) m = std::max(m, std::abs(v));
    // Params<Symmetric, numBits>(max): scale = (1 << numBits) / (2 * max), 1 when max is 0
    const float k = m == 0 ? 1.0f : static_cast<float>(1 << bits) / (2.0f * m);
    for (std::size_t i = 0; i < group.size(); ++i) {
      const float r = std::nearbyint(group[i] * k);  // round half to even (default rounding mode)
      q[at_elem + i] = static_cast<int8_t>(std::clamp(static_cast<int32_t>(r), q_min, q_max));
    }
    scales[g] = 1.0f / k;  // Params::store writes 1 / scale
    at_elem += group.size();
  }
}

void dequantize_symmetric(std::span<const int8_t> q, std::span<const int64_t> lengths, std::span<const float> scales,
                          std::span<float> x) {
  if (q.size() != x.size()) throw ExecutorError("dequantize_symmetric: output of another size than the input");
  check_groups(lengths, x.size(), scales.size(), "dequantize_symmetric");
  std::size_t at_elem = 0;
  for (std::size_t g = 0; g < lengths.size(); ++g) {
    for (std::size_t i = at_elem; i < at_elem + at(lengths[g]); ++i) x[i] = static_cast<float>(q[i]) * scales[g];
    at_elem += at(lengths[g]);
  }
}

void pack_int4(std::span<const int8_t> q, std::span<int8_t> packed) {
  if (static_cast<int64_t>(packed.size()) != int4_bytes(static_cast<int64_t>(q.size()))) {
    throw ExecutorError("pack_int4: " + std::to_string(q.size()) + " values into " + std::to_string(packed.size()) + " bytes");
  }
  for (std::size_t b = 0; b < packed.size(); ++b) {
    const uint8_t hi = static_cast<uint8_t>(q[2 * b]) & 0xF;
    const uint8_t lo = 2 * b + 1 < q.size() ? static_cast<uint8_t>(q[2 * b + 1]) & 0xF : 0;
    packed[b] = static_cast<int8_t>(static_cast<uint8_t>(hi << 4 | lo));
  }
}

void unpack_int4(std::span<const int8_t> packed, std::span<int8_t> q) {
  if (static_cast<int64_t>(packed.size()) != int4_bytes(static_cast<int64_t>(q.size()))) {
    throw ExecutorError("unpack_int4: " + std::to_string(packed.size()) + " bytes into " + std::to_string(q.size()) + " values");
  }
  // a nibble n of two's complement: n - 16 when its sign bit (8) is set
  const auto nibble = [](uint8_t n) { return static_cast<int8_t>(n >= 8 ? static_cast<int>(n) - 16 : static_cast<int>(n)); };
  for (std::size_t i = 0; i < q.size(); ++i) {
    const uint8_t byte = static_cast<uint8_t>(packed[i / 2]);
    q[i] = nibble(i % 2 == 0 ? byte >> 4 : byte & 0xF);
  }
}

std::vector<int64_t> equal_groups(int64_t n, int64_t groups) {
  if (groups <= 0 || n % groups != 0) {
    throw ExecutorError("equal_groups: " + std::to_string(n) + " elements in " + std::to_string(groups) + " equal groups");
  }
  return std::vector<int64_t>(at(groups), n / groups);
}

QwzPiece qwz_piece(int64_t n, int64_t block) {
  QwzPiece p;
  p.elems = n;
  p.padded = (n + 7) / 8 * 8;
  p.groups = p.padded > 0 ? program::qwz_groups(p.padded, block) : 0;
  return p;
}

void QuantizationError::add(std::span<const float> exact, std::span<const float> dequantized) {
  for (std::size_t i = 0; i < exact.size(); ++i) {
    const double e = static_cast<double>(exact[i]) - static_cast<double>(dequantized[i]);
    err_sq += e * e;
    ref_sq += static_cast<double>(exact[i]) * static_cast<double>(exact[i]);
    max_abs = std::max(max_abs, std::abs(e));
  }
  elems += static_cast<int64_t>(exact.size());
}

void QuantizationError::merge(const QuantizationError& o) {
  elems += o.elems;
  err_sq += o.err_sq;
  ref_sq += o.ref_sq;
  max_abs = std::max(max_abs, o.max_abs);
}

double QuantizationError::relative_rms() const { return ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : 0.0; }

}  // namespace stagecraft::executor
