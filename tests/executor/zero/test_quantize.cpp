// ZeRO++'s quantizers (executor/zero/quantize.hpp) against values derived by hand from DeepSpeed's
// kernel formulas (quantization_utils.h): k = 2^b / (2·max|x|), q = clamp(rint(x·k)), scale 1/k.
// Scales here are powers of two, so every product is exact and the checks are equalities.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "core/program/zero.hpp"
#include "executor/errors.hpp"
#include "executor/zero/quantize.hpp"

namespace stagecraft::executor {
namespace {

std::vector<float> round_trip(const std::vector<float>& x, const std::vector<int64_t>& groups, int bits,
                              std::vector<int8_t>* q_out = nullptr, std::vector<float>* scales_out = nullptr) {
  std::vector<int8_t> q(x.size());
  std::vector<float> scales(groups.size()), back(x.size());
  quantize_symmetric(x, groups, bits, q, scales);
  dequantize_symmetric(q, groups, scales, back);
  if (q_out) *q_out = q;
  if (scales_out) *scales_out = scales;
  return back;
}

TEST(Quantize, Int8ScaleIsTheGroupMaximumOver128AndThePositiveMaximumIsClamped) {
  // max |x| = 1: k = 256 / 2 = 128, scale 1/128. 0.5 -> 64, 0.25 -> 32, -1 -> -128 (exact);
  // +1 -> 128, clamped to 127: 127/128, an error of one scale (the only element above s/2).
  std::vector<int8_t> q;
  std::vector<float> scales;
  const std::vector<float> back = round_trip({-1.0f, 0.5f, 0.25f, 1.0f}, {4}, 8, &q, &scales);
  EXPECT_EQ(q, (std::vector<int8_t>{-128, 64, 32, 127}));
  EXPECT_EQ(scales, (std::vector<float>{1.0f / 128}));
  EXPECT_EQ(back, (std::vector<float>{-1.0f, 0.5f, 0.25f, 127.0f / 128}));
}

TEST(Quantize, RepresentableGroupsComeBackExactlyInEachGroupsOwnScale) {
  // group 0: max 1 (the -1), values q/128; group 1: max 4 (the -4), values q/32; group 2: all zero
  // (scale 1 by the kernel's rule, every q 0)
  const std::vector<float> x = {-1.0f, -0.5f, 0.0f, 0.25f, 127.0f / 128, 3.0f / 128,
                                -4.0f, 1.0f / 32, 3.96875f, 2.0f,
                                0.0f, 0.0f};
  std::vector<float> scales;
  EXPECT_EQ(round_trip(x, {6, 4, 2}, 8, nullptr, &scales), x);
  EXPECT_EQ(scales, (std::vector<float>{1.0f / 128, 4.0f / 128, 1.0f}));
}

TEST(Quantize, Int4UsesEightLevelsAPerSideAndRoundsHalfToEven) {
  // max 1: k = 16 / 2 = 8, scale 1/8. 0.5 -> 4; 0.3 -> 2.4 -> 2 (0.25); 0.3125 -> 2.5 -> 2 (even);
  // 0.4375 -> 3.5 -> 4 (even); -1 -> -8; 1 -> 8, clamped to 7 (0.875)
  std::vector<int8_t> q;
  const std::vector<float> back = round_trip({-1.0f, 0.5f, 0.3f, 0.3125f, 0.4375f, 1.0f}, {6}, 4, &q);
  EXPECT_EQ(q, (std::vector<int8_t>{-8, 4, 2, 2, 4, 7}));
  EXPECT_EQ(back, (std::vector<float>{-1.0f, 0.5f, 0.25f, 0.25f, 0.5f, 0.875f}));
}

TEST(Quantize, ErrorIsAtMostHalfAScaleExceptWhereThePositiveMaximumIsClamped) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int bits : {4, 8}) {
    std::vector<float> x(1000);
    for (float& v : x) v = normal(gen);
    const std::vector<int64_t> groups = {1, 99, 400, 500};
    std::vector<float> scales;
    const std::vector<float> back = round_trip(x, groups, bits, nullptr, &scales);
    const float top = float(1 << (bits - 1));  // 2^(b-1)
    std::size_t at = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (int64_t k = 0; k < groups[g]; ++k, ++at) {
        const float s = scales[g], err = std::abs(x[at] - back[at]);
        const bool clamped = x[at] > (top - 0.5f) * s;
        EXPECT_LE(err, (clamped ? 1.0f : 0.5f) * s * (1 + 1e-6f)) << bits << " bits, element " << at;
      }
    }
  }
}

TEST(Quantize, Int4PacksElementTwoIInTheHighNibble) {
  // {-8, 7} -> 0x87; {1, -1} -> 0x1F; {3} -> 0x30 (odd count: low nibble 0)
  const std::vector<int8_t> q = {-8, 7, 1, -1, 3};
  std::vector<int8_t> packed(static_cast<std::size_t>(int4_bytes(5)));
  pack_int4(q, packed);
  EXPECT_EQ(packed, (std::vector<int8_t>{int8_t(0x87), int8_t(0x1F), int8_t(0x30)}));
  std::vector<int8_t> back(5);
  unpack_int4(packed, back);
  EXPECT_EQ(back, q);
}

TEST(Quantize, QwzPiecesArePaddedToEightAndGroupedByDeepSpeedsRule) {
  // 100 -> 104 elements, ⌈104/8000⌉ = 1 group; 8008 = 8·7·11·13: 7 groups (zero.hpp's rule);
  // 16384: ⌈16384/8000⌉ = 3, 8·3 ∤ 16384, so 4 (groups of 4096)
  EXPECT_EQ(qwz_piece(100, 8000).padded, 104);
  EXPECT_EQ(qwz_piece(100, 8000).groups, 1);
  EXPECT_EQ(qwz_piece(8008, 8000).groups, 7);
  EXPECT_EQ(qwz_piece(16384, 8000).groups, 4);
  EXPECT_EQ(qwz_piece(0, 8000).groups, 0);
  EXPECT_EQ(equal_groups(104, 1), (std::vector<int64_t>{104}));
  EXPECT_THROW(equal_groups(10, 3), ExecutorError);
}

TEST(Quantize, RefusesGroupsThatDoNotCoverTheValues) {
  std::vector<float> x(4), scales(1);
  std::vector<int8_t> q(4);
  EXPECT_THROW(quantize_symmetric(x, std::vector<int64_t>{3}, 8, q, scales), ExecutorError);
  EXPECT_THROW(quantize_symmetric(x, std::vector<int64_t>{4}, 5, q, scales), ExecutorError);
}

}  // namespace
}  // namespace stagecraft::executor
