// Tensor parallelism unit by unit (layers.hpp): t shards of each unit, run on their slices of the
// unsharded parameters and combined the way the Program's TpAllReduce combines them (a sum; the
// head's loss by max / rescaled sum / sum), give the unsharded unit's output, loss, input
// gradient and parameter gradients. Double precision, so the bar is rounding: 1e-12 relative.
#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "core/count/tensors.hpp"
#include "executor/model/layers.hpp"
#include "executor/model/params.hpp"
#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

using test::max_rel;

constexpr double kTol = 1e-12;

// tiny_gpt with 4 heads (so tp 4 divides them) and a vocabulary of 11 that 2 and 4 do not divide.
spec::Model tiny_gpt4() {
  spec::Model m = test::tiny_gpt();
  m.name = "tiny-gpt-4-heads";
  m.heads = 4, m.kv_heads = 4;
  return m;
}

// The shard of `full` (values of the unsharded layout) that tp rank `r`'s layout holds.
std::vector<double> shard_values(const ParamLayout& full_layout, const std::vector<double>& full, const ParamLayout& shard) {
  std::vector<double> out(static_cast<std::size_t>(shard.size()), 0.0);
  for (const TensorSlot& t : shard.tensors()) {
    const TensorSlot& whole = full_layout.find(t.name);
    for (int64_t k = 0; k < t.size(); ++k) {
      const int64_t g = t.map.global_index(t.spec, k / t.cols, k % t.cols);
      if (g >= 0) out[static_cast<std::size_t>(t.offset + k)] = full[static_cast<std::size_t>(whole.offset + g)];
    }
  }
  return out;
}

struct Case {
  spec::Model m;
  int64_t tp;
};

std::vector<Case> cases() {
  return {{test::tiny_gpt(), 2}, {tiny_gpt4(), 4}, {test::tiny_llama(), 2}};
}

// Runs unit `u` unsharded and as `tp` shards; checks every result. `weights_first`: the shards'
// weight gradients before their input gradient is finished (a full Backward), else after (W).
void check_unit(const Case& c, int64_t u, bool weights_first) {
  const spec::Model& m = c.m;
  const std::string what = m.name + " tp " + std::to_string(c.tp) + " " + unit_name(m, u);
  const ParamLayout full_layout(m);
  const std::vector<double> p = test::random_params<double>(full_layout, 5);
  const test::Tokens tokens = test::random_tokens(m, test::tiny_dims(), 6);
  const Dims d = tokens.dims;
  const int64_t n = d.rows(), h = m.hidden;
  const Layer<double> whole(full_layout, u);
  const std::vector<double> x = test::random_vector<double>(whole.input_size(d), 7, 1.0);
  const std::vector<double> dy = test::random_vector<double>(whole.output_size(d), 8, 1.0);
  std::vector<double> y(static_cast<std::size_t>(whole.output_size(d))), dx(x.size());
  std::vector<double> grads(p.size(), 0.0);
  UnitCache<double> cache;
  whole.forward(tokens.view(), p, x, y, cache);
  whole.backward(p, dy, dx, grads, cache);

  std::vector<ParamLayout> layouts;
  for (int64_t r = 0; r < c.tp; ++r) layouts.emplace_back(m, 0, unit_count(m), c.tp, r);
  std::vector<Layer<double>> shards;
  std::vector<std::vector<double>> ps, gs, outs;
  std::vector<UnitCache<double>> caches(static_cast<std::size_t>(c.tp));
  for (int64_t r = 0; r < c.tp; ++r) {
    shards.emplace_back(layouts[r], u);
    ps.push_back(shard_values(full_layout, p, layouts[r]));
    gs.emplace_back(ps.back().size(), 0.0);
    outs.emplace_back(static_cast<std::size_t>(shards[r].output_size(d)));
    shards[r].forward(tokens.view(), ps[r], x, outs[r], caches[r]);
  }
  const bool head = whole.kind() == UnitKind::kHead;
  if (head) {  // max, then the rescaled sums and the target logits summed
    std::vector<double> reduced(static_cast<std::size_t>(3 * n), 0.0), global_max(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      global_max[i] = -INFINITY;
      for (int64_t r = 0; r < c.tp; ++r) global_max[i] = std::max(global_max[i], outs[r][i]);
      reduced[i] = global_max[i];
    }
    for (int64_t r = 0; r < c.tp; ++r) {
      std::vector<double> rescaled(static_cast<std::size_t>(n));
      vocab_parallel_rescale<double>(outs[r], global_max, rescaled);
      for (int64_t i = 0; i < n; ++i) {
        reduced[n + i] += rescaled[i];
        reduced[2 * n + i] += outs[r][2 * n + i];
      }
    }
    for (int64_t r = 0; r < c.tp; ++r) {
      const double loss = shards[r].finish_loss(reduced, caches[r]);
      EXPECT_NEAR(loss, y[0], kTol * std::abs(y[0])) << what << " rank " << r << ": loss";
    }
  } else {
    std::vector<double> sum(y.size(), 0.0);
    for (int64_t r = 0; r < c.tp; ++r) {
      for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += outs[r][k];
    }
    EXPECT_LE(max_rel(sum, y), kTol) << what << ": the summed partial outputs";
  }

  // backward: the partial d(norm output) summed, then each shard finishes its input gradient
  std::vector<std::vector<double>> parts;
  for (int64_t r = 0; r < c.tp; ++r) {
    parts.emplace_back(x.size());
    shards[r].backward_input(ps[r], dy, parts[r], caches[r]);
    if (weights_first) shards[r].backward_weight(gs[r], caches[r]);
  }
  if (shards[0].reduces_input_grad()) {
    std::vector<double> d_a(static_cast<std::size_t>(n * h), 0.0);
    for (int64_t r = 0; r < c.tp; ++r) {
      for (std::size_t k = 0; k < d_a.size(); ++k) d_a[k] += parts[r][k];
    }
    for (int64_t r = 0; r < c.tp; ++r) {
      std::vector<double> dx_r(x.size());
      const bool spent = shards[r].finish_input_grad(ps[r], d_a, dx_r, gs[r], caches[r]);
      EXPECT_EQ(spent, weights_first) << what;
      EXPECT_LE(max_rel(dx_r, dx), kTol) << what << " rank " << r << ": input gradient";
    }
  }
  if (!weights_first) {
    for (int64_t r = 0; r < c.tp; ++r) shards[r].backward_weight(gs[r], caches[r]);
  }
  // every shard element's gradient is the unsharded one's (replicated tensors whole on each
  // rank); padding rows and columns get none
  for (int64_t r = 0; r < c.tp; ++r) {
    // (the whole layout: a tied head's gradient lands in unit 0's table)
    EXPECT_LE(max_rel(gs[r], shard_values(full_layout, grads, layouts[r])), kTol) << what << " rank " << r
                                                                                  << ": parameter gradients";
  }
}

TEST(TensorParallel, EveryUnitsShardsCombineToTheUnshardedUnit) {
  for (const Case& c : cases()) {
    for (int64_t u = 0; u < unit_count(c.m); ++u) check_unit(c, u, true);
  }
}

TEST(TensorParallel, ZeroBubbleOrderFinishesTheInputGradientBeforeTheWeights) {
  for (const Case& c : cases()) {
    for (int64_t u = 0; u < unit_count(c.m); ++u) check_unit(c, u, false);
  }
}

// Shard shapes from the tensor table: rank r of t holds 1/t of each split tensor, replicated
// ones whole, and the vocabulary tables ceil(V/t) rows with the last rank's tail as padding.
TEST(TensorParallel, LayoutsHoldTheTablesShardsAndInitialiseThemAsSlices) {
  const spec::Model m = test::tiny_llama();  // V = 11, t = 2: 6 rows each, rank 1's last is padding
  const ParamLayout full(m);
  const ParamLayout r0(m, 0, unit_count(m), 2, 0), r1(m, 0, unit_count(m), 2, 1);
  const int64_t h = m.hidden, d = m.head_dim();
  EXPECT_EQ(r1.find("embedding.wte").rows, (11 + 1) / 2);
  EXPECT_EQ(r1.find("block.0.attn.qkv.w").cols, (m.heads / 2 + 2 * (m.kv_heads / 2)) * d);
  EXPECT_EQ(r1.find("block.0.mlp.down.w").rows, m.ffn_hidden / 2);
  EXPECT_EQ(r1.find("block.0.attn.norm1.w").cols, h);
  EXPECT_TRUE(r1.find("block.0.attn.norm1.w").replicated);
  EXPECT_FALSE(r1.find("block.0.attn.out.w").replicated);
  EXPECT_EQ(r0.size(), r1.size()) << "every tp rank's layout has the same shape";
  std::vector<double> pf(static_cast<std::size_t>(full.size())), p1(static_cast<std::size_t>(r1.size()));
  full.init<double>(pf, 3);
  r1.init<double>(p1, 3);
  EXPECT_EQ(p1, shard_values(full, pf, r1)) << "a shard starts as the slice of the unsharded initial values";
  // the padding row: rank 1 holds ids [6, 12) of 11
  const TensorSlot& wte = r1.find("embedding.wte");
  for (int64_t k = 5 * h; k < 6 * h; ++k) EXPECT_EQ(p1[static_cast<std::size_t>(wte.offset + k)], 0.0);
  // the replicated ranges: every norm, and nothing split
  int64_t replicated = 0;
  for (const Range& rr : r1.replicated_ranges()) replicated += rr.size();
  int64_t norms = 0;
  for (const TensorSlot& t : r1.tensors()) norms += t.replicated ? t.size() : 0;
  EXPECT_EQ(replicated, norms);
  EXPECT_EQ(norms, (2 * m.layers + 1) * h) << "RMSNorm weights only: two per block and the final one";
  EXPECT_TRUE(full.replicated_ranges().empty());
}

}  // namespace
}  // namespace stagecraft::executor
