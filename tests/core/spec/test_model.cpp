#include "core/spec/model.hpp"

#include "core/count/count.hpp"

#include <gtest/gtest.h>

#include "support.hpp"

namespace stagecraft::spec {
namespace {

using nlohmann::json;
using test::expect_spec_error;

json gpt_like() {
  return {{"name", "t"}, {"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 100}, {"seq_len", 32}};
}

TEST(Model, DefaultsAreGptStyle) {
  Model m = model_from_json(gpt_like(), "t.json");
  EXPECT_EQ(m.kv_heads, 4);
  EXPECT_EQ(m.ffn_hidden, 4 * 64);
  EXPECT_EQ(m.mlp, Mlp::kGelu);
  EXPECT_EQ(m.norm, Norm::kLayerNorm);
  EXPECT_EQ(m.position, Position::kLearned);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_TRUE(m.qkv_bias && m.out_bias && m.mlp_bias && m.norm_has_bias());
  EXPECT_EQ(m.head_dim(), 64 / 4);
}

TEST(Model, RoundTripsThroughJson) {
  json j = gpt_like();
  j["kv_heads"] = 2;
  j["mlp"] = "swiglu";
  j["ffn_hidden"] = 172;
  j["norm"] = "rmsnorm";
  j["position"] = "rope";
  j["tied_embeddings"] = false;
  j["bias"] = false;
  Model m = model_from_json(j, "t.json");
  Model again = model_from_json(to_json(m), "again.json");
  EXPECT_EQ(to_json(again), to_json(m));
}

struct BadModel {
  const char* what;
  json patch;            // merged into gpt_like()
  const char* pointer;
  const char* fragment;
};

TEST(Model, RejectsBadInputsNamingFieldAndExpectation) {
  const BadModel cases[] = {
      {"typo", {{"hiden", 64}}, "/hiden", "did you mean \"hidden\""},
      {"hidden % heads", {{"hidden", 66}}, "/hidden", "expected a multiple of heads (4), got 66"},
      {"kv_heads not dividing heads", {{"kv_heads", 3}}, "/kv_heads", "expected a divisor of heads (4), got 3"},
      {"kv_heads above heads", {{"kv_heads", 8}}, "/kv_heads", "expected a divisor of heads"},
      {"zero layers", {{"layers", 0}}, "/layers", "expected a positive integer, got 0"},
      {"negative vocab", {{"vocab", -5}}, "/vocab", "expected a positive integer, got -5"},
      {"string layers", {{"layers", "two"}}, "/layers", "expected a number, got \"two\""},
      {"fractional hidden", {{"hidden", 64.5}}, "/hidden", "expected an integer, got 64.5"},
      {"unknown mlp", {{"mlp", "silu"}}, "/mlp", "expected one of \"gelu\", \"swiglu\", \"relu\", \"geglu\""},
      {"swiglu without width", {{"mlp", "swiglu"}}, "/ffn_hidden", "required with \"mlp\": \"swiglu\""},
      {"bias not bool", {{"bias", 1}}, "/bias", "expected true or false"},
      // Limits (spec/limits.hpp) keep every count in int64_t: 2^14 layers, 2^24 vocabulary entries.
      {"layers above the limit", {{"layers", 16385}}, "/layers", "expected at most 16384 (Stagecraft's limit), got 16385"},
      {"vocab above the limit", {{"vocab", 100000000000}}, "/vocab", "expected at most 16777216"},
      {"hidden that would overflow 4h", {{"hidden", int64_t{1} << 62}}, "/hidden", "expected at most 262144"},
  };
  for (const BadModel& c : cases) {
    SCOPED_TRACE(c.what);
    json j = gpt_like();
    j.merge_patch(c.patch);
    std::string msg = expect_spec_error([&] { model_from_json(j, "bad.json"); }, c.pointer, c.fragment);
    EXPECT_EQ(msg.rfind("bad.json: ", 0), 0u) << msg;
  }
  json missing = gpt_like();
  missing.erase("seq_len");
  expect_spec_error([&] { model_from_json(missing, "bad.json"); }, "/seq_len", "missing required key");
}

TEST(HfImport, Gpt2ConfigIsDetectedAndMapped) {
  Model m = load_model(test::data_path("hf/gpt2/config.json"));
  EXPECT_EQ(m.name, "gpt2");  // the folder of config.json
  EXPECT_EQ(m.layers, 12);
  EXPECT_EQ(m.hidden, 768);
  EXPECT_EQ(m.heads, 12);
  EXPECT_EQ(m.kv_heads, 12);
  EXPECT_EQ(m.ffn_hidden, 4 * 768);  // n_inner absent: 4h
  EXPECT_EQ(m.vocab, 50257);
  EXPECT_EQ(m.seq_len, 1024);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_TRUE(m.qkv_bias && m.out_bias && m.mlp_bias && m.norm_has_bias());
  EXPECT_EQ(m.mlp, Mlp::kGelu);
}

TEST(HfImport, LlamaConfigIsDetectedAndMapped) {
  Model m = load_model(test::data_path("hf/llama-2-7b-hf/config.json"));
  EXPECT_EQ(m.name, "Llama-2-7b-hf");
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.ffn_hidden, 11008);
  EXPECT_EQ(m.kv_heads, 32);
  EXPECT_EQ(m.seq_len, 4096);
  EXPECT_FALSE(m.tied_embeddings);
  EXPECT_FALSE(m.qkv_bias || m.out_bias || m.mlp_bias || m.lm_head_bias);
  EXPECT_EQ(m.mlp, Mlp::kSwiglu);
  EXPECT_EQ(m.norm, Norm::kRmsNorm);
  EXPECT_EQ(m.position, Position::kRope);
}

TEST(HfImport, GqaAndNullInnerWidth) {
  json llama = {{"model_type", "llama"},       {"num_hidden_layers", 80}, {"hidden_size", 8192},
                {"intermediate_size", 28672},  {"num_attention_heads", 64}, {"num_key_value_heads", 8},
                {"vocab_size", 32000},         {"max_position_embeddings", 4096}};
  EXPECT_EQ(model_from_json(llama, "70b.json").kv_heads, 8);
  json gpt2 = {{"model_type", "gpt2"}, {"n_layer", 2}, {"n_embd", 32}, {"n_head", 4}, {"n_inner", nullptr},
               {"n_positions", 16}, {"vocab_size", 10}};
  EXPECT_EQ(model_from_json(gpt2, "g.json").ffn_hidden, 4 * 32);
}

// UX audit D6: Mistral-NeMo's head_dim 128 != 5120 / 32 was counted as 160 wide (12.77 B instead of
// 12.25 B; the count itself is in test_hf_families.cpp); a config without model_type was read as
// LLaMA; sliding_window was dropped silently.
TEST(HfImport, HeadDimModelTypeAndUnmodelledKeys) {
  json nemo = {{"model_type", "mistral"}, {"num_hidden_layers", 40}, {"hidden_size", 5120}, {"head_dim", 128},
               {"intermediate_size", 14336}, {"num_attention_heads", 32}, {"num_key_value_heads", 8},
               {"vocab_size", 131072}, {"max_position_embeddings", 4096}};
  const Model narrow = model_from_json(nemo, "nemo.json");
  EXPECT_EQ(narrow.head_dim(), 128);
  EXPECT_EQ(narrow.q_dim(), 32 * 128);  // 4096, not the 5120 of hidden
  EXPECT_EQ(narrow.kv_dim(), 8 * 128);
  nemo["head_dim"] = 160;  // the same width as hidden / heads said explicitly
  EXPECT_EQ(model_from_json(nemo, "nemo.json").head_dim(), 5120 / 32);
  EXPECT_EQ(model_from_json(nemo, "nemo.json").head_size, 0);
  nemo["sliding_window"] = 4096;
  nemo["max_position_embeddings"] = 32768;
  const Model m = model_from_json(nemo, "nemo.json");
  ASSERT_EQ(m.warnings.size(), 1u);
  EXPECT_NE(m.warnings[0].find("/sliding_window: 4096 is noted"), std::string::npos);
  // every layer's scores over min(s, 4096) keys: at the 8192-token default, 4 · 4096 · q, half the whole sequence's
  Model longer = m;
  longer.seq_len = 8192;
  EXPECT_EQ(count::attention_keys(longer, 7), 4096);
  EXPECT_DOUBLE_EQ(count::attention_flops_per_token_fwd(longer, 7), 4.0 * 4096 * longer.q_dim());
  longer.seq_len = 2048;  // shorter than the window: the whole sequence
  EXPECT_EQ(count::attention_keys(longer, 7), 2048);
  // printed only where no training length is set (cli warn_training_length)
  EXPECT_NE(m.length_note.find("32768 is the longest sequence the model takes"), std::string::npos);
  nemo.erase("model_type");
  expect_spec_error([&] { model_from_json(nemo, "nemo.json"); }, "/model_type", "missing");
  nemo["model_type"] = 5;
  expect_spec_error([&] { model_from_json(nemo, "nemo.json"); }, "/model_type", "expected a string");
}

TEST(HfImport, ErrorsUseTheHfKeyNames) {
  json llama = {{"model_type", "llama"},      {"num_hidden_layers", 2},  {"hidden_size", 64},
                {"intermediate_size", 128},   {"num_attention_heads", 4}, {"num_key_value_heads", 3},
                {"vocab_size", 10},           {"max_position_embeddings", 16}};
  expect_spec_error([&] { model_from_json(llama, "c.json"); }, "/num_key_value_heads",
                    "expected a divisor of num_attention_heads (4), got 3");
  llama["num_key_value_heads"] = 4;
  llama.erase("hidden_size");
  expect_spec_error([&] { model_from_json(llama, "c.json"); }, "/hidden_size", "missing required key");
  json other = {{"model_type", "t5"}, {"num_layers", 6}};
  expect_spec_error([&] { model_from_json(other, "c.json"); }, "/model_type", "got \"t5\"");
  json gelu = {{"model_type", "llama"},      {"num_hidden_layers", 2},  {"hidden_size", 64},
               {"intermediate_size", 128},   {"num_attention_heads", 4}, {"vocab_size", 10},
               {"max_position_embeddings", 16}, {"hidden_act", "gelu"}};
  expect_spec_error([&] { model_from_json(gelu, "c.json"); }, "/hidden_act", "expected \"silu\" (SwiGLU MLP)");
}

// Mixture-of-experts families Stagecraft does not read are refused by name, with what their layers
// have (Jamba's Mamba layers, PhiMoE's expert layout), not counted as dense models; an expert key on
// a dense family's config is refused too. (OLMoE, DBRX and gpt-oss are read: test_hf_families.cpp.)
TEST(HfImport, UnreadExpertFamiliesAreRefusedBySaying) {
  json moe = {{"model_type", "jamba"},     {"num_hidden_layers", 16},   {"hidden_size", 2048},
              {"intermediate_size", 1024}, {"num_attention_heads", 16}, {"vocab_size", 50304},
              {"max_position_embeddings", 4096}, {"num_experts", 64}, {"num_experts_per_tok", 8}};
  expect_spec_error([&] { model_from_json(moe, "jamba.json"); }, "/model_type", "Mamba layers");
  moe["model_type"] = "phimoe";
  expect_spec_error([&] { model_from_json(moe, "phimoe.json"); }, "/model_type", "expert layout");
  json deepseek = moe;
  deepseek["model_type"] = "llama";   // an expert key on a dense family
  deepseek.erase("num_experts");
  deepseek["n_routed_experts"] = 64;
  expect_spec_error([&] { model_from_json(deepseek, "ds.json"); }, "/n_routed_experts", "whose layers are dense");
}

// model.json's "moe" and "mla": read, written back the same, and each bad value refused by its pointer.
TEST(ModelJson, ExpertsAndLatentAttentionRoundTripAndAreChecked) {
  json j = {{"name", "m"}, {"layers", 4}, {"hidden", 64}, {"heads", 4}, {"ffn_hidden", 256}, {"vocab", 100},
            {"seq_len", 32}, {"mlp", "swiglu"}, {"position", "rope"},
            {"moe", {{"experts", 8}, {"experts_per_token", 2}, {"expert_ffn_hidden", 32}, {"shared_ffn_hidden", 64},
                     {"dense_layers", {0}}, {"router", "sigmoid"}, {"router_bias", true}, {"router_scaling", 2.5},
                     {"router_groups", 4}, {"router_group_top_k", 2}}},
            {"mla", {{"q_lora_rank", 16}, {"kv_lora_rank", 8}, {"qk_nope_head_dim", 16}, {"qk_rope_head_dim", 8},
                     {"v_head_dim", 16}}}};
  const Model m = model_from_json(j, "m.json");
  EXPECT_TRUE(m.moe.on());
  EXPECT_FALSE(m.moe_layer(0));
  EXPECT_TRUE(m.moe_layer(1));
  const Model back = model_from_json(to_json(m), "back.json");
  EXPECT_EQ(back.moe, m.moe);
  EXPECT_EQ(back.mla, m.mla);
  json bad = j;
  bad["moe"]["experts_per_token"] = 9;
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/moe/experts_per_token", "expected 1..8");
  bad = j;
  bad["moe"]["dense_layers"] = {0, 4};
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/moe/dense_layers/1", "increasing layer indices in 0..3");
  bad = j;
  bad["moe"]["experts"] = 1;
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/moe/experts", "at least 2");
  bad = j;
  bad["moe"].erase("shared_ffn_hidden");
  bad["moe"]["shared_gate"] = true;
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/moe/shared_gate", "without shared experts");
  bad = j;
  bad["mla"]["v_head_dim"] = 0;
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/mla/v_head_dim", "positive");
  EXPECT_EQ(m.moe.router_scaling, 2.5);
  EXPECT_EQ(m.moe.router_groups, 4);
  bad = j;
  bad["moe"]["router_groups"] = 3;  // 8 experts
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/moe/router_groups", "a divisor of the 8 experts");
  bad = j;
  bad["moe"]["router_group_top_k"] = 3;  // above the 2 experts a token takes
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/moe/router_group_top_k", "expected 1..2 groups");
  bad = j;
  bad["moe"]["router_scaling"] = 0;
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/moe/router_scaling", "positive factor");
  bad = j;
  bad["moe"]["routr"] = "softmax";
  expect_spec_error([&] { model_from_json(bad, "m.json"); }, "/moe/routr", "router");  // did you mean
}

}  // namespace
}  // namespace stagecraft::spec
