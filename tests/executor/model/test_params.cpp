// ParamLayout: counts agree with core/count, tensor order is the documented contract, initial
// values depend only on (seed, tensor name), decay ranges cover exactly the matrices.
#include "executor/model/params.hpp"

#include <cmath>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "core/count/count.hpp"
#include "core/spec/bundled.hpp"
#include "tiny.hpp"

namespace stagecraft::executor {
namespace {

std::vector<std::string> names(const ParamLayout& l) {
  std::vector<std::string> out;
  for (const TensorSlot& t : l.tensors()) out.push_back(t.name);
  return out;
}

// Sum of count::layer_counts over the whole layers (embedding, block i, head) a range covers.
int64_t counted(const spec::Model& m, int64_t first_layer, int64_t last_layer) {
  const std::vector<count::LayerCount> layers = count::layer_counts(m);
  int64_t total = 0;
  for (int64_t i = first_layer; i <= last_layer; ++i) total += layers[static_cast<std::size_t>(i)].parameters;
  return total;
}

TEST(Params, UnitNumbering) {
  const spec::Model m = test::tiny_gpt();  // L = 2: 6 units
  EXPECT_EQ(unit_count(m), 6);
  EXPECT_EQ(unit_name(m, 0), "embedding");
  EXPECT_EQ(unit_name(m, 1), "block.0.attn");
  EXPECT_EQ(unit_name(m, 2), "block.0.mlp");
  EXPECT_EQ(unit_name(m, 4), "block.1.mlp");
  EXPECT_EQ(unit_name(m, 5), "head");
  EXPECT_EQ(unit_block(m, 3), 1);
  EXPECT_EQ(unit_block(m, 5), -1);
  EXPECT_THROW(unit_kind(m, 6), std::out_of_range);
}

TEST(Params, TensorOrderIsTheFlatContract) {
  EXPECT_EQ(names(ParamLayout(test::tiny_gpt())),
            (std::vector<std::string>{"embedding.wte", "embedding.wpe",
                                      "block.0.attn.norm1.w", "block.0.attn.norm1.b", "block.0.attn.qkv.w",
                                      "block.0.attn.qkv.b", "block.0.attn.out.w", "block.0.attn.out.b",
                                      "block.0.mlp.norm2.w", "block.0.mlp.norm2.b", "block.0.mlp.up.w",
                                      "block.0.mlp.up.b", "block.0.mlp.down.w", "block.0.mlp.down.b",
                                      "block.1.attn.norm1.w", "block.1.attn.norm1.b", "block.1.attn.qkv.w",
                                      "block.1.attn.qkv.b", "block.1.attn.out.w", "block.1.attn.out.b",
                                      "block.1.mlp.norm2.w", "block.1.mlp.norm2.b", "block.1.mlp.up.w",
                                      "block.1.mlp.up.b", "block.1.mlp.down.w", "block.1.mlp.down.b",
                                      "head.normf.w", "head.normf.b"}));
  const spec::Model llama = test::tiny_llama();
  const ParamLayout l(llama, 1, unit_count(llama));
  EXPECT_EQ(names(l), (std::vector<std::string>{"block.0.attn.norm1.w", "block.0.attn.qkv.w", "block.0.attn.out.w",
                                                "block.0.mlp.norm2.w", "block.0.mlp.gate.w", "block.0.mlp.up.w",
                                                "block.0.mlp.down.w", "block.1.attn.norm1.w", "block.1.attn.qkv.w",
                                                "block.1.attn.out.w", "block.1.mlp.norm2.w", "block.1.mlp.gate.w",
                                                "block.1.mlp.up.w", "block.1.mlp.down.w", "head.normf.w",
                                                "head.lm_head.w"}));
  // qkv [h x (h + 2 kv)] with kv = 2 K/V heads * head_dim 2; weights stored [in x out].
  EXPECT_EQ(l.find("block.0.attn.qkv.w").rows, 8);
  EXPECT_EQ(l.find("block.0.attn.qkv.w").cols, 8 + 2 * 4);
  EXPECT_EQ(l.find("block.1.mlp.down.w").rows, 12);
  EXPECT_EQ(l.find("head.lm_head.w").cols, 11);
  // Offsets are contiguous in order, and each unit is one slice.
  int64_t next = 0;
  for (const TensorSlot& t : l.tensors()) {
    EXPECT_EQ(t.offset, next) << t.name;
    next += t.size();
  }
  EXPECT_EQ(next, l.size());
  EXPECT_EQ(l.unit_range(2).begin, l.find("block.0.mlp.norm2.w").offset);
  EXPECT_EQ(l.unit_range(2).end, l.find("block.1.attn.norm1.w").offset);
}

TEST(Params, WholeModelCountEqualsCountParametersForBundledModels) {
  std::vector<spec::Model> models = {test::tiny_gpt(), test::tiny_llama()};
  for (const std::string& name : spec::bundled_names(spec::ConfigKind::kModel)) {
    models.push_back(spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, name)));
  }
  for (const spec::Model& m : models) {
    const ParamLayout l(m);
    EXPECT_EQ(l.size(), count::parameters(m)) << m.name;
    EXPECT_FALSE(l.head_has_wte_copy()) << m.name;
  }
}

TEST(Params, RangeCountsEqualLayerCounts) {
  for (const spec::Model& m : {test::tiny_gpt(), test::tiny_llama()}) {
    const int64_t L = m.layers, units = unit_count(m);
    EXPECT_EQ(ParamLayout(m, 0, 1).size(), counted(m, 0, 0)) << m.name;
    EXPECT_EQ(ParamLayout(m, 0, 3).size(), counted(m, 0, 1)) << m.name;           // embedding + block 0
    EXPECT_EQ(ParamLayout(m, 1, units - 1).size(), counted(m, 1, L)) << m.name;   // all blocks
    EXPECT_EQ(ParamLayout(m, 3, units).size(), counted(m, 2, L + 1) + (m.tied_embeddings ? m.vocab * m.hidden : 0))
        << m.name << ": a tied head without the embedding carries a copy of wte";
    // The two sublayers of a block split count::block_parameters; each holds one norm.
    const ParamLayout attn(m, 1, 2), mlp(m, 2, 3);
    EXPECT_EQ(attn.size() + mlp.size(), count::block_parameters(m)) << m.name;
    EXPECT_EQ(attn.find("block.0.attn.norm1.w").size() + (attn.contains("block.0.attn.norm1.b") ? m.hidden : 0),
              count::norm_parameters(m));
  }
}

// Values of a tensor are the same in every layout that holds it (the head's copy of wte too).
TEST(Params, InitialValuesIndependentOfUnitRange) {
  for (const spec::Model& m : {test::tiny_gpt(), test::tiny_llama()}) {
    const ParamLayout whole(m);
    std::vector<float> ref(static_cast<std::size_t>(whole.size()));
    whole.init<float>(ref, 1234);
    for (int64_t b = 0; b < unit_count(m); ++b) {
      for (int64_t e = b + 1; e <= unit_count(m); ++e) {
        const ParamLayout part(m, b, e);
        std::vector<float> v(static_cast<std::size_t>(part.size()));
        part.init<float>(v, 1234);
        for (const TensorSlot& t : part.tensors()) {
          const TensorSlot& w = whole.find(t.name);
          ASSERT_EQ(t.size(), w.size());
          EXPECT_TRUE(std::equal(v.begin() + t.offset, v.begin() + t.offset + t.size(), ref.begin() + w.offset))
              << m.name << " [" << b << ", " << e << ") " << t.name;
        }
      }
    }
  }
}

// A ZeRO shard initialises only its slice, with the values of the whole buffer.
TEST(Params, InitOfAShardEqualsSliceOfWhole) {
  const ParamLayout l(test::tiny_gpt());
  std::vector<double> whole(static_cast<std::size_t>(l.size())), shard(37);
  l.init<double>(whole, 9);
  l.init<double>(shard, 9, 100);
  EXPECT_TRUE(std::equal(shard.begin(), shard.end(), whole.begin() + 100));
  EXPECT_THROW(l.init<double>(shard, 9, l.size() - 10), std::out_of_range);
}

TEST(Params, InitFollowsGpt2AndDependsOnSeed) {
  spec::Model m = test::tiny_gpt();
  m.hidden = 64, m.heads = 4, m.kv_heads = 4, m.ffn_hidden = 256, m.layers = 8;
  const ParamLayout l(m, 1, 3);
  std::vector<double> v(static_cast<std::size_t>(l.size())), other(v.size());
  l.init<double>(v, 1);
  l.init<double>(other, 2);
  auto stats = [&](const std::string& name) {
    const TensorSlot& t = l.find(name);
    double sum = 0, sq = 0;
    for (int64_t i = t.offset; i < t.offset + t.size(); ++i) sum += v[i], sq += v[i] * v[i];
    const double n = static_cast<double>(t.size()), mean = sum / n;
    return std::pair{mean, std::sqrt(sq / n - mean * mean)};
  };
  // qkv has 64 * 192 = 12288 samples: std within 3% of 0.02.
  EXPECT_NEAR(stats("block.0.attn.qkv.w").second, 0.02, 0.02 * 0.03);
  EXPECT_NEAR(stats("block.0.attn.qkv.w").first, 0.0, 0.001);
  EXPECT_NEAR(stats("block.0.mlp.down.w").second, 0.02 / std::sqrt(2.0 * 8), 0.005 * 0.05);
  EXPECT_NEAR(stats("block.0.attn.out.w").second, 0.02 / std::sqrt(2.0 * 8), 0.005 * 0.06);
  EXPECT_EQ(stats("block.0.attn.norm1.w"), std::pair(1.0, 0.0));
  EXPECT_EQ(stats("block.0.mlp.up.b"), std::pair(0.0, 0.0));
  EXPECT_EQ(stats("block.0.attn.norm1.b"), std::pair(0.0, 0.0));
  EXPECT_NE(v, other);
}

TEST(Params, DecayedRangesAreExactlyTheMatrices) {
  for (const spec::Model& m : {test::tiny_gpt(), test::tiny_llama()}) {
    const ParamLayout l(m, 0, unit_count(m));
    std::vector<bool> decayed(static_cast<std::size_t>(l.size()), false);
    for (const Range& r : l.decayed_ranges()) {
      for (int64_t i = r.begin; i < r.end; ++i) decayed[static_cast<std::size_t>(i)] = true;
    }
    for (const TensorSlot& t : l.tensors()) {
      const bool matrix = t.rows > 1;
      for (int64_t i = t.offset; i < t.offset + t.size(); ++i) {
        ASSERT_EQ(decayed[static_cast<std::size_t>(i)], matrix) << m.name << " " << t.name;
      }
    }
  }
}

TEST(Params, BadRangesAndNamesThrowWithContext) {
  const spec::Model m = test::tiny_gpt();
  EXPECT_THROW(ParamLayout(m, 2, 2), std::invalid_argument);
  EXPECT_THROW(ParamLayout(m, 0, 7), std::invalid_argument);
  EXPECT_THROW(ParamLayout(m, -1, 2), std::invalid_argument);
  const ParamLayout l(m, 1, 2);
  try {
    l.find("block.1.attn.qkv.w");
    ADD_FAILURE() << "no throw";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("block.1.attn.qkv.w"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[1, 2)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(l.unit_range(0), std::out_of_range);
}

// Expert tensor parallelism: with E = 4 experts of width f = 64 over ep 2 × etp 2, the rank at
// (ep index e, etp index x) holds experts [2e, 2e + 2), each gate/up column slice [32x, 32x + 32)
// and down row slice [32x, 32x + 32) of its expert's 64 rows: down shard row r is global row
// (2e + r / 32)·64 + 32x + r mod 32. The four shards cover every element of each stacked tensor
// once, and their initial values are the unsharded tensor's.
TEST(Params, ExpertTensorParallelShardsTileTheStackedExperts) {
  spec::Model m = test::tiny_llama();
  m.moe.experts = 4, m.moe.top_k = 2, m.moe.ffn_hidden = 64;
  const int64_t h = m.hidden, f = 64;
  const ParamLayout whole(m, 2, 3);
  std::vector<float> full(static_cast<std::size_t>(whole.size()));
  whole.init(std::span<float>(full), 7);
  for (const char* name : {"block.0.mlp.experts.gate.w", "block.0.mlp.experts.down.w"}) {
    SCOPED_TRACE(name);
    const TensorSlot& w = whole.find(name);
    std::vector<int> seen(static_cast<std::size_t>(w.size()), 0);
    for (int64_t e = 0; e < 2; ++e) {
      for (int64_t x = 0; x < 2; ++x) {
        const ParamLayout shard(m, 2, 3, 1, 0, 2, e, 2, x);
        const TensorSlot& t = shard.find(name);
        const bool down = std::string(name).find(".down.") != std::string::npos;
        EXPECT_EQ(t.rows, down ? 2 * f / 2 : 2 * h);
        EXPECT_EQ(t.cols, down ? h : f / 2);
        std::vector<float> mine(static_cast<std::size_t>(shard.size()));
        shard.init(std::span<float>(mine), 7);
        for (int64_t r = 0; r < t.rows; ++r) {
          for (int64_t c = 0; c < t.cols; ++c) {
            const int64_t g = t.map.global_index(t.spec, r, c);
            const int64_t want = down ? ((2 * e + r / 32) * f + 32 * x + r % 32) * h + c : (2 * e * h + r) * f + 32 * x + c;
            ASSERT_EQ(g, want) << r << "," << c;
            ++seen[static_cast<std::size_t>(g)];
            EXPECT_EQ(mine[static_cast<std::size_t>(t.offset + r * t.cols + c)], full[static_cast<std::size_t>(w.offset + g)]);
          }
        }
      }
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), w.size());
  }
}

}  // namespace
}  // namespace stagecraft::executor
