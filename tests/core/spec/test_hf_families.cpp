// Hugging Face families: each config below holds the shape keys of the published config.json of a
// released model (the Hub repository named above it), and each test derives the parameter count by
// hand from the family's modelling code (transformers' modeling_<type>.py), tensor by tensor. The
// published totals the hand counts reproduce are quoted next to them (model cards and papers).
#include <gtest/gtest.h>

#include <numeric>

#include "core/count/count.hpp"
#include "core/count/tensors.hpp"
#include "core/program/units.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"
#include "hf_support.hpp"
#include "support.hpp"

namespace stagecraft::spec {
namespace {

using nlohmann::json;
using test::expect_spec_error;
using namespace hf_test;

// ---- GPT-2 ------------------------------------------------------------------------------------

// openai-community/gpt2
TEST(HfFamilies, Gpt2) {
  const json cfg = {{"model_type", "gpt2"}, {"n_layer", 12},       {"n_embd", 768},
                    {"n_head", 12},         {"n_positions", 1024}, {"n_inner", nullptr},
                    {"vocab_size", 50257},  {"activation_function", "gelu_new"}};
  const Model m = model_from_json(cfg, "gpt2.json");
  const int64_t h = 768;
  const int64_t block = 2 * (2 * h)               // ln_1, ln_2 (weight + bias)
                        + lin(h, 3 * h, true)     // attn.c_attn
                        + lin(h, h, true)         // attn.c_proj
                        + lin(h, 4 * h, true)     // mlp.c_fc
                        + lin(4 * h, h, true);    // mlp.c_proj
  const int64_t total = 50257 * h + 1024 * h + 12 * block + 2 * h;  // wte, wpe, blocks, ln_f; lm_head tied
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 124439808);  // GPT-2 small: 124,439,808
  expect_units_agree(m);
}

// The numerics the executor needs to compute what transformers computes: the norms' epsilon and
// RoPE's base as the config (or its class's default) says, the GELU form, RoPE scaling and a
// sliding window kept so that the executor can refuse what it does not compute.
TEST(HfFamilies, NumericsAreReadWithTheConfigClassDefaults) {
  json gpt2 = {{"model_type", "gpt2"}, {"n_layer", 2}, {"n_embd", 64}, {"n_head", 4}, {"n_positions", 64}, {"vocab_size", 256}};
  Model m = model_from_json(gpt2, "gpt2.json");
  EXPECT_EQ(m.norm_eps, 1e-5);  // GPT2Config.layer_norm_epsilon
  EXPECT_FALSE(m.gelu_exact);   // GPT2Config.activation_function: gelu_new
  gpt2["layer_norm_epsilon"] = 1e-6;
  gpt2["activation_function"] = "gelu";  // transformers' "gelu" is the erf form
  m = model_from_json(gpt2, "gpt2.json");
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_TRUE(m.gelu_exact);
  json llama = {{"model_type", "llama"}, {"num_hidden_layers", 2}, {"hidden_size", 64}, {"intermediate_size", 128},
                {"num_attention_heads", 4}, {"vocab_size", 256}, {"max_position_embeddings", 64}};
  m = model_from_json(llama, "llama.json");
  EXPECT_EQ(m.norm_eps, 1e-6);       // LlamaConfig.rms_norm_eps
  EXPECT_EQ(m.rope_theta, 10000.0);  // LlamaConfig.rope_theta
  EXPECT_EQ(m.rope_scaling, "");
  llama["rms_norm_eps"] = 1e-5;
  llama["rope_theta"] = 500000.0;
  llama["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  m = model_from_json(llama, "llama.json");
  EXPECT_EQ(m.norm_eps, 1e-5);
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.rope_scaling, "llama3");
  // model.json carries them too, and writes back only what differs from the defaults
  const json round = to_json(m);
  EXPECT_FALSE(round.contains("norm_eps"));  // 1e-5 is model.json's default
  EXPECT_EQ(model_from_json(round, "round.json").norm_eps, 1e-5);
  json llama_default_eps = llama;
  llama_default_eps.erase("rms_norm_eps");
  EXPECT_EQ(to_json(model_from_json(llama_default_eps, "l.json"))["norm_eps"], 1e-6);  // LlamaConfig's, not ours
  EXPECT_EQ(round["rope_theta"], 500000.0);
  EXPECT_EQ(round["rope_scaling"], "llama3");
  EXPECT_FALSE(to_json(model_from_json(gpt2, "gpt2.json")).contains("rope_theta"));
  // a bad epsilon names the config's own key (it named model.json's /norm_eps, which the file lacks)
  gpt2["layer_norm_epsilon"] = -1;
  expect_spec_error([&] { model_from_json(gpt2, "gpt2.json"); }, "/layer_norm_epsilon", "a positive epsilon below 1");
  llama["rms_norm_eps"] = 2;
  expect_spec_error([&] { model_from_json(llama, "llama.json"); }, "/rms_norm_eps", "a positive epsilon below 1");
  expect_spec_error([&] { model_from_json(json{{"name", "m"}, {"layers", 1}, {"hidden", 64}, {"heads", 4}, {"vocab", 256},
                                               {"seq_len", 16}, {"norm_eps", 0}}, "m.json"); },
                    "/norm_eps", "a positive epsilon below 1");
}

// ---- LLaMA / Mistral ----------------------------------------------------------------------------

// meta-llama/Meta-Llama-3-8B
TEST(HfFamilies, Llama3GroupedQuery) {
  const json cfg = {{"model_type", "llama"},         {"num_hidden_layers", 32},   {"hidden_size", 4096},
                    {"intermediate_size", 14336},    {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                    {"vocab_size", 128256},          {"max_position_embeddings", 8192},
                    {"rope_theta", 500000.0},        {"hidden_act", "silu"},      {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "llama3.json");
  const int64_t h = 4096, kv = 8 * 128, f = 14336;
  const int64_t block = 2 * h                                          // input_layernorm, post_attention_layernorm
                        + h * h + 2 * h * kv + h * h                   // q, k, v, o (no bias)
                        + 3 * h * f;                                   // gate, up, down
  const int64_t total = 2 * 128256 * h + 32 * block + h;               // embed_tokens, lm_head, layers, norm
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 8030261248);  // Llama-3-8B: 8,030,261,248
  expect_units_agree(m);
}

// mistralai/Mistral-Nemo-Base-2407: head_dim 128 with hidden 5120 and 32 heads (q is 4096 wide).
TEST(HfFamilies, MistralNemoHeadDim) {
  const json cfg = {{"model_type", "mistral"},       {"num_hidden_layers", 40},   {"hidden_size", 5120},
                    {"head_dim", 128},               {"intermediate_size", 14336}, {"num_attention_heads", 32},
                    {"num_key_value_heads", 8},      {"vocab_size", 131072},      {"max_position_embeddings", 1024000},
                    {"sliding_window", nullptr},     {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "nemo.json");
  const int64_t h = 5120, q = 32 * 128, kv = 8 * 128, f = 14336;
  const int64_t block = 2 * h + h * q + 2 * h * kv + q * h + 3 * h * f;
  const int64_t total = 2 * 131072 * h + 40 * block + h;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 12247782400);  // Mistral-NeMo 12B: 12,247,782,400 (12.77 B when head_dim was ignored)
  // Attention FLOPs follow q, not hidden: QK^T and softmax.V, 2 s q each per token and block.
  EXPECT_DOUBLE_EQ(count::attention_flops_per_token_fwd(m, 0), 4.0 * 8192 * q);
  expect_units_agree(m);
}

// meta-llama models with attention_bias / mlp_bias (LlamaAttention and LlamaMLP honour both).
TEST(HfFamilies, LlamaBiasesAreHonoured) {
  json cfg = {{"model_type", "llama"},      {"num_hidden_layers", 2},   {"hidden_size", 64},
              {"intermediate_size", 128},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
              {"vocab_size", 100},          {"max_position_embeddings", 32}, {"attention_bias", true}};
  const int64_t h = 64, kv = 2 * 16, f = 128;
  const int64_t attn = lin(h, h + 2 * kv, true) + lin(h, h, true);
  EXPECT_EQ(count::block_parameters(model_from_json(cfg, "b.json")), 2 * h + attn + 3 * h * f);
  cfg["mlp_bias"] = true;
  EXPECT_EQ(count::block_parameters(model_from_json(cfg, "b.json")), 2 * h + attn + 2 * lin(h, f, true) + lin(f, h, true));
}

// ---- Qwen ------------------------------------------------------------------------------------------

// Qwen/Qwen2-7B (Qwen2.5-7B has the same shapes): biases on q, k and v only.
TEST(HfFamilies, Qwen2QkvBias) {
  const json cfg = {{"model_type", "qwen2"},        {"num_hidden_layers", 28},    {"hidden_size", 3584},
                    {"intermediate_size", 18944},   {"num_attention_heads", 28},  {"num_key_value_heads", 4},
                    {"vocab_size", 152064},         {"max_position_embeddings", 131072},
                    {"sliding_window", 131072},     {"use_sliding_window", false}, {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "qwen2.json");
  const int64_t h = 3584, kv = 4 * 128, f = 18944;
  const int64_t block = 2 * h + lin(h, h, true) + 2 * lin(h, kv, true) + h * h + 3 * h * f;
  const int64_t total = 2 * 152064 * h + 28 * block + h;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 7615616512);  // Qwen2-7B: 7,615,616,512
  EXPECT_FALSE(warned(m, "sliding_window"));  // use_sliding_window false: Qwen does not apply it
  expect_units_agree(m);
}

// Qwen/Qwen2.5-0.5B: tied embeddings.
TEST(HfFamilies, Qwen25Tied) {
  const json cfg = {{"model_type", "qwen2"},       {"num_hidden_layers", 24},   {"hidden_size", 896},
                    {"intermediate_size", 4864},   {"num_attention_heads", 14}, {"num_key_value_heads", 2},
                    {"vocab_size", 151936},        {"max_position_embeddings", 32768},
                    {"tie_word_embeddings", true}};
  const Model m = model_from_json(cfg, "qwen25.json");
  const int64_t h = 896, kv = 2 * 64, f = 4864;
  const int64_t block = 2 * h + lin(h, h, true) + 2 * lin(h, kv, true) + h * h + 3 * h * f;
  const int64_t total = 151936 * h + 24 * block + h;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 494032768);  // Qwen2.5-0.5B: 494,032,768
}

// Qwen/Qwen3-8B: head_dim 128, an RMSNorm of 128 on each query and key head, no QKV bias.
TEST(HfFamilies, Qwen3QkNorm) {
  const json cfg = {{"model_type", "qwen3"},        {"num_hidden_layers", 36},   {"hidden_size", 4096},
                    {"head_dim", 128},              {"intermediate_size", 12288}, {"num_attention_heads", 32},
                    {"num_key_value_heads", 8},     {"vocab_size", 151936},      {"max_position_embeddings", 40960},
                    {"attention_bias", false},      {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "qwen3.json");
  const int64_t h = 4096, q = 32 * 128, kv = 8 * 128, f = 12288;
  const int64_t block = 2 * h + 2 * 128 + h * q + 2 * h * kv + q * h + 3 * h * f;  // norms, q_norm + k_norm, q k v o, MLP
  const int64_t total = 2 * 151936 * h + 36 * block + h;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 8190735360);  // Qwen3-8B: 8.19 B (6.95 B without the two embedding tables)
  expect_units_agree(m);
}

// ---- Gemma ----------------------------------------------------------------------------------------

// google/gemma-7b: head_dim 256 with hidden 3072 and 16 heads; GeGLU; tied.
TEST(HfFamilies, GemmaHeadDimGeglu) {
  const json cfg = {{"model_type", "gemma"},        {"num_hidden_layers", 28},   {"hidden_size", 3072},
                    {"head_dim", 256},              {"intermediate_size", 24576}, {"num_attention_heads", 16},
                    {"num_key_value_heads", 16},    {"vocab_size", 256000},      {"max_position_embeddings", 8192},
                    {"hidden_act", "gelu"},         {"hidden_activation", "gelu_pytorch_tanh"}};
  const Model m = model_from_json(cfg, "gemma.json");
  EXPECT_EQ(m.mlp, Mlp::kGeglu);
  EXPECT_TRUE(m.tied_embeddings);
  const int64_t h = 3072, q = 16 * 256, f = 24576;
  const int64_t block = 2 * h + 3 * h * q + q * h + 3 * h * f;
  const int64_t total = 256000 * h + 28 * block + h;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 8537680896);  // Gemma-7B: 8,537,680,896
  expect_units_agree(m);
}

// google/gemma-2-9b: four norms per block, sliding-window layers and soft-capping noted.
TEST(HfFamilies, Gemma2FourNorms) {
  const json cfg = {{"model_type", "gemma2"},      {"num_hidden_layers", 42},   {"hidden_size", 3584},
                    {"head_dim", 256},             {"intermediate_size", 14336}, {"num_attention_heads", 16},
                    {"num_key_value_heads", 8},    {"vocab_size", 256000},      {"max_position_embeddings", 8192},
                    {"sliding_window", 4096},      {"attn_logit_softcapping", 50.0},
                    {"final_logit_softcapping", 30.0}, {"query_pre_attn_scalar", 256},
                    {"hidden_activation", "gelu_pytorch_tanh"}};
  const Model m = model_from_json(cfg, "gemma2.json");
  const int64_t h = 3584, q = 16 * 256, kv = 8 * 256, f = 14336;
  const int64_t block = 4 * h + h * q + 2 * h * kv + q * h + 3 * h * f;
  const int64_t total = 256000 * h + 42 * block + h;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 9241705984);  // Gemma-2-9B: 9,241,705,984
  EXPECT_TRUE(warned(m, "/sliding_window: 4096 is noted"));
  EXPECT_TRUE(warned(m, "/attn_logit_softcapping"));
  // local (windowed) attention on the even layers, global on the odd ones: at s = 8192, 4 · 4096 · q
  // and 4 · 8192 · q a token
  Model at8k = m;
  at8k.seq_len = 8192;
  EXPECT_DOUBLE_EQ(count::attention_flops_per_token_fwd(at8k, 0), 4.0 * 4096 * q);
  EXPECT_DOUBLE_EQ(count::attention_flops_per_token_fwd(at8k, 1), 4.0 * 8192 * q);
  expect_units_agree(m);
  json untied = cfg;
  untied["tie_word_embeddings"] = false;
  expect_spec_error([&] { model_from_json(untied, "gemma2.json"); }, "/tie_word_embeddings", "true");
}

// ---- GPT-NeoX / Pythia ----------------------------------------------------------------------------

// EleutherAI/pythia-6.9b: fused QKV with bias, two LayerNorms read in parallel, untied embed_out.
TEST(HfFamilies, Pythia) {
  const json cfg = {{"model_type", "gpt_neox"},    {"num_hidden_layers", 32},    {"hidden_size", 4096},
                    {"intermediate_size", 16384},  {"num_attention_heads", 32},  {"vocab_size", 50432},
                    {"max_position_embeddings", 2048}, {"rotary_pct", 0.25},     {"use_parallel_residual", true},
                    {"hidden_act", "gelu"},        {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "pythia.json");
  EXPECT_TRUE(m.parallel_attention);
  EXPECT_DOUBLE_EQ(m.rotary_fraction, 0.25);
  const int64_t h = 4096, f = 16384;
  const int64_t block = 2 * (2 * h) + lin(h, 3 * h, true) + lin(h, h, true) + lin(h, f, true) + lin(f, h, true);
  const int64_t total = 2 * 50432 * h + 32 * block + 2 * h;  // embed_in, embed_out, layers, final_layer_norm
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 6857302016);  // Pythia-6.9B: 6,857,302,016 (Biderman et al. 2023, Table 1)
  expect_units_agree(m);
}

// EleutherAI/pythia-70m
TEST(HfFamilies, PythiaSmall) {
  const json cfg = {{"model_type", "gpt_neox"},    {"num_hidden_layers", 6},    {"hidden_size", 512},
                    {"intermediate_size", 2048},   {"num_attention_heads", 8},  {"vocab_size", 50304},
                    {"max_position_embeddings", 2048}, {"tie_word_embeddings", false}};
  const int64_t h = 512, f = 2048;
  const int64_t block = 4 * h + lin(h, 3 * h, true) + lin(h, h, true) + lin(h, f, true) + lin(f, h, true);
  const int64_t total = 2 * 50304 * h + 6 * block + 2 * h;
  EXPECT_EQ(count::parameters(model_from_json(cfg, "pythia70m.json")), total);
  EXPECT_EQ(total, 70426624);  // Pythia-70M: 70,426,624
}

// ---- Falcon ---------------------------------------------------------------------------------------

// tiiuae/falcon-7b: multi-query (one K/V head), one LayerNorm for parallel attention and MLP, no
// linear biases, tied head.
TEST(HfFamilies, Falcon7bMultiQuery) {
  const json cfg = {{"model_type", "falcon"},       {"num_hidden_layers", 32},  {"hidden_size", 4544},
                    {"num_attention_heads", 71},    {"multi_query", true},      {"parallel_attn", true},
                    {"new_decoder_architecture", false}, {"bias", false},       {"alibi", false},
                    {"vocab_size", 65024}};
  const Model m = model_from_json(cfg, "falcon7b.json");
  EXPECT_EQ(m.kv_heads, 1);
  EXPECT_EQ(m.seq_len, 2048);  // FalconConfig's max_position_embeddings default
  const int64_t h = 4544, d = 64, f = 4 * h;
  const int64_t block = 2 * h + h * (h + 2 * d) + h * h + 2 * h * f;  // input_layernorm, qkv, dense, MLP
  const int64_t total = 65024 * h + 32 * block + 2 * h;               // word_embeddings, layers, ln_f; tied
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 6921720704);  // Falcon-7B: 6,921,720,704
  expect_units_agree(m);
}

// The new decoder architecture (Falcon-40B/180B): num_kv_heads K/V heads, ln_attn and ln_mlp.
TEST(HfFamilies, FalconNewArchitecture) {
  json cfg = {{"model_type", "falcon"},     {"num_hidden_layers", 60},  {"hidden_size", 8192},
              {"num_attention_heads", 128}, {"num_kv_heads", 8},        {"new_decoder_architecture", true},
              {"parallel_attn", true},      {"bias", false},            {"vocab_size", 65024}};
  const Model m = model_from_json(cfg, "falcon40b.json");
  const int64_t h = 8192, kv = 8 * 64, f = 4 * h;
  const int64_t block = 2 * (2 * h) + h * (h + 2 * kv) + h * h + 2 * h * f;
  EXPECT_EQ(count::block_parameters(m), block);
  EXPECT_EQ(count::parameters(m), 65024 * h + 60 * block + 2 * h);
  cfg["num_ln_in_parallel_attn"] = 1;  // Falcon2-11B: one input_layernorm
  EXPECT_EQ(count::block_parameters(model_from_json(cfg, "falcon2.json")), block - 2 * h);
  cfg["alibi"] = true;
  const Model alibi = model_from_json(cfg, "falcon-alibi.json");
  EXPECT_EQ(alibi.position, Position::kAlibi);
  EXPECT_EQ(alibi.max_positions, 0);  // ALiBi: no limit
}

// ---- GPT-J ----------------------------------------------------------------------------------------

// EleutherAI/gpt-j-6b: q, k, v, out without bias; fc_in, fc_out with; one ln_1; LM head with bias.
TEST(HfFamilies, GptJ) {
  const json cfg = {{"model_type", "gptj"}, {"n_layer", 28},      {"n_embd", 4096}, {"n_head", 16},
                    {"n_inner", nullptr},  {"n_positions", 2048}, {"rotary_dim", 64},
                    {"vocab_size", 50400}, {"activation_function", "gelu_new"}, {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "gptj.json");
  EXPECT_DOUBLE_EQ(m.rotary_fraction, 64.0 / 256);
  const int64_t h = 4096, f = 4 * h, V = 50400;
  const int64_t block = 2 * h + 4 * h * h + lin(h, f, true) + lin(f, h, true);
  const int64_t total = V * h + 28 * block + 2 * h + lin(h, V, true);  // wte, layers, ln_f, lm_head
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 6050882784);  // 6.05 B
  expect_units_agree(m);
}

// ---- OPT ------------------------------------------------------------------------------------------

// facebook/opt-125m: ReLU, biases everywhere, a learned table of 2048 + 2 rows, tied head.
TEST(HfFamilies, Opt) {
  const json cfg = {{"model_type", "opt"},         {"num_hidden_layers", 12},   {"hidden_size", 768},
                    {"ffn_dim", 3072},             {"num_attention_heads", 12}, {"vocab_size", 50272},
                    {"max_position_embeddings", 2048}, {"word_embed_proj_dim", 768},
                    {"do_layer_norm_before", true}, {"activation_function", "relu"}, {"enable_bias", true}};
  const Model m = model_from_json(cfg, "opt.json");
  EXPECT_EQ(m.mlp, Mlp::kRelu);
  EXPECT_EQ(m.position_rows(), 2048 + 2);
  const int64_t h = 768, f = 3072;
  const int64_t block = 2 * (2 * h) + 4 * lin(h, h, true) + lin(h, f, true) + lin(f, h, true);
  const int64_t total = 50272 * h + (2048 + 2) * h + 12 * block + 2 * h;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 125239296);  // OPT-125M: 125,239,296
  expect_units_agree(m);
  json projected = cfg;  // facebook/opt-350m embeds in 512 and projects to 1024
  projected["hidden_size"] = 1024;
  projected["word_embed_proj_dim"] = 512;
  expect_spec_error([&] { model_from_json(projected, "opt350m.json"); }, "/word_embed_proj_dim", "embedding projections");
}

// facebook/opt-6.7b
TEST(HfFamilies, OptLarge) {
  const json cfg = {{"model_type", "opt"},  {"num_hidden_layers", 32},   {"hidden_size", 4096}, {"ffn_dim", 16384},
                    {"num_attention_heads", 32}, {"vocab_size", 50272}, {"max_position_embeddings", 2048}};
  const int64_t h = 4096, f = 16384;
  const int64_t block = 4 * h + 4 * lin(h, h, true) + lin(h, f, true) + lin(f, h, true);
  const int64_t total = 50272 * h + 2050 * h + 32 * block + 2 * h;
  EXPECT_EQ(count::parameters(model_from_json(cfg, "opt67.json")), total);
  EXPECT_EQ(total, 6658473984);  // OPT-6.7B: 6,658,473,984
}

// ---- BLOOM ----------------------------------------------------------------------------------------

// bigscience/bloom-560m: a LayerNorm on the embeddings, ALiBi, biases everywhere, tied.
TEST(HfFamilies, Bloom) {
  const json cfg = {{"model_type", "bloom"}, {"n_layer", 24}, {"n_head", 16}, {"hidden_size", 1024},
                    {"vocab_size", 250880},  {"apply_residual_connection_post_layernorm", false}};
  const Model m = model_from_json(cfg, "bloom.json");
  EXPECT_EQ(m.position, Position::kAlibi);
  EXPECT_EQ(m.seq_len, 2048);
  EXPECT_NE(m.length_note.find("planned at 2048"), std::string::npos);
  const int64_t h = 1024;
  const int64_t block = 2 * (2 * h) + lin(h, 3 * h, true) + lin(h, h, true) + lin(h, 4 * h, true) + lin(4 * h, h, true);
  const int64_t total = 250880 * h + 2 * h + 24 * block + 2 * h;  // word_embeddings (+ layernorm), layers, ln_f
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 559214592);  // BLOOM-560M: 559,214,592
  expect_units_agree(m);
}

// bigscience/bloom-7b1
TEST(HfFamilies, BloomLarge) {
  const json cfg = {{"model_type", "bloom"}, {"n_layer", 30}, {"n_head", 32}, {"hidden_size", 4096},
                    {"vocab_size", 250880}, {"seq_length", 2048}};
  const int64_t h = 4096;
  const int64_t block = 4 * h + lin(h, 3 * h, true) + lin(h, h, true) + lin(h, 4 * h, true) + lin(4 * h, h, true);
  const int64_t total = 250880 * h + 2 * h + 30 * block + 2 * h;
  const Model m = model_from_json(cfg, "bloom7b.json");
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 7069016064);  // BLOOM-7B1: 7,069,016,064
  EXPECT_TRUE(m.length_note.empty());  // seq_length says it
}

// ---- Phi ------------------------------------------------------------------------------------------

// microsoft/phi-2: one LayerNorm for parallel attention and MLP, biases everywhere, an untied LM head
// with bias, RoPE on 40% of each head.
TEST(HfFamilies, Phi2) {
  const json cfg = {{"model_type", "phi"},          {"num_hidden_layers", 32},     {"hidden_size", 2560},
                    {"intermediate_size", 10240},   {"num_attention_heads", 32},   {"num_key_value_heads", nullptr},
                    {"vocab_size", 51200},          {"max_position_embeddings", 2048},
                    {"partial_rotary_factor", 0.4}, {"qk_layernorm", false},       {"hidden_act", "gelu_new"},
                    {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "phi2.json");
  const int64_t h = 2560, f = 10240, V = 51200;
  const int64_t block = 2 * h + 4 * lin(h, h, true) + lin(h, f, true) + lin(f, h, true);
  const int64_t total = V * h + 32 * block + 2 * h + lin(h, V, true);  // embed_tokens, layers, final_layernorm, lm_head
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 2779683840);  // Phi-2: 2,779,683,840
  expect_units_agree(m);
}

// microsoft/phi-1_5
TEST(HfFamilies, Phi15) {
  const json cfg = {{"model_type", "phi"},        {"num_hidden_layers", 24},   {"hidden_size", 2048},
                    {"intermediate_size", 8192},  {"num_attention_heads", 32}, {"vocab_size", 51200},
                    {"max_position_embeddings", 2048}, {"partial_rotary_factor", 0.5}};
  const int64_t h = 2048, f = 8192, V = 51200;
  const int64_t block = 2 * h + 4 * lin(h, h, true) + lin(h, f, true) + lin(f, h, true);
  const int64_t total = V * h + 24 * block + 2 * h + lin(h, V, true);
  EXPECT_EQ(count::parameters(model_from_json(cfg, "phi15.json")), total);
  EXPECT_EQ(total, 1418270720);  // Phi-1.5: 1,418,270,720
}

// microsoft/Phi-3-mini-4k-instruct: LLaMA's layout with fused qkv_proj and gate_up_proj.
TEST(HfFamilies, Phi3) {
  const json cfg = {{"model_type", "phi3"},        {"num_hidden_layers", 32},   {"hidden_size", 3072},
                    {"intermediate_size", 8192},   {"num_attention_heads", 32}, {"num_key_value_heads", 32},
                    {"vocab_size", 32064},         {"max_position_embeddings", 4096},
                    {"sliding_window", 2047},      {"hidden_act", "silu"},      {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "phi3.json");
  const int64_t h = 3072, f = 8192;
  const int64_t block = 2 * h + 4 * h * h + 3 * h * f;
  const int64_t total = 2 * 32064 * h + 32 * block + h;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 3821079552);  // Phi-3-mini: 3,821,079,552
  EXPECT_TRUE(warned(m, "/sliding_window: 2047 is noted"));
  expect_units_agree(m);
}

// ---- refusals, tensor parallelism, model.json -----------------------------------------------------

TEST(HfFamilies, UnknownFamiliesAreRefusedByName) {
  const json mamba = {{"model_type", "mamba"}, {"num_hidden_layers", 2}, {"hidden_size", 64}};
  expect_spec_error([&] { model_from_json(mamba, "mamba.json"); }, "/model_type", "\"mamba\"");
  const json gptj_relu = {{"model_type", "gptj"}, {"n_layer", 2}, {"n_embd", 64}, {"n_head", 4}, {"n_positions", 32},
                          {"vocab_size", 100}, {"activation_function", "relu"}};
  expect_spec_error([&] { model_from_json(gptj_relu, "gptj.json"); }, "/activation_function", "GELU");
}

// Split over t ranks, the QKV keeps q/t query columns and kv_heads/t K/V heads (one each when t >
// kv_heads); the output projection keeps q/t rows; each rank has its biases and norms in full
// where Megatron replicates them.
TEST(HfFamilies, TensorParallelShardsFollowHeadDimAndBiases) {
  const json cfg = {{"model_type", "qwen3"},     {"num_hidden_layers", 2}, {"hidden_size", 256}, {"head_dim", 64},
                    {"intermediate_size", 512},  {"num_attention_heads", 8}, {"num_key_value_heads", 2},
                    {"vocab_size", 1000},        {"max_position_embeddings", 128}, {"attention_bias", true}};
  const Model m = model_from_json(cfg, "q.json");
  const int64_t h = 256, q = 8 * 64, d = 64, f = 512;
  // tp 2: 1 K/V head each; tp 4: 2 K/V heads over 4 ranks, so each keeps one (replicated)
  for (int64_t t : {int64_t{2}, int64_t{4}}) {
    const int64_t kv_r = 2 >= t ? 2 / t : 1;
    const int64_t qkv_out = q / t + 2 * kv_r * d;
    const int64_t attn = h + 2 * d + h * qkv_out + qkv_out + (q / t) * h + h;  // norm, q/k norms, qkv + bias, out + bias
    EXPECT_EQ(program::model_units(m, t)[1].params, attn) << "tp " << t;
    EXPECT_EQ(program::model_units(m, t)[2].params, h + 2 * h * (f / t) + (f / t) * h) << "tp " << t;
  }
}

// A model.json says the same choices with its own keys, and writes them back only where they
// differ from the defaults (so older files keep their form and their stored hashes).
TEST(HfFamilies, ModelJsonRoundTripsTheNewKeys) {
  const json gemma2 = {{"model_type", "gemma2"}, {"num_hidden_layers", 2}, {"hidden_size", 64}, {"head_dim", 32},
                       {"intermediate_size", 128}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                       {"vocab_size", 100}, {"max_position_embeddings", 32}};
  const Model m = model_from_json(gemma2, "g.json");
  const json written = to_json(m);
  EXPECT_EQ(written.at("head_dim"), 32);
  EXPECT_EQ(written.at("attn_norms"), 2);
  EXPECT_EQ(written.at("mlp"), "geglu");
  const Model back = model_from_json(written, "back.json");
  EXPECT_EQ(count::parameters(back), count::parameters(m));
  EXPECT_EQ(to_json(back), written);
  const Model gpt = model_from_json(json{{"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 100}, {"seq_len", 32}},
                                    "gpt.json");
  for (const char* key : {"head_dim", "qkv_bias", "lm_head_bias", "attn_norms", "mlp_norms", "parallel_attention",
                          "qk_norm_span", "attention_sinks", "sliding_window_layers"}) {
    EXPECT_FALSE(to_json(gpt).contains(key)) << key;
  }
}

}  // namespace
}  // namespace stagecraft::spec
