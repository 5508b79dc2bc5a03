// Hugging Face mixture-of-experts families: each config below holds the shape keys of the published
// config.json of a released model (the Hub repository named above it), and each test derives the
// total and active parameter counts by hand from the family's modelling code (transformers'
// modeling_<type>.py), tensor by tensor, against the model cards' figures.
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

// ---- mixtures of experts ------------------------------------------------------------------------

// mistralai/Mixtral-8x7B-v0.1: Mistral's attention, every layer 8 SwiGLU experts of 14336, top-2,
// router h x 8 without bias. The paper's 46.7B total and 12.9B active (embedding and head counted).
TEST(HfFamilies, MixtralExperts) {
  const json cfg = {{"model_type", "mixtral"},     {"num_hidden_layers", 32},   {"hidden_size", 4096},
                    {"intermediate_size", 14336},  {"num_attention_heads", 32}, {"num_key_value_heads", 8},
                    {"vocab_size", 32000},         {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-5},
                    {"rope_theta", 1e6},           {"num_local_experts", 8},    {"num_experts_per_tok", 2},
                    {"tie_word_embeddings", false}, {"sliding_window", nullptr}};
  const Model m = model_from_json(cfg, "mixtral.json");
  const int64_t h = 4096, kv = 8 * 128, f = 14336, E = 8, k = 2, V = 32000, L = 32;
  const int64_t attention = h * h + 2 * h * kv + h * h;        // q, k, v, o
  const int64_t expert = 3 * h * f;                             // w1, w3, w2
  const int64_t block = 2 * h + attention + h * E + E * expert;  // two RMSNorms, router, experts
  EXPECT_EQ(count::block_parameters(m, 0), block);
  EXPECT_EQ(count::expert_parameters(m), expert);
  const int64_t total = 2 * V * h + h + L * block;              // embedding, head and final norm, blocks
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 46'702'792'704);                             // 46.7B
  const int64_t active = total - L * (E - k) * expert;
  EXPECT_EQ(count::active_parameters(m), active);
  EXPECT_EQ(active, 12'879'925'248);                            // 12.9B
  // forward FLOPs a token: per layer 2·(attention linears) + 4·s·q scores + router 2hE + k experts
  const double s = 8192, layer = 2.0 * attention + 4 * s * h + 2.0 * h * E + k * 2.0 * expert;
  EXPECT_DOUBLE_EQ(count::flops_per_token_fwd(m), L * layer + 2.0 * h * V);
  expect_units_agree(m);
  EXPECT_EQ(model_from_json(to_json(m), "round.json").moe, m.moe);
}

// Qwen2-MoE (Qwen/Qwen1.5-MoE-A2.7B's shapes at 4 layers): a shared expert of 5632 with its gate
// h -> 1 beside 60 experts of 1408, top-4; decoder_sparse_step 2 and mlp_only_layers [3] leave
// layers 0, 2 and 3 dense (intermediate_size 5632): only layer 1 ((1 + 1) % 2 == 0, not listed) is MoE.
TEST(HfFamilies, Qwen2MoeSharedExpertAndSparseStep) {
  const json cfg = {{"model_type", "qwen2_moe"},   {"num_hidden_layers", 4},    {"hidden_size", 2048},
                    {"intermediate_size", 5632},   {"num_attention_heads", 16}, {"num_key_value_heads", 16},
                    {"vocab_size", 151936},        {"max_position_embeddings", 8192}, {"num_experts", 60},
                    {"num_experts_per_tok", 4},    {"moe_intermediate_size", 1408},
                    {"shared_expert_intermediate_size", 5632}, {"decoder_sparse_step", 2},
                    {"mlp_only_layers", {3}},      {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "qwen2moe.json");
  EXPECT_EQ(m.moe.dense_layers, (std::vector<int64_t>{0, 2, 3}));
  const int64_t h = 2048, E = 60, fe = 1408, fs = 5632, f = 5632, V = 151936;
  const int64_t attention = 3 * (h * h + h) + h * h;  // q, k, v with biases (Qwen2), o without
  const int64_t dense = 2 * h + attention + 3 * h * f;
  const int64_t moe = 2 * h + attention + h * E + E * 3 * h * fe + 3 * h * fs + h;  // router, experts, shared, its gate
  EXPECT_EQ(count::block_parameters(m, 0), dense);
  EXPECT_EQ(count::block_parameters(m, 1), moe);
  EXPECT_EQ(count::parameters(m), 2 * V * h + h + 3 * dense + moe);
  EXPECT_EQ(count::active_parameters(m), count::parameters(m) - (E - 4) * 3 * h * fe);
  expect_units_agree(m);
}

// Qwen/Qwen3-30B-A3B: Qwen3's attention (head_dim 128, q/k norms), 128 experts of 768, top-8, no
// shared expert. The model card: 30.5B parameters, 3.3B activated.
TEST(HfFamilies, Qwen3Moe) {
  const json cfg = {{"model_type", "qwen3_moe"},   {"num_hidden_layers", 48},   {"hidden_size", 2048},
                    {"head_dim", 128},             {"intermediate_size", 6144}, {"num_attention_heads", 32},
                    {"num_key_value_heads", 4},    {"vocab_size", 151936},      {"max_position_embeddings", 40960},
                    {"num_experts", 128},          {"num_experts_per_tok", 8},  {"moe_intermediate_size", 768},
                    {"decoder_sparse_step", 1},    {"mlp_only_layers", json::array()},
                    {"attention_bias", false},     {"tie_word_embeddings", false}};
  const Model m = model_from_json(cfg, "qwen3moe.json");
  const int64_t h = 2048, q = 32 * 128, kv = 4 * 128, E = 128, fe = 768, V = 151936, L = 48;
  const int64_t block = 2 * h + 2 * 128 + h * q + 2 * h * kv + q * h + h * E + E * 3 * h * fe;
  const int64_t total = 2 * V * h + h + L * block;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 30'532'122'624);  // 30.5B
  EXPECT_EQ(count::active_parameters(m), total - L * (E - 8) * 3 * h * fe);
  EXPECT_EQ(count::active_parameters(m), 3'353'032'704);  // 3.3B
  const Model bundled = load_model(resolve_config(ConfigKind::kModel, "qwen3-30b-a3b"));
  EXPECT_EQ(count::parameters(bundled), total);
  EXPECT_EQ(count::active_parameters(bundled), count::active_parameters(m));
  // Qwen3-235B-A22B, bundled: 94 layers of h 4096, 64 heads of 128 (4 K/V), 128 experts of 1536,
  // top-8. The model card: 235B parameters, 22B activated.
  const Model big = load_model(resolve_config(ConfigKind::kModel, "qwen3-235b-a22b"));
  const int64_t H = 4096, Q = 64 * 128, KV = 4 * 128, FE = 1536, L2 = 94;
  const int64_t big_block = 2 * H + 2 * 128 + H * (Q + 2 * KV) + Q * H + H * E + E * 3 * H * FE;
  const int64_t big_total = 2 * V * H + H + L2 * big_block;
  EXPECT_EQ(count::parameters(big), big_total);
  EXPECT_EQ(big_total, 235'093'634'560);  // 235B
  EXPECT_EQ(count::active_parameters(big), big_total - L2 * (E - 8) * 3 * H * FE);
  EXPECT_EQ(count::active_parameters(big), 22'190'763'520);  // 22B
}

// deepseek-ai/DeepSeek-V3: MLA (q rank 1536, kv rank 512, 128 heads of 128 + 64 RoPE, v 128); layers
// 0-2 dense of 18432, then 256 experts of 2048 (top-8), one shared of 2048, the router's score
// correction (noaux_tc). The technical report's 671B total; 37B activated (our convention, embedding
// and head included, gives 37.55B; its README_WEIGHTS says 36.7B "including 0.9B embedding and 0.9B
// head", a convention we do not reproduce).
TEST(HfFamilies, DeepSeekV3LatentAttentionAndExperts) {
  const json cfg = {{"model_type", "deepseek_v3"}, {"num_hidden_layers", 61},   {"hidden_size", 7168},
                    {"intermediate_size", 18432},  {"moe_intermediate_size", 2048}, {"num_attention_heads", 128},
                    {"num_key_value_heads", 128},  {"vocab_size", 129280},      {"max_position_embeddings", 163840},
                    {"q_lora_rank", 1536},         {"kv_lora_rank", 512},       {"qk_nope_head_dim", 128},
                    {"qk_rope_head_dim", 64},      {"v_head_dim", 128},         {"n_routed_experts", 256},
                    {"n_shared_experts", 1},       {"num_experts_per_tok", 8},  {"first_k_dense_replace", 3},
                    {"moe_layer_freq", 1},         {"scoring_func", "sigmoid"}, {"topk_method", "noaux_tc"},
                    {"num_nextn_predict_layers", 1}, {"attention_bias", false}, {"tie_word_embeddings", false},
                    {"hidden_act", "silu"}, {"norm_topk_prob", true}};
  const Model m = model_from_json(cfg, "dsv3.json");
  EXPECT_TRUE(warned(m, "multi-token-prediction"));
  const int64_t h = 7168, H = 128, rq = 1536, rkv = 512, nope = 128, rope = 64, v = 128, V = 129280;
  // q_a, its norm, q_b; kv_a (latent + shared RoPE key), its norm, kv_b; o
  const int64_t attention = h * rq + rq + rq * H * (nope + rope) + h * (rkv + rope) + rkv + rkv * H * (nope + v) + H * v * h;
  EXPECT_EQ(attention, 187'107'328);
  const int64_t dense = 2 * h + attention + 3 * h * 18432;
  const int64_t expert = 3 * h * 2048;
  const int64_t moe = 2 * h + attention + h * 256 + 256 + 256 * expert + expert;  // router, correction, experts, shared
  EXPECT_EQ(count::block_parameters(m, 2), dense);
  EXPECT_EQ(count::block_parameters(m, 3), moe);
  const int64_t total = 2 * V * h + h + 3 * dense + 58 * moe;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 671'026'419'200);  // 671B
  EXPECT_EQ(count::active_parameters(m), total - 58 * (256 - 8) * expert);
  EXPECT_EQ(count::active_parameters(m), 37'552'297'472);
  // scores per token: q.k over 192 dimensions and p.v over 128, 128 heads, every one of s keys
  EXPECT_DOUBLE_EQ(count::attention_flops_per_token_fwd(m, 3), 2.0 * 8192 * H * (nope + rope) + 2.0 * 8192 * H * v);
  // the routing's own numbers, from DeepseekV3Config's defaults (routed_scaling_factor 2.5, n_group 8,
  // topk_group 4) where the file leaves them out, and as written where it has them
  EXPECT_EQ(m.moe.router_scaling, 2.5);
  EXPECT_EQ(m.moe.router_groups, 8);
  EXPECT_EQ(m.moe.router_group_top_k, 4);
  json grouped = cfg;
  grouped["routed_scaling_factor"] = 1.5, grouped["n_group"] = 4, grouped["topk_group"] = 2;
  const Model g = model_from_json(grouped, "grouped.json");
  EXPECT_EQ(g.moe.router_scaling, 1.5);
  EXPECT_EQ(g.moe.router_groups, 4);
  EXPECT_EQ(g.moe.router_group_top_k, 2);
  const Model bundled = load_model(resolve_config(ConfigKind::kModel, "deepseek-v3"));
  EXPECT_EQ(count::parameters(bundled), total);
  EXPECT_EQ(bundled.moe, m.moe);
  EXPECT_EQ(bundled.mla, m.mla);
  // V2-Lite's shape: no query bottleneck (q_lora_rank null), a plain q_proj h -> H·192
  json lite = cfg;
  lite["q_lora_rank"] = nullptr;
  const Model l = model_from_json(lite, "lite.json");
  EXPECT_EQ(count::block_parameters(l, 2) - count::block_parameters(m, 2), h * H * (nope + rope) - (h * rq + rq + rq * H * (nope + rope)));
}

// allenai/OLMoE-1B-7B-0924 (config.json): 16 layers of h 2048, 16 heads of 128 (no GQA), every layer
// 64 SwiGLU experts of 1024, top-8 (norm_topk_prob false), router h x 64 without bias; q_norm an
// RMSNorm over the whole q projection (h wide) and k_norm over the whole k projection (kv wide), not
// one head. The paper and card: "1B active, 7B total" (the paper's table: 1.3B active, 6.9B total);
// ours: 6,919,161,856 total and 1,282,017,280 active (embedding and head counted).
TEST(HfFamilies, OlmoeWholeProjectionQkNorms) {
  const json cfg = {{"architectures", {"OlmoeForCausalLM"}},
                    {"model_type", "olmoe"},       {"attention_bias", false},   {"attention_dropout", 0.0},
                    {"clip_qkv", nullptr},         {"hidden_act", "silu"},      {"hidden_size", 2048},
                    {"intermediate_size", 1024},   {"max_position_embeddings", 4096}, {"norm_topk_prob", false},
                    {"num_attention_heads", 16},   {"num_experts", 64},         {"num_experts_per_tok", 8},
                    {"num_hidden_layers", 16},     {"num_key_value_heads", 16}, {"rms_norm_eps", 1e-5},
                    {"rope_scaling", nullptr},     {"rope_theta", 10000.0},     {"router_aux_loss_coef", 0.01},
                    {"tie_word_embeddings", false}, {"vocab_size", 50304}};
  const Model m = model_from_json(cfg, "olmoe.json");
  EXPECT_TRUE(m.qk_norm && m.qk_norm_whole);
  EXPECT_FALSE(m.moe.normalize_top_k);
  EXPECT_TRUE(m.warnings.empty());
  const int64_t h = 2048, q = 16 * 128, kv = 16 * 128, f = 1024, E = 64, k = 8, V = 50304, L = 16;
  const int64_t attention = h * q + 2 * h * kv + q * h;                    // q, k, v, o
  const int64_t qk_norms = q + kv;                                         // over the whole projections
  const int64_t expert = 3 * h * f;                                        // gate, up, down
  const int64_t block = 2 * h + qk_norms + attention + h * E + E * expert;  // two RMSNorms, router, experts
  EXPECT_EQ(count::block_parameters(m, 0), block);
  EXPECT_EQ(count::qk_norm_parameters(m), qk_norms);
  const int64_t total = 2 * V * h + h + L * block;                         // embedding, head and final norm, blocks
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 6'919'161'856);                                         // 6.92B: the paper's 6.9B, "7B total"
  const int64_t active = total - L * (E - k) * expert;
  EXPECT_EQ(count::active_parameters(m), active);
  EXPECT_EQ(active, 1'282'017'280);                                        // 1.28B: the paper's 1.3B, "1B active"
  // forward FLOPs a token: per layer 2·(attention linears) + 4·s·q scores + router 2hE + k experts
  const double s = 4096, layer = 2.0 * attention + 4 * s * q + 2.0 * h * E + k * 2.0 * expert;
  EXPECT_DOUBLE_EQ(count::flops_per_token_fwd(m), L * layer + 2.0 * h * V);
  // the tensor table's norms have the projections' widths: with 4 K/V heads k_norm is 4 x 128 wide
  json gqa = cfg;
  gqa["num_key_value_heads"] = 4;
  const Model g = model_from_json(gqa, "olmoe-gqa.json");
  EXPECT_EQ(tensor_cols(g, 1, 1, "block.0.attn.q_norm.w"), q);
  EXPECT_EQ(tensor_cols(g, 1, 1, "block.0.attn.k_norm.w"), 4 * 128);
  EXPECT_EQ(count::block_parameters(m, 0) - count::block_parameters(g, 0), 2 * h * (kv - 4 * 128) + (kv - 4 * 128));
  expect_units_agree(m);
  // model.json says it with "qk_norm_span" and reads back to the same model
  const json written = to_json(m);
  EXPECT_EQ(written.at("qk_norm_span"), "projection");
  EXPECT_EQ(written.at("moe").at("normalize_top_k"), false);
  const Model back = model_from_json(written, "back.json");
  EXPECT_EQ(count::parameters(back), total);
  EXPECT_EQ(to_json(back), written);
  // the numerics-only keys are noted, not modelled
  json clipped = cfg;
  clipped["clip_qkv"] = 8.0;
  clipped["norm_topk_prob"] = true;
  const Model c = model_from_json(clipped, "olmoe-clip.json");
  EXPECT_TRUE(warned(c, "/clip_qkv: 8.0 is noted"));
  EXPECT_TRUE(c.moe.normalize_top_k);
  EXPECT_EQ(count::parameters(c), total);
}

// databricks/dbrx-base (config.json): 40 layers of d_model 6144, 48 heads of 128, 8 K/V heads, a fused
// Wqkv without bias (clip_qkv 8), LayerNorms without bias, 16 SwiGLU experts of 10752, top-4, router
// h x 16 without bias, vocab 100352, untied. The model card: 132B total, 36B active; ours
// 131,596,523,520 and 36,469,708,800 (embedding and head counted).
TEST(HfFamilies, DbrxFusedQkvAndLayerNormsWithoutBias) {
  const json cfg = {{"architectures", {"DbrxForCausalLM"}},
                    {"attn_config", {{"clip_qkv", 8}, {"kv_n_heads", 8}, {"model_type", ""}, {"rope_theta", 500000}}},
                    {"d_model", 6144},
                    {"emb_pdrop", 0.0},
                    {"ffn_config", {{"ffn_hidden_size", 10752}, {"model_type", ""}, {"moe_jitter_eps", 0.01},
                                    {"moe_loss_weight", 0.05}, {"moe_num_experts", 16}, {"moe_top_k", 4}}},
                    {"initializer_range", 0.02},
                    {"max_seq_len", 32768},
                    {"model_type", "dbrx"},
                    {"n_heads", 48},
                    {"n_layers", 40},
                    {"output_router_logits", false},
                    {"resid_pdrop", 0.0},
                    {"router_aux_loss_coef", 0.05},
                    {"tie_word_embeddings", false},
                    {"vocab_size", 100352}};
  const Model m = model_from_json(cfg, "dbrx.json");
  EXPECT_EQ(m.norm, Norm::kLayerNorm);
  EXPECT_FALSE(m.norm_has_bias());
  EXPECT_EQ(m.kv_heads, 8);
  EXPECT_EQ(m.rope_theta, 500000);
  EXPECT_TRUE(m.moe.normalize_top_k);  // moe_normalize_expert_weights' default 1: divided by their sum
  EXPECT_TRUE(warned(m, "/attn_config/clip_qkv: 8 is noted"));
  EXPECT_TRUE(warned(m, "/ffn_config/moe_jitter_eps: 0.01 is noted"));
  const int64_t h = 6144, q = 48 * 128, kv = 8 * 128, f = 10752, E = 16, k = 4, V = 100352, L = 40;
  const int64_t attention = h * (q + 2 * kv) + q * h;          // Wqkv, out_proj
  const int64_t expert = 3 * h * f;                             // w1, v1, w2
  const int64_t block = 2 * h + attention + h * E + E * expert;  // two LayerNorms of h (no bias), router, experts
  EXPECT_EQ(count::block_parameters(m, 0), block);
  const int64_t total = 2 * V * h + h + L * block;              // wte, lm_head, norm_f, blocks
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 131'596'523'520);                            // 132B
  const int64_t active = total - L * (E - k) * expert;
  EXPECT_EQ(count::active_parameters(m), active);
  EXPECT_EQ(active, 36'469'708'800);                            // 36B
  const double s = 8192, layer = 2.0 * attention + 4 * s * q + 2.0 * h * E + k * 2.0 * expert;
  EXPECT_DOUBLE_EQ(count::flops_per_token_fwd(m), L * layer + 2.0 * h * V);
  expect_units_agree(m);
  EXPECT_EQ(model_from_json(to_json(m), "round.json").moe, m.moe);
  // null: the top-k weights are the softmax's own
  json plain = cfg;
  plain["ffn_config"]["moe_normalize_expert_weights"] = nullptr;
  EXPECT_FALSE(model_from_json(plain, "dbrx-plain.json").moe.normalize_top_k);
}

// openai/gpt-oss-120b (config.json): 36 layers of h 2880, 64 heads of head_dim 64 (q = 4096 != h), 8
// K/V heads, q/k/v/o biases, a learned sink per head, every layer 128 experts of 2880 with biases
// (gate_up [h x 2f] + 2f, down [f x h] + h), top-4, a router h x 128 with a bias; sliding window 128 on
// the even layers. OpenAI's model card: 116.83B total, 5.13B active, and its rows MLP 114.71B,
// attention 0.96B, embed + unembed 1.16B. The card's active count leaves out the input embedding
// (V·h) and keeps the unembedding; ours counts both, so ours is the card's plus V·h.
TEST(HfFamilies, GptOssSinksBiasedExpertsAndWindows) {
  json layer_types = json::array();
  for (int i = 0; i < 36; ++i) layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  const json cfg = {{"architectures", {"GptOssForCausalLM"}},
                    {"attention_bias", true},      {"attention_dropout", 0.0},  {"eos_token_id", 200002},
                    {"experts_per_token", 4},      {"head_dim", 64},            {"hidden_act", "silu"},
                    {"hidden_size", 2880},         {"initial_context_length", 4096}, {"initializer_range", 0.02},
                    {"intermediate_size", 2880},   {"layer_types", layer_types}, {"max_position_embeddings", 131072},
                    {"model_type", "gpt_oss"},     {"num_attention_heads", 64}, {"num_experts_per_tok", 4},
                    {"num_hidden_layers", 36},     {"num_key_value_heads", 8},  {"num_local_experts", 128},
                    {"output_router_logits", false}, {"pad_token_id", 199999},
                    {"quantization_config",
                     {{"modules_to_not_convert", {"model.layers.*.self_attn", "model.embed_tokens", "lm_head"}},
                      {"quant_method", "mxfp4"}}},
                    {"rms_norm_eps", 1e-5},
                    {"rope_scaling", {{"beta_fast", 32.0}, {"beta_slow", 1.0}, {"factor", 32.0},
                                      {"original_max_position_embeddings", 4096}, {"rope_type", "yarn"}, {"truncate", false}}},
                    {"rope_theta", 150000},        {"router_aux_loss_coef", 0.9}, {"sliding_window", 128},
                    {"swiglu_limit", 7.0},         {"tie_word_embeddings", false}, {"use_cache", true},
                    {"vocab_size", 201088}};
  const Model m = model_from_json(cfg, "gpt-oss-120b.json");
  EXPECT_EQ(m.head_dim(), 64);
  EXPECT_TRUE(m.attention_sinks && m.moe.router_logit_bias && m.mlp_bias && m.qkv_bias && m.out_bias);
  EXPECT_TRUE(m.moe.normalize_top_k);  // a softmax over the top-k logits
  EXPECT_EQ(m.sliding_window, 128);
  std::vector<int64_t> even;
  for (int64_t i = 0; i < 36; i += 2) even.push_back(i);
  EXPECT_EQ(m.sliding_window_layers, even);
  EXPECT_EQ(m.rope_scaling, "yarn");
  EXPECT_TRUE(warned(m, "on the 18 \"sliding_attention\" layers"));
  EXPECT_TRUE(warned(m, "/swiglu_limit: 7.0 is noted"));
  EXPECT_TRUE(warned(m, "/quantization_config"));
  const int64_t h = 2880, H = 64, q = 64 * 64, kv = 8 * 64, f = 2880, E = 128, k = 4, V = 201088, L = 36;
  const int64_t attention = h * (q + 2 * kv) + (q + 2 * kv) + q * h + h + H;  // q, k, v, o with biases; sinks
  const int64_t expert = 3 * h * f + 2 * f + h;                              // gate_up and down with biases
  const int64_t router = h * E + E;
  const int64_t block = 2 * h + attention + router + E * expert;             // two RMSNorms
  EXPECT_EQ(count::expert_parameters(m), expert);
  EXPECT_EQ(count::block_parameters(m, 0), block);
  const int64_t total = 2 * V * h + h + L * block;
  EXPECT_EQ(count::parameters(m), total);
  EXPECT_EQ(total, 116'829'156'672);                         // 116.83B
  EXPECT_EQ(L * attention, 955'805'184);                     // the card's attention 0.96B
  EXPECT_EQ(L * (router + E * expert), 114'714'874'368);     // the card's MLP 114.71B
  EXPECT_EQ(2 * V * h, 1'158'266'880);                       // the card's embed + unembed 1.16B
  const int64_t active = total - L * (E - k) * expert;
  EXPECT_EQ(count::active_parameters(m), active);
  EXPECT_EQ(active, 5'711'982'912);                          // embedding counted
  EXPECT_EQ(active - V * h, 5'132'849'472);                  // the card's 5.13B (no input embedding)
  // FLOPs: the biases and sinks are not GEMMs; the scores over all s keys on the 18 full layers and
  // over the 128-token window on the 18 "sliding_attention" ones
  const double s = 8192, w = 128;
  const double rest = 2.0 * (h * (q + 2 * kv) + q * h) + 2.0 * h * E + k * 2.0 * 3 * h * f;
  EXPECT_DOUBLE_EQ(count::flops_per_token_fwd(m), 18 * (rest + 4 * s * q) + 18 * (rest + 4 * w * q) + 2.0 * h * V);
  expect_units_agree(m);
  // the sinks split by heads under tensor parallelism, as the queries are
  EXPECT_EQ(tensor_cols(m, 1, 4, "block.0.attn.sinks"), H / 4);
  EXPECT_EQ(tensor_cols(m, 2, 1, "block.0.mlp.router.logit_b"), E);
  EXPECT_EQ(tensor_cols(m, 2, 1, "block.0.mlp.experts.down.b"), h);
  // model.json keeps the new keys and reads back to the same model
  const json written = to_json(m);
  EXPECT_EQ(written.at("attention_sinks"), true);
  EXPECT_EQ(written.at("sliding_window_layers"), json(even));
  EXPECT_EQ(written.at("moe").at("router_logit_bias"), true);
  const Model back = model_from_json(written, "back.json");
  EXPECT_EQ(count::parameters(back), total);
  EXPECT_EQ(to_json(back), written);
  // openai/gpt-oss-20b: 24 layers of 32 experts, the rest the same. The card: 20.91B total, 3.61B active.
  json small = cfg;
  small["num_hidden_layers"] = 24;
  small["num_local_experts"] = 32;
  small["layer_types"] = json(std::vector<json>(layer_types.begin(), layer_types.begin() + 24));
  const Model s20 = model_from_json(small, "gpt-oss-20b.json");
  const int64_t E2 = 32, L2 = 24;
  const int64_t total2 = 2 * V * h + h + L2 * (2 * h + attention + h * E2 + E2 + E2 * expert);
  EXPECT_EQ(count::parameters(s20), total2);
  EXPECT_EQ(total2, 20'914'757'184);                                   // 20.91B
  EXPECT_EQ(count::active_parameters(s20), total2 - L2 * (E2 - k) * expert);
  EXPECT_EQ(count::active_parameters(s20) - V * h, 3'608'307'264);     // the card's 3.61B (no input embedding)
  // without layer_types, GptOssConfig's default: the even layers slide; a null window: none
  json defaults = small;
  defaults.erase("layer_types");
  EXPECT_EQ(model_from_json(defaults, "d.json").sliding_window_layers, s20.sliding_window_layers);
  defaults["sliding_window"] = nullptr;
  const Model unwindowed = model_from_json(defaults, "d.json");
  EXPECT_EQ(unwindowed.sliding_window, 0);
  EXPECT_TRUE(unwindowed.sliding_window_layers.empty());
}

// What these families' configs say that Stagecraft cannot model is refused by name, with the reason.
TEST(HfFamilies, NewMoeFamiliesRefuseWhatTheyCannotModel) {
  const json dbrx = {{"model_type", "dbrx"}, {"d_model", 256}, {"n_heads", 4}, {"n_layers", 2}, {"max_seq_len", 128},
                     {"vocab_size", 1000}, {"attn_config", {{"kv_n_heads", 2}}},
                     {"ffn_config", {{"ffn_hidden_size", 512}, {"moe_num_experts", 4}, {"moe_top_k", 2}}}};
  EXPECT_EQ(count::parameters(model_from_json(dbrx, "dbrx.json")),
            2 * 1000 * 256 + 256 + 2 * (2 * 256 + 256 * (256 + 2 * 128) + 256 * 256 + 256 * 4 + 4 * 3 * 256 * 512));
  json p2 = dbrx;
  p2["ffn_config"]["moe_normalize_expert_weights"] = 2;  // an L2 normalisation of the top-k weights
  expect_spec_error([&] { model_from_json(p2, "dbrx.json"); }, "/ffn_config/moe_normalize_expert_weights", "p-norm");
  json gelu = dbrx;
  gelu["ffn_config"]["ffn_act_fn"] = {{"name", "gelu"}};
  expect_spec_error([&] { model_from_json(gelu, "dbrx.json"); }, "/ffn_config/ffn_act_fn/name", "silu");
  json unknown = dbrx;
  unknown["ffn_config"]["uniform_expert_assignment"] = true;  // DbrxFFNConfig refuses it too
  expect_spec_error([&] { model_from_json(unknown, "dbrx.json"); }, "/ffn_config/uniform_expert_assignment", "unknown key");
  json top = dbrx;
  top["ffn_config"]["moe_top_k"] = 5;
  expect_spec_error([&] { model_from_json(top, "dbrx.json"); }, "/ffn_config/moe_top_k", "1..4");
  json tied = dbrx;
  tied["tie_word_embeddings"] = true;
  expect_spec_error([&] { model_from_json(tied, "dbrx.json"); }, "/tie_word_embeddings", "refuses a tied head");
  const json olmoe = {{"model_type", "olmoe"}, {"num_hidden_layers", 2}, {"hidden_size", 256}, {"intermediate_size", 128},
                      {"num_attention_heads", 4}, {"vocab_size", 1000}, {"max_position_embeddings", 128},
                      {"num_experts", 4}, {"num_experts_per_tok", 2}, {"head_dim", 32}};
  expect_spec_error([&] { model_from_json(olmoe, "olmoe.json"); }, "/head_dim", "no other head width");
  const json gpt_oss = {{"model_type", "gpt_oss"}, {"num_hidden_layers", 4}, {"hidden_size", 256},
                        {"intermediate_size", 128}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                        {"vocab_size", 1000}, {"max_position_embeddings", 128}, {"num_local_experts", 4},
                        {"num_experts_per_tok", 2},
                        {"layer_types", {"sliding_attention", "full_attention", "chunked_attention", "full_attention"}}};
  expect_spec_error([&] { model_from_json(gpt_oss, "gpt-oss.json"); }, "/layer_types/2", "\"chunked_attention\"");
  json short_types = gpt_oss;
  short_types["layer_types"] = {"sliding_attention", "full_attention"};
  expect_spec_error([&] { model_from_json(short_types, "gpt-oss.json"); }, "/layer_types", "num_hidden_layers (4)");
  // the families still refused name what they lack
  const json jamba = {{"model_type", "jamba"}, {"num_hidden_layers", 2}, {"hidden_size", 64}};
  expect_spec_error([&] { model_from_json(jamba, "jamba.json"); }, "/model_type", "Mamba");
  // model.json: a whole-projection span needs q/k norms; window layers need a window
  const json base = {{"layers", 2}, {"hidden", 64}, {"heads", 4}, {"vocab", 100}, {"seq_len", 32}};
  json span = base;
  span["qk_norm_span"] = "projection";
  expect_spec_error([&] { model_from_json(span, "m.json"); }, "/qk_norm_span", "without qk_norm");
  json layers = base;
  layers["sliding_window_layers"] = {0};
  expect_spec_error([&] { model_from_json(layers, "m.json"); }, "/sliding_window_layers", "without a sliding_window");
  layers["sliding_window"] = 16;
  layers["sliding_window_layers"] = {1, 0};
  expect_spec_error([&] { model_from_json(layers, "m.json"); }, "/sliding_window_layers/1", "increasing");
}

}  // namespace
}  // namespace stagecraft::spec
