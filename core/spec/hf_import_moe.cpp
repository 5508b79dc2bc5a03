// Hugging Face config.json import of the mixture-of-experts families (hf_import.cpp has the table
// of every family and the dense ones): Mixtral, Qwen2-MoE and Qwen3-MoE, OLMoE, DBRX, gpt-oss and
// DeepSeek-V2/V3, each read as its modelling code in transformers builds it.
#include <string>
#include <vector>

#include "core/spec/hf_reader.hpp"

namespace stagecraft::spec::hf {

// ---- mixtures of experts --------------------------------------------------------------------------

// The experts' keys every family shares: E, k, the expert width.
void experts(Reader& r, const char* experts_key, const char* width_key) {
  Model& m = r.m;
  std::string used;
  m.moe.experts = r.integer(experts_key, used);
  m.moe.top_k = r.integer("num_experts_per_tok", used);
  m.moe.ffn_hidden = r.integer(width_key, used);
}

// MixtralForCausalLM: LLaMA's attention; every layer's MLP is a sparse MoE block (gate h -> E
// without bias, experts w1 / w3 / w2: SwiGLU of intermediate_size), no shared expert.
Model from_mixtral(const json& j, const std::string& file) {
  Reader r(j, file, "Mixtral");
  Model& m = r.m;
  r.llama_shapes(false);
  r.positions({"max_position_embeddings"});
  r.warn_sliding_window();
  r.note_rope_scaling();
  r.require_activation("hidden_act", {"silu", "swish"}, "\"silu\" (SwiGLU experts)");
  r.numerics("rms_norm_eps", 1e-5, 1e6);  // MixtralConfig
  m.mlp = Mlp::kSwiglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.set_biases(false);
  experts(r, "num_local_experts", "intermediate_size");
  return r.finish();
}

// Qwen2MoeForCausalLM / Qwen3MoeForCausalLM: Qwen2's (QKV bias) or Qwen3's (head_dim, q/k norms)
// attention; layer i's MLP is a sparse MoE block when i is not in mlp_only_layers and
// (i + 1) % decoder_sparse_step == 0 (modeling_qwen2_moe.py Qwen2MoeDecoderLayer), else a dense MLP of
// intermediate_size; Qwen2-MoE's block adds a shared expert of shared_expert_intermediate_size and
// its gate h -> 1 (shared_expert_gate, no bias).
Model from_qwen_moe(const json& j, const std::string& file, bool qwen3) {
  Model m = from_qwen(j, file, qwen3);  // the attention, norms and shapes; the MLP's width for dense layers
  Reader r(j, file, qwen3 ? "Qwen3-MoE" : "Qwen2-MoE");
  r.m = m;
  r.m.source = "Hugging Face " + std::string(qwen3 ? "Qwen3-MoE" : "Qwen2-MoE") + " config.json (" + file + ")";
  experts(r, "num_experts", "moe_intermediate_size");
  const int64_t step = r.integer_or("decoder_sparse_step", 1);
  if (step < 1) r.fail_value("decoder_sparse_step", "a positive layer step");
  std::vector<int64_t> only;
  if (r.has("mlp_only_layers")) {
    const json& l = j.at("mlp_only_layers");
    if (!l.is_array()) r.fail_value("mlp_only_layers", "an array of layer indices");
    for (const json& v : l) {
      if (!v.is_number_integer()) r.fail_value("mlp_only_layers", "an array of layer indices");
      only.push_back(v.get<int64_t>());
    }
  }
  for (int64_t i = 0; i < r.m.layers; ++i) {
    const bool sparse = std::find(only.begin(), only.end(), i) == only.end() && (i + 1) % step == 0;
    if (!sparse) r.m.moe.dense_layers.push_back(i);
  }
  r.m.moe.normalize_top_k = r.boolean_or("norm_topk_prob", false);  // Qwen2MoeConfig / Qwen3MoeConfig default
  if (!qwen3) {
    r.m.moe.shared_ffn_hidden = r.integer_or("shared_expert_intermediate_size", 0);
    r.m.moe.shared_gate = r.m.moe.shared_ffn_hidden > 0;
  }
  return r.finish();
}

// clip_qkv (OLMoE, DBRX): the queries, keys and values clamped elementwise; no parameters, no FLOPs.
void note_clip_qkv(Reader& r, const std::string& pointer, const json& value) {
  r.warn_at(pointer, value,
            "is noted: queries, keys and values are clamped to +-clip_qkv elementwise, which changes no parameter "
            "or cost Stagecraft models; the executor does not clamp");
}

// OlmoeForCausalLM (modeling_olmoe.py): q, k, v, o with attention_bias over heads of hidden_size /
// num_attention_heads (OlmoeAttention reads no head_dim); q_norm, an RMSNorm over the whole q
// projection (hidden_size wide), and k_norm over the whole k projection (num_key_value_heads x
// head_dim), applied before the heads are split; values clamped to clip_qkv when set; every layer's
// MLP a sparse MoE block (gate h -> E without bias, softmax, top-k, renormalised when norm_topk_prob,
// false by default; num_experts SwiGLU experts of intermediate_size); RMSNorm, RoPE, untied head.
Model from_olmoe(const json& j, const std::string& file) {
  Reader r(j, file, "OLMoE");
  Model& m = r.m;
  r.llama_shapes(false);
  if (m.head_size != 0) {
    r.fail_value("head_dim", "hidden_size / num_attention_heads (" + std::to_string(m.hidden / m.heads) +
                                 "): OLMoE's attention takes no other head width");
  }
  r.positions({"max_position_embeddings"});
  r.note_rope_scaling();
  r.require_activation("hidden_act", {"silu", "swish"}, "\"silu\" (SwiGLU experts)");
  r.numerics("rms_norm_eps", 1e-5);  // OlmoeConfig
  m.mlp = Mlp::kSwiglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.set_biases(false);
  m.qkv_bias = m.out_bias = r.boolean_or("attention_bias", false);
  m.qk_norm = m.qk_norm_whole = true;
  if (r.has("clip_qkv")) note_clip_qkv(r, "/clip_qkv", j.at("clip_qkv"));
  experts(r, "num_experts", "intermediate_size");
  m.moe.normalize_top_k = r.boolean_or("norm_topk_prob", false);  // OlmoeConfig's default
  return r.finish();
}

// DbrxForCausalLM (modeling_dbrx.py): d_model, n_layers, n_heads (head_dim = d_model / n_heads);
// attn_config (DbrxAttentionConfig): kv_n_heads K/V heads (1 by default), a fused Wqkv h -> h + 2·kv
// without bias (its output clamped to clip_qkv when set), out_proj without bias, RoPE of rope_theta;
// ffn_config (DbrxFFNConfig): a router h -> E without bias, softmax, top moe_top_k, the chosen
// weights divided by their moe_normalize_expert_weights-norm (1, the default: their sum; null: not
// divided), moe_num_experts GLU experts of ffn_hidden_size (w1 gate, v1 up, w2 down; ffn_act_fn's
// name, silu by default); LayerNorms without bias (norm_1, norm_2, norm_f; nn.LayerNorm's eps 1e-5);
// an untied lm_head. As DbrxAttentionConfig and DbrxFFNConfig do, an unknown key in either nested
// config is refused.
void dbrx_attention(Reader& r, const json& attn, const std::string& file) {
  Model& m = r.m;
  ObjectReader a(attn, file, "/attn_config");
  for (const char* k : {"attn_pdrop", "model_type"}) a.has(k);  // dropout; the nested class's name
  m.kv_heads = present(attn, "kv_n_heads") ? a.integer("kv_n_heads") : 1;  // DbrxAttentionConfig's default
  m.rope_theta = present(attn, "rope_theta") ? a.number("rope_theta") : 10000.0;
  if (a.has("clip_qkv") && !attn.at("clip_qkv").is_null()) {
    a.number("clip_qkv");
    note_clip_qkv(r, "/attn_config/clip_qkv", attn.at("clip_qkv"));
  }
  a.finish();
}

void dbrx_ffn(Reader& r, const json& ffn, const std::string& file) {
  Model& m = r.m;
  ObjectReader f(ffn, file, "/ffn_config");
  for (const char* k : {"moe_loss_weight", "model_type"}) f.has(k);  // the balancing loss's weight; the class name
  m.moe.experts = f.integer("moe_num_experts");
  if (m.moe.experts < 2) f.fail_value("moe_num_experts", "at least 2 experts");
  m.moe.top_k = f.integer("moe_top_k");
  if (m.moe.top_k < 1 || m.moe.top_k > m.moe.experts) {
    f.fail_value("moe_top_k", "1.." + std::to_string(m.moe.experts) + " (moe_num_experts)");
  }
  m.moe.ffn_hidden = m.ffn_hidden = f.integer("ffn_hidden_size");
  if (f.has("ffn_act_fn") && !ffn.at("ffn_act_fn").is_null()) {
    ObjectReader act = f.object("ffn_act_fn");
    const std::string name = act.string_or("name", "silu");
    if (name != "silu" && name != "swish") act.fail_value("name", "\"silu\" (SwiGLU experts)");
    act.finish();  // DbrxExpertGLU passes nothing else to the activation
  }
  // top_weights / ||top_weights||_p: p = 1 divides by their sum (they are positive), Stagecraft's
  // normalize_top_k; null leaves the softmax's values; another p is a normalisation not modelled.
  m.moe.normalize_top_k = true;  // DbrxFFNConfig's default p = 1
  if (f.has("moe_normalize_expert_weights")) {
    const json& p = ffn.at("moe_normalize_expert_weights");
    if (p.is_null()) {
      m.moe.normalize_top_k = false;
    } else if (!p.is_number() || p.get<double>() != 1.0) {
      f.fail_value("moe_normalize_expert_weights",
                   "1 (the top-k weights divided by their sum) or null (not divided): Stagecraft does not model "
                   "a normalisation by another p-norm");
    }
  }
  if (f.has("moe_jitter_eps") && !ffn.at("moe_jitter_eps").is_null()) {
    r.warn_at("/ffn_config/moe_jitter_eps", ffn.at("moe_jitter_eps"),
              "is noted: the router's input is multiplied by uniform noise in training, which changes no parameter or "
              "cost Stagecraft models; the executor does not apply it");
  }
  f.finish();
}

Model from_dbrx(const json& j, const std::string& file) {
  Reader r(j, file, "DBRX");
  Model& m = r.m;
  std::string l, h, a, v;
  m.layers = r.integer("n_layers", l);
  m.hidden = r.integer("d_model", h);
  m.heads = r.integer("n_heads", a);
  m.vocab = r.integer("vocab_size", v);
  r.common(l, h, a, "attn_config/kv_n_heads", "ffn_config/ffn_hidden_size", v);
  r.positions({"max_seq_len"});
  if (r.boolean_or("tie_word_embeddings", false)) r.fail_value("tie_word_embeddings", "false (DbrxConfig refuses a tied head)");
  m.tied_embeddings = false;
  m.mlp = Mlp::kSwiglu;
  m.norm = Norm::kLayerNorm;
  m.position = Position::kRope;
  m.set_biases(false);  // Wqkv, out_proj, the router, the experts and every LayerNorm
  m.norm_eps = 1e-5;    // nn.LayerNorm's default; DBRX passes none
  static const json kDefaults = json::object();  // an absent or null nested config: its class's defaults
  dbrx_attention(r, present(j, "attn_config") ? j.at("attn_config") : kDefaults, file);
  dbrx_ffn(r, present(j, "ffn_config") ? j.at("ffn_config") : kDefaults, file);
  return r.finish();
}

// gpt-oss's layer_types: layer i attends over sliding_window tokens when "sliding_attention", over the
// whole sequence when "full_attention" (GptOssConfig's default: the even layers sliding). The window
// changes no parameter; the attention FLOPs stay costed over the whole sequence on every layer, and
// the warning says by how much that over-counts.
void gpt_oss_windows(Reader& r, const json& j) {
  Model& m = r.m;
  std::vector<int64_t> sliding;
  if (r.has("layer_types")) {
    const json& types = j.at("layer_types");
    if (!types.is_array() || static_cast<int64_t>(types.size()) != m.layers) {
      r.fail_value("layer_types", "an array of num_hidden_layers (" + std::to_string(m.layers) + ") layer types");
    }
    for (int64_t i = 0; i < m.layers; ++i) {
      const json& t = types[static_cast<std::size_t>(i)];
      if (t == "sliding_attention") {
        sliding.push_back(i);
      } else if (t != "full_attention") {
        throw SpecError(m.file, "/layer_types/" + std::to_string(i),
                        "expected \"sliding_attention\" or \"full_attention\", got " + describe(t));
      }
    }
  } else {
    for (int64_t i = 0; i < m.layers; i += 2) sliding.push_back(i);
  }
  // GptOssConfig's default 128 when absent; null: no window (GptOssAttention's None)
  const int64_t window = j.contains("sliding_window") ? r.integer_or("sliding_window", 0) : 128;
  if (window < 0) r.fail_value("sliding_window", "a positive window or null");
  if (window == 0 || sliding.empty()) return;
  m.sliding_window = window;
  if (static_cast<int64_t>(sliding.size()) < m.layers) m.sliding_window_layers = sliding;
  const std::string w = std::to_string(window), n = std::to_string(sliding.size());
  m.warnings.push_back(m.file + ": /sliding_window: " + w + " on the " + n +
                       " \"sliding_attention\" layers of layer_types is noted: those layers' attention scores are "
                       "costed over min(seq_len, " + w + ") keys, the others' over the whole sequence");
}

// GptOssForCausalLM (modeling_gpt_oss.py, transformers >= 4.55): q, k, v, o with attention_bias (true
// by default) over num_attention_heads heads of head_dim (64 by default, so q = heads·head_dim, not
// hidden_size), a learned sink logit per head in each softmax (sinks), sliding or full attention per
// layer_types; every layer's MLP a MoE block: the router h -> E with a bias, a softmax over its top-k
// logits (the softmax's top-k renormalised: normalize_top_k), num_local_experts experts of
// intermediate_size, gate_up_proj [h x 2f] and down_proj [f x h] each with its bias, a clamped SwiGLU
// (swiglu_limit; it has SwiGLU's shapes and cost); RMSNorm, RoPE (YaRN by default), an untied head.
Model from_gpt_oss(const json& j, const std::string& file) {
  Reader r(j, file, "gpt-oss");
  Model& m = r.m;
  r.llama_shapes(false, 64);  // GptOssConfig: head_dim 64
  if (!j.contains("num_key_value_heads")) m.kv_heads = 8;  // GptOssConfig's default (null: the query heads)
  r.positions({"max_position_embeddings"});
  r.require_activation("hidden_act", {"silu", "swish"}, "\"silu\" (SwiGLU experts)");
  r.numerics("rms_norm_eps", 1e-5, 150000.0);  // GptOssConfig
  if (r.has("rope_scaling")) {
    r.note_rope_scaling();
  } else {
    m.rope_scaling = "yarn";  // GptOssConfig's default RoPE
    m.warnings.push_back(m.file + ": no rope_scaling: GptOssConfig's default, YaRN, is noted; it changes no cost "
                                  "Stagecraft models");
  }
  m.mlp = Mlp::kSwiglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.set_biases(false);
  m.qkv_bias = m.out_bias = r.boolean_or("attention_bias", true);
  m.mlp_bias = true;  // gate_up_proj_bias and down_proj_bias: every layer is MoE, so these are the experts'
  m.attention_sinks = true;
  experts(r, "num_local_experts", "intermediate_size");
  m.moe.router_logit_bias = true;
  m.moe.normalize_top_k = true;
  gpt_oss_windows(r, j);
  const std::string swiglu =
      "the experts compute (up + 1)*gate*sigmoid(1.702*gate) with gate <= limit and |up| <= limit, SwiGLU's shapes "
      "and cost; the executor computes the plain SwiGLU";
  if (r.has("swiglu_limit")) {
    r.warn("swiglu_limit", "is noted: " + swiglu);
  } else {
    m.warnings.push_back(m.file + ": no swiglu_limit: GptOssConfig's default, 7.0, is noted: " + swiglu);
  }
  if (r.has("quantization_config")) {
    r.warn("quantization_config",
           "is noted: it is the checkpoint's storage format; the counts are of the parameters whatever their "
           "format, and the training dtypes are the training file's");
  }
  return r.finish();
}

// DeepseekV2ForCausalLM / DeepseekV3ForCausalLM (modeling_deepseek.py): multi-head latent attention
// (q_a_proj with attention_bias, q_a_layernorm, q_b_proj — or q_proj when q_lora_rank is null —,
// kv_a_proj_with_mqa with attention_bias, kv_a_layernorm, kv_b_proj, o_proj with attention_bias);
// layer i's MLP is a MoE block when n_routed_experts is set, i >= first_k_dense_replace and
// i % moe_layer_freq == 0, else a dense MLP of intermediate_size; the MoE block: gate [E x h] (no
// bias; V3's e_score_correction_bias of E with topk_method "noaux_tc"), n_routed_experts experts
// of moe_intermediate_size, shared experts as one MLP of moe_intermediate_size x n_shared_experts.
// The multi-token-prediction module (num_nextn_predict_layers) is not among the model's layers.
Model from_deepseek(const json& j, const std::string& file, bool v3) {
  Reader r(j, file, v3 ? "DeepSeek-V3" : "DeepSeek-V2");
  Model& m = r.m;
  r.llama_shapes(false);
  r.positions({"max_position_embeddings"});
  r.note_rope_scaling();
  r.require_activation("hidden_act", {"silu", "swish"}, "\"silu\" (SwiGLU MLPs)");
  r.numerics("rms_norm_eps", 1e-6);
  m.mlp = Mlp::kSwiglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.set_biases(false);
  m.qkv_bias = m.out_bias = r.boolean_or("attention_bias", false);
  std::string used;
  m.mla.q_lora_rank = r.integer_or("q_lora_rank", 0);  // null: a plain q_proj (DeepSeek-V2-Lite)
  m.mla.kv_lora_rank = r.integer("kv_lora_rank", used);
  m.mla.qk_nope_head_dim = r.integer("qk_nope_head_dim", used);
  m.mla.qk_rope_head_dim = r.integer("qk_rope_head_dim", used);
  m.mla.v_head_dim = r.integer("v_head_dim", used);
  if (r.has("n_routed_experts")) {
    experts(r, "n_routed_experts", "moe_intermediate_size");
    m.moe.shared_ffn_hidden = r.integer_or("n_shared_experts", 0) * m.moe.ffn_hidden;
    const int64_t first = r.integer_or("first_k_dense_replace", 0), freq = r.integer_or("moe_layer_freq", 1);
    if (freq < 1) r.fail_value("moe_layer_freq", "a positive layer step");
    for (int64_t i = 0; i < m.layers; ++i) {
      if (!(i >= first && i % freq == 0)) m.moe.dense_layers.push_back(i);
    }
    m.moe.router = r.string_or("scoring_func", "softmax") == "sigmoid" ? "sigmoid" : "softmax";
    const std::string method = r.string_or("topk_method", v3 ? "noaux_tc" : "greedy");
    m.moe.router_bias = method == "noaux_tc";
    m.moe.normalize_top_k = r.boolean_or("norm_topk_prob", false);  // DeepseekV3Config's default
    // the configuration classes' defaults: V3 2.5, 8 groups, top 4 of them; V2 1.0, none
    m.moe.router_scaling = r.number_or("routed_scaling_factor", v3 ? 2.5 : 1.0);
    if (method == "noaux_tc" || method == "group_limited_greedy") {
      m.moe.router_groups = r.integer_or("n_group", v3 ? 8 : 1);
      m.moe.router_group_top_k = r.integer_or("topk_group", v3 ? 4 : 1);
      if (m.moe.router_groups <= 1) m.moe.router_groups = m.moe.router_group_top_k = 0;  // one group: every expert
      if (method == "group_limited_greedy" && m.moe.router_groups > 0) {
        r.warn("topk_method", "DeepSeek-V2 scores a group by its largest expert score; Stagecraft, as Megatron-Core, by the "
                              "sum of its top (experts per token / topk_group) scores");
      }
    }
  }
  if (r.has("num_nextn_predict_layers") && j.at("num_nextn_predict_layers").is_number_integer() &&
      j.at("num_nextn_predict_layers").get<int64_t>() > 0) {
    r.warn("num_nextn_predict_layers", "multi-token-prediction layers are not counted (they are not among the model's layers)");
  }
  return r.finish();
}

}  // namespace stagecraft::spec::hf
