// Context-parallel attention (executor/model/ops.hpp): a cp rank's queries, its two load-balanced
// causal chunks, against the whole sequence's keys give exactly the rows of whole-sequence
// attention at their positions, and the ranks' dK | dV parts sum to the whole sequence's.
#include <gtest/gtest.h>

#include <random>

#include "executor/model/ops.hpp"

namespace stagecraft::executor::ops {
namespace {

TEST(AttentionCp, ChunksPositionsAreTheLoadBalancedPair) {
  // seq 16 over cp 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
  EXPECT_EQ(cp_positions(16, 2, 0), (std::vector<int64_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(cp_positions(16, 2, 1), (std::vector<int64_t>{4, 5, 6, 7, 8, 9, 10, 11}));
  // every position once over the ranks
  std::vector<int> seen(24, 0);
  for (int64_t c = 0; c < 3; ++c) {
    for (int64_t p : cp_positions(24, 3, c)) ++seen[static_cast<std::size_t>(p)];
  }
  EXPECT_EQ(seen, std::vector<int>(24, 1));
}

TEST(AttentionCp, EachRanksRowsAndTheSummedKeyGradientsAreTheWholeSequences) {
  // 2 sequences of 16 tokens, 4 query heads over 2 K/V heads of 8: in double, random values
  AttentionShape a{2, 16, 4, 2, 8};
  const int64_t T = a.seq, W = a.qkv_cols(), C = a.hidden(), K2 = 2 * a.kv_dim(), N = a.batch * T;
  std::mt19937 rng(7);
  std::normal_distribution<double> x(0, 1);
  std::vector<double> qkv(static_cast<std::size_t>(N * W)), dout(static_cast<std::size_t>(N * C));
  for (double& v : qkv) v = x(rng);
  for (double& v : dout) v = x(rng);
  std::vector<double> probs(static_cast<std::size_t>(a.batch * a.heads * T * T)), out(static_cast<std::size_t>(N * C)),
      dqkv(static_cast<std::size_t>(N * W));
  attention_forward(qkv.data(), probs.data(), out.data(), a);
  attention_backward(qkv.data(), probs.data(), dout.data(), dqkv.data(), a);
  // the sequence's k | v, natural order: what the all-gather (or the ring) gives every rank
  std::vector<double> kv(static_cast<std::size_t>(N * K2));
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t j = 0; j < K2; ++j) kv[static_cast<std::size_t>(r * K2 + j)] = qkv[static_cast<std::size_t>(r * W + C + j)];
  }
  for (int64_t cp : {2, 4}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    std::vector<double> dkv_sum(static_cast<std::size_t>(N * K2), 0.0);
    for (int64_t c = 0; c < cp; ++c) {
      const std::vector<int64_t> pos = cp_positions(T, cp, c);
      const int64_t tq = static_cast<int64_t>(pos.size());
      std::vector<double> lq(static_cast<std::size_t>(a.batch * tq * W)), ldout(static_cast<std::size_t>(a.batch * tq * C));
      for (int64_t b = 0; b < a.batch; ++b) {
        for (int64_t i = 0; i < tq; ++i) {
          const int64_t src = b * T + pos[static_cast<std::size_t>(i)], dst = b * tq + i;
          for (int64_t j = 0; j < W; ++j) lq[static_cast<std::size_t>(dst * W + j)] = qkv[static_cast<std::size_t>(src * W + j)];
          for (int64_t j = 0; j < C; ++j) ldout[static_cast<std::size_t>(dst * C + j)] = dout[static_cast<std::size_t>(src * C + j)];
        }
      }
      std::vector<double> lprobs(static_cast<std::size_t>(a.batch * a.heads * tq * T)), lout(static_cast<std::size_t>(a.batch * tq * C)),
          ldq(static_cast<std::size_t>(a.batch * tq * C)), ldkv(static_cast<std::size_t>(N * K2), 0.0);
      attention_forward_cp(lq.data(), kv.data(), std::span<const int64_t>(pos), T, lprobs.data(), lout.data(), a);
      attention_backward_cp(lq.data(), kv.data(), lprobs.data(), tq, T, ldout.data(), ldq.data(), ldkv.data(), a);
      for (int64_t b = 0; b < a.batch; ++b) {
        for (int64_t i = 0; i < tq; ++i) {
          const int64_t src = b * T + pos[static_cast<std::size_t>(i)], dst = b * tq + i;
          for (int64_t j = 0; j < C; ++j) {
            EXPECT_NEAR(lout[static_cast<std::size_t>(dst * C + j)], out[static_cast<std::size_t>(src * C + j)], 1e-12);
            EXPECT_NEAR(ldq[static_cast<std::size_t>(dst * C + j)], dqkv[static_cast<std::size_t>(src * W + j)], 1e-12);
          }
        }
      }
      for (std::size_t j = 0; j < ldkv.size(); ++j) dkv_sum[j] += ldkv[j];
    }
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t j = 0; j < K2; ++j) {
        EXPECT_NEAR(dkv_sum[static_cast<std::size_t>(r * K2 + j)], dqkv[static_cast<std::size_t>(r * W + C + j)], 1e-12);
      }
    }
  }
}

}  // namespace
}  // namespace stagecraft::executor::ops
