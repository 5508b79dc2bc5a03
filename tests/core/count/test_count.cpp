// Parameter and FLOP counts, each expected value derived by hand from the shapes in the test.
#include "core/count/count.hpp"

#include <cmath>
#include <numeric>

#include <gtest/gtest.h>

#include "core/count/report.hpp"
#include "core/spec/bundled.hpp"
#include "support.hpp"

namespace stagecraft::count {
namespace {

using spec::Model;

Model bundled(const std::string& name) {
  return spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, name));
}

TEST(Count, Gpt2SmallFromHfConfigIsExact) {
  Model m = spec::load_model(test::data_path("hf/gpt2/config.json"));
  const int64_t h = 768, L = 12, V = 50257, s = 1024;
  // Block: qkv h*3h + 3h, proj h*h + h, fc h*4h + 4h, proj 4h*h + h, two LayerNorms 2*2h.
  const int64_t block = (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h) + 2 * 2 * h;
  EXPECT_EQ(block, 12 * h * h + 13 * h);
  EXPECT_EQ(block_parameters(m), block);
  // Token table V*h, positions s*h, final LayerNorm 2h, LM head tied (no parameters).
  const int64_t total = L * block + V * h + s * h + 2 * h;
  EXPECT_EQ(parameters(m), total);
  EXPECT_EQ(total, 124'439'808);  // the published size of GPT-2 small
}

TEST(Count, Llama2_7bFromHfConfigIsExact) {
  Model m = spec::load_model(test::data_path("hf/llama-2-7b-hf/config.json"));
  const int64_t h = 4096, f = 11008, L = 32, V = 32000;
  // Block: q, k, v, o each h*h (kv_heads == heads), gate/up h*f, down f*h, two RMSNorms h.
  const int64_t block = 4 * h * h + 3 * h * f + 2 * h;
  EXPECT_EQ(block_parameters(m), block);
  // Untied: embedding V*h and LM head V*h, final RMSNorm h, RoPE has no parameters.
  const int64_t total = L * block + 2 * V * h + h;
  EXPECT_EQ(parameters(m), total);
  EXPECT_EQ(total, 6'738'415'616);  // the published size of LLaMA-2 7B
}

TEST(Count, GroupedQueryAttentionShrinksKeyAndValue) {
  Model m = bundled("llama2-70b");
  const int64_t h = 8192, f = 28672, d = 8192 / 64, kv = 8 * d;
  // q h*h, k and v h*kv each, o h*h, SwiGLU 3*h*f, two RMSNorms.
  EXPECT_EQ(block_parameters(m), h * h + 2 * h * kv + h * h + 3 * h * f + 2 * h);
  EXPECT_EQ(block_linears(m)[0].out, h + 2 * kv);
}

// Llama 3.1 405B (bundled): the embedding and the untied head 128,256 × 16,384 each; a layer holds
// Q and O 16,384² each, K and V 16,384 × 8 × 128 each, the SwiGLU MLP 3 × 16,384 × 53,248 and two
// RMSNorms of 16,384; 126 layers and the final norm. The model card's 405B; the checkpoint's
// 405,853,388,800.
TEST(Count, Llama31_405bIsExact) {
  const Model m = bundled("llama3.1-405b");
  const int64_t h = 16384, kv = 8 * 128, f = 53248, v = 128256;
  const int64_t layer = 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h;
  EXPECT_EQ(layer, 3'187'703'808);
  EXPECT_EQ(parameters(m), 2 * v * h + 126 * layer + h);
  EXPECT_EQ(parameters(m), 405'853'388'800);
}

TEST(Count, Gpt3_175bWithinNarayananFormula) {
  Model m = bundled("gpt3-175b");
  const double L = 96, h = 12288, V = 51200, s = 2048;
  const double narayanan = 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h));
  EXPECT_NEAR(static_cast<double>(parameters(m)) / narayanan, 1.0, 1e-3);
  // The formula omits only the final LayerNorm (2h).
  EXPECT_DOUBLE_EQ(static_cast<double>(parameters(m)), narayanan + 2 * h);
}

TEST(Count, FlopsMatchThe72And96Formulas) {
  for (const char* name : {"gpt3-175b", "gpt3-1.3b", "megatron-1t"}) {
    SCOPED_TRACE(name);
    Model m = bundled(name);
    const double L = static_cast<double>(m.layers), h = static_cast<double>(m.hidden),
                 s = static_cast<double>(m.seq_len), V = static_cast<double>(m.vocab);
    // Per token (the formulas are per B*s tokens): 72 L h^2 (1 + s/6h + V/12hL) without recompute,
    // 96 L h^2 (1 + s/6h + V/16hL) with full recompute.
    const double f72 = 72 * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    const double f96 = 96 * L * h * h * (1 + s / (6 * h) + V / (16 * h * L));
    EXPECT_NEAR(model_flops_per_token_train(m) / f72, 1.0, 1e-12);
    EXPECT_NEAR(hardware_flops_per_token_train(m, spec::Recompute::kFull) / f96, 1.0, 1e-12);
    EXPECT_NEAR(flops_per_token_fwd(m), f72 / 3, f72 * 1e-12);
    // Selective recompute re-runs only the attention scores: 4 s h per layer.
    EXPECT_DOUBLE_EQ(hardware_flops_per_token_train(m, spec::Recompute::kSelective),
                     model_flops_per_token_train(m) + L * 4 * s * h);
  }
}

TEST(Count, SwigluFlopsCountThreeMatrices) {
  Model m = bundled("llama3-8b");
  const double h = 4096, f = 14336, kv = 8 * 128, s = 8192, V = 128256, L = 32;
  const double block = 2 * (h * (h + 2 * kv) + h * h + 3 * h * f) + 4 * s * h;
  EXPECT_DOUBLE_EQ(block_flops_per_token_fwd(m), block);
  EXPECT_DOUBLE_EQ(flops_per_token_fwd(m), L * block + 2 * h * V);
}

TEST(Count, UntyingAddsTheHead) {
  Model tied = bundled("gpt2-124m");
  Model untied = tied;
  untied.tied_embeddings = false;
  EXPECT_EQ(parameters(untied) - parameters(tied), tied.vocab * tied.hidden);
  EXPECT_EQ(head_parameters(untied), 2 * tied.hidden + tied.vocab * tied.hidden);
}

TEST(Count, LayerCountsSumToTheModel) {
  for (const std::string& name : spec::bundled_names(spec::ConfigKind::kModel)) {
    SCOPED_TRACE(name);
    Model m = bundled(name);
    std::vector<LayerCount> layers = layer_counts(m);
    ASSERT_EQ(layers.size(), static_cast<std::size_t>(m.layers + 2));
    EXPECT_EQ(layers.front().name, "embedding");
    EXPECT_EQ(layers.back().name, "head");
    int64_t params = 0;
    double flops = 0;
    for (const LayerCount& l : layers) {
      params += l.parameters;
      flops += l.flops_per_token_fwd;
    }
    EXPECT_EQ(params, parameters(m));
    EXPECT_NEAR(flops / flops_per_token_fwd(m), 1.0, 1e-12);
  }
}

TEST(Count, ReportCarriesTheCounts) {
  Model m = bundled("tiny");
  nlohmann::json r = model_report(m);
  EXPECT_EQ(r["parameters"].get<int64_t>(), parameters(m));
  EXPECT_EQ(r["layers"].size(), static_cast<std::size_t>(m.layers + 2));
  EXPECT_DOUBLE_EQ(r["hardware_flops_per_token_train"]["full"].get<double>(),
                   hardware_flops_per_token_train(m, spec::Recompute::kFull));
  EXPECT_EQ(r["model"]["hidden"].get<int64_t>(), m.hidden);
}

}  // namespace
}  // namespace stagecraft::count
