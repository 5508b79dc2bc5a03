// qgZ's geometry and host computations (executor/zero/qgz.hpp), with the two all-to-alls played
// out in-process between W = 4 simulated ranks, L = 2 a node (M = 2 nodes): the swizzle order is
// DeepSpeed's (partition p at slot (p mod L)·M + p/L), the groups are max(rows, cols, W) cut at
// partition edges, and values chosen representable at every step give the exact sum.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "executor/errors.hpp"
#include "executor/zero/qgz.hpp"

namespace stagecraft::executor {
namespace {

// A 4 x 4 tensor at flat positions [100, 116) cut by the flat shards into partitions of 3, 5, 0
// and 8 elements; G = max(4, 4, 4) = 4 groups of 4.
QgzMatrix uneven() { return QgzMatrix({100, 116}, {{100, 103}, {103, 108}, {108, 108}, {108, 116}}, 4, 4, 2); }

TEST(Qgz, GroupsAreTheTensorsCutAtPartitionEdges) {
  const QgzMatrix m = uneven();
  EXPECT_EQ(m.groups(), 4);
  EXPECT_EQ(m.part_groups(0), (std::vector<int64_t>{3}));     // [100, 103) in group [100, 104)
  EXPECT_EQ(m.part_groups(1), (std::vector<int64_t>{1, 4}));  // 103 | 104..107
  EXPECT_TRUE(m.part_groups(2).empty());
  EXPECT_EQ(m.part_groups(3), (std::vector<int64_t>{4, 4}));
  // local peer 0 takes partitions 0 and 2 (ranks 0 + 0·2, 0 + 1·2), peer 1 partitions 1 and 3
  EXPECT_EQ(m.chunk_values(0), 2 + 0);  // ⌈3/2⌉ + 0 bytes
  EXPECT_EQ(m.chunk_values(1), 3 + 4);  // ⌈5/2⌉ + 8/2
  EXPECT_EQ(m.chunk_scales(0), 1);
  EXPECT_EQ(m.chunk_scales(1), 2 + 2);
}

TEST(Qgz, SwizzlePutsEachLocalPeersPartitionsTogether) {
  // equal partitions of 4 (one group each), partition p's maximum p + 1: its scale (p + 1)/8.
  // Slots: p0 -> 0, p1 -> 2, p2 -> 1, p3 -> 3 (DeepSpeed's "0 1 2 3 -> 0 2 1 3" for 2 nodes of 2).
  const QgzMatrix m({0, 16}, {{0, 4}, {4, 8}, {8, 12}, {12, 16}}, 4, 4, 2);
  std::vector<float> x(16, 0.0f);
  for (int p = 0; p < 4; ++p) x[static_cast<std::size_t>(4 * p)] = -float(p + 1);
  std::vector<int64_t> values, scales;
  QuantizationError error;
  const QuantizedPayload out = m.swizzle_quantize(x, values, scales, error);
  EXPECT_EQ(out.scales, (std::vector<float>{1.0f / 8, 3.0f / 8, 2.0f / 8, 4.0f / 8}));
  EXPECT_EQ(values, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(scales, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(error.err_sq, 0.0);  // -(p+1) is -8 scales: exact
}

// Plays the whole reduction for 4 ranks holding `x[r]`; returns each rank's partition of the sum.
std::vector<std::vector<float>> reduce(const QgzMatrix& m, const std::vector<std::vector<float>>& x) {
  const int64_t w = 4, l = 2, nodes = 2;
  std::vector<QuantizedPayload> sent(w);
  std::vector<std::vector<int64_t>> values(w), scales(w);
  QuantizationError error;
  for (int64_t r = 0; r < w; ++r) sent[r] = m.swizzle_quantize(x[r], values[r], scales[r], error);
  // intra-node all-to-all: rank (node, j) gets chunk j of each local peer, in peer order
  std::vector<QuantizedPayload> second(w);
  std::vector<std::vector<int64_t>> values2(w), scales2(w);
  for (int64_t r = 0; r < w; ++r) {
    const int64_t node = r / l, j = r % l;
    QuantizedPayload in;
    for (int64_t i = 0; i < l; ++i) {
      const int64_t peer = node * l + i;
      int64_t v0 = 0, s0 = 0;
      for (int64_t c = 0; c < j; ++c) v0 += values[peer][c], s0 += scales[peer][c];
      in.values.insert(in.values.end(), sent[peer].values.begin() + v0, sent[peer].values.begin() + v0 + values[peer][j]);
      in.scales.insert(in.scales.end(), sent[peer].scales.begin() + s0, sent[peer].scales.begin() + s0 + scales[peer][j]);
    }
    second[r] = m.reduce_requantize(j, in, values2[r], scales2[r], error);
  }
  // cross-node all-to-all: rank j + kL gets partition k from rank j + nL of every node n
  std::vector<std::vector<float>> out(w);
  for (int64_t r = 0; r < w; ++r) {
    const int64_t j = r % l, k = r / l;
    QuantizedPayload in;
    for (int64_t n = 0; n < nodes; ++n) {
      const int64_t peer = n * l + j;
      int64_t v0 = 0, s0 = 0;
      for (int64_t c = 0; c < k; ++c) v0 += values2[peer][c], s0 += scales2[peer][c];
      in.values.insert(in.values.end(), second[peer].values.begin() + v0, second[peer].values.begin() + v0 + values2[peer][k]);
      in.scales.insert(in.scales.end(), second[peer].scales.begin() + s0, second[peer].scales.begin() + s0 + scales2[peer][k]);
    }
    out[r] = m.dequantize_sum(r, in);
  }
  return out;
}

TEST(Qgz, RepresentableGradientsReduceToTheExactSum) {
  // Every group a partition leaves (first elements at 100, 103, 104, 108, 112) starts with -1 on
  // every rank; the rest are 0 or ±0.5. First quantization: max 1, scale 1/8 (all exact). The node
  // sums: -2 first, the rest in {0, ±0.5, ±1}, max 2, scale 1/4 (exact). The cross-node sum: exact.
  const QgzMatrix m = uneven();
  std::vector<std::vector<float>> x(4, std::vector<float>(16));
  for (int r = 0; r < 4; ++r) {
    for (int k = 0; k < 16; ++k) {
      const int pos = 100 + k;
      const bool first = pos == 100 || pos == 103 || pos == 104 || pos == 108 || pos == 112;
      x[r][k] = first ? -1.0f : 0.5f * float((r + k) % 3 - 1);
    }
  }
  const std::vector<std::vector<float>> got = reduce(m, x);
  for (int64_t d = 0; d < 4; ++d) {
    const Range p = m.part(d);
    ASSERT_EQ(static_cast<int64_t>(got[d].size()), p.size());
    for (int64_t e = 0; e < p.size(); ++e) {
      float want = 0;
      for (int r = 0; r < 4; ++r) want += x[r][p.begin - 100 + e];
      EXPECT_EQ(got[d][e], want) << "rank " << d << " position " << p.begin + e;
    }
  }
}

TEST(Qgz, GeneralGradientsReduceWithinTheTwoQuantizationsError) {
  // int4 symmetric errs by at most one scale (max/8) an element per quantization: a rank's first
  // quantization (4 of them summed) and the node sum's requantization (2 summed), per group.
  const QgzMatrix m = uneven();
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> x(4, std::vector<float>(16));
  for (auto& v : x) {
    for (float& e : v) e = normal(gen);
  }
  const std::vector<std::vector<float>> got = reduce(m, x);
  for (int64_t d = 0; d < 4; ++d) {
    const Range p = m.part(d);
    for (int64_t e = 0; e < p.size(); ++e) {
      float want = 0, bound = 0;
      for (int r = 0; r < 4; ++r) {
        want += x[r][p.begin - 100 + e];
        float mx = 0;
        for (int k = 0; k < 16; ++k) mx = std::max(mx, std::abs(x[r][k]));
        bound += mx / 8;  // a group's max is at most the tensor's
      }
      float node_max = 0;  // a node sum's magnitude is at most Σ of its ranks' maxima
      for (int r = 0; r < 4; ++r) {
        float mx = 0;
        for (int k = 0; k < 16; ++k) mx = std::max(mx, std::abs(x[r][k]));
        node_max += mx;
      }
      bound += 2 * (node_max / 2) / 8;
      EXPECT_LE(std::abs(got[d][e] - want), bound) << "rank " << d << " position " << p.begin + e;
    }
  }
}

TEST(Qgz, RefusesShapesDeepSpeedCannotSwizzle) {
  // 6 x 2 = 12 elements: not a multiple of 2·4
  EXPECT_THROW(QgzMatrix({0, 12}, {{0, 3}, {3, 6}, {6, 9}, {9, 12}}, 6, 2, 2), ExecutorError);
  // 6 x 4 = 24 (a multiple of 8), but G = 6 groups is not a multiple of W = 4
  EXPECT_THROW(QgzMatrix({0, 24}, {{0, 6}, {6, 12}, {12, 18}, {18, 24}}, 6, 4, 2), ExecutorError);
  // partitions that leave a gap
  EXPECT_THROW(QgzMatrix({0, 16}, {{0, 4}, {5, 8}, {8, 12}, {12, 16}}, 4, 4, 2), ExecutorError);
}

}  // namespace
}  // namespace stagecraft::executor
