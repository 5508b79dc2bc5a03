// ZeRO++'s quantizers on host fp32 values, as DeepSpeed's kernels define them
// (csrc/includes/quantization_utils.h, Params<Symmetric, numBits>; quantize.cu, swizzled_quantize.cu):
// symmetric, one fp32 scale per group. Not the collectives (executor/interpreter_zero.cpp) and not
// the rules that choose the groups (program::qwz_groups for qwZ, zero/qgz.hpp for qgZ).
//
//   per group of values x, b bits:  m = max |x|
//                                    q = clamp(rint(x · k), -2^(b-1), 2^(b-1) - 1),  k = 2^b / (2m)
//                                    (rint: half to even, the kernel's __float2int_rn; m = 0: k = 1)
//   stored scale:                    s = 1 / k  (= m / 2^(b-1): m/128 for int8, m/8 for int4)
//   dequantized:                     x' = q · s
// Error: |x - x'| <= s/2 for every element except a positive one that rounds to 2^(b-1) and is
// clamped (x > (2^(b-1) - 1/2)·s, the group's largest values): there |x - x'| <= s, and x = m gives
// exactly s. Values q·s with q in [-2^(b-1), 2^(b-1) - 1] come back exactly.
// DeepSpeed's kernels read fp16; this executor quantizes its fp32 values (the same formulas).
// int4 values travel packed two a byte (quantization.h PackedInt4 {high: 4, low: 4}, which GCC and
// NVCC lay out low field first): element 2i in the byte's high nibble, element 2i+1 in the low one.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace stagecraft::executor {

// Quantizes `x` in consecutive groups of `lengths` elements (their sum is x.size()) to `bits` (4 or
// 8): q gets one value per element, `scales` one stored scale per group. Throws ExecutorError on
// sizes that disagree.
void quantize_symmetric(std::span<const float> x, std::span<const int64_t> lengths, int bits, std::span<int8_t> q,
                        std::span<float> scales);
// x = q · scale of the element's group.
void dequantize_symmetric(std::span<const int8_t> q, std::span<const int64_t> lengths, std::span<const float> scales,
                          std::span<float> x);

// Bytes of n packed int4 values: ⌈n/2⌉ (an odd count leaves the last low nibble 0).
inline int64_t int4_bytes(int64_t n) { return (n + 1) / 2; }
void pack_int4(std::span<const int8_t> q, std::span<int8_t> packed);
void unpack_int4(std::span<const int8_t> packed, std::span<int8_t> q);  // q.size() values

// `groups` equal groups of n elements (n a multiple of groups).
std::vector<int64_t> equal_groups(int64_t n, int64_t groups);

// qwZ's quantization of a rank's piece of n elements: padded with zeros to a multiple of 8
// elements (DeepSpeed's partitions are padded and its CUDAQuantizer needs 8 | numel), in
// program::qwz_groups(padded, block) groups. 0 groups: the rule refuses (only when block > 16000).
struct QwzPiece {
  int64_t elems = 0;   // n
  int64_t padded = 0;  // ⌈n/8⌉·8: the int8 values on the wire
  int64_t groups = 0;  // fp32 scales on the wire
};
QwzPiece qwz_piece(int64_t n, int64_t block);

// What a run's quantizations lost: Σ (x - x')², Σ x² and max |x - x'| over the values quantized.
struct QuantizationError {
  int64_t elems = 0;
  double err_sq = 0, ref_sq = 0, max_abs = 0;
  void add(std::span<const float> exact, std::span<const float> dequantized);
  void merge(const QuantizationError& o);
  double relative_rms() const;  // sqrt(err_sq / ref_sq), 0 when nothing was quantized
};

}  // namespace stagecraft::executor
