// Hugging Face config.json import, by model_type. Each family's shapes are read as its modelling
// code in the transformers library builds them (modeling_<type>.py), so the parameter count of the
// Model equals that of the PyTorch module, tensor for tensor:
//
//   family (model_type)        attention            MLP     norm         position  block     biases
//   gpt2                       MHA, fused QKV       gelu    LN           learned   seq.      all
//   llama, mistral             GQA, head_dim        swiglu  RMS          RoPE      seq.      attention_bias, mlp_bias
//   qwen2                      GQA                  swiglu  RMS          RoPE      seq.      QKV only
//   qwen3                      GQA, head_dim, q/k norms swiglu RMS       RoPE      seq.      attention_bias
//   gemma                      head_dim (256)       geglu   RMS          RoPE      seq.      none; tied
//   gemma2                     head_dim, GQA        geglu   RMS, 4/block RoPE      seq.      none; tied
//   gpt_neox                   MHA, fused QKV       gelu    LN           RoPE x pct parallel, 2 norms (or seq.)
//   falcon, RefinedWeb*        MQA / GQA            gelu    LN           RoPE/ALiBi parallel, 1 or 2 norms
//   gptj                       MHA                  gelu    LN           RoPE dim  parallel, 1 norm; MLP + LM head bias
//   opt                        MHA                  relu    LN           learned+2 seq.      all
//   bloom                      MHA, fused QKV       gelu    LN (+emb LN) ALiBi     seq.      all
//   phi (Phi-1.5/2)            MHA/GQA              gelu    LN           RoPE x f  parallel, 1 norm; LM head bias
//   phi3 (Phi-3/3.5/4)         GQA, fused QKV       swiglu  RMS          RoPE      seq.      none
//   mixtral                    GQA                  E swiglu experts, top-k, every layer; RMS, RoPE, none
//   qwen2_moe                  qwen2's              experts + a gated shared expert on every
//                                                   decoder_sparse_step-th layer not in mlp_only_layers
//   qwen3_moe                  qwen3's              experts on the same layers, no shared expert
//   olmoe                      MHA/GQA, q/k norms   E swiglu experts, top-k, every layer; RMS, RoPE, attention_bias
//                              over the whole q and k projections
//   dbrx                       GQA, fused Wqkv      E swiglu experts (ffn_config), top-k, every layer; LN without
//                              (attn_config)        bias, RoPE, none; clip_qkv noted
//   gpt_oss                    GQA, head_dim, sinks E biased swiglu experts, router with bias, every layer; RMS,
//                              sliding / full       RoPE (YaRN), q/k/v/o biases
//   deepseek_v2, deepseek_v3   MLA                  dense MLPs on the first first_k_dense_replace layers,
//                                                   then experts every moe_layer_freq-th layer with
//                                                   n_shared_experts shared; V3's sigmoid router and
//                                                   its per-expert score correction (noaux_tc)
//
// Keys a family carries that change no shape Stagecraft models (dropout, token ids, rope_scaling,
// logit soft-capping) are read or ignored; those that change the cost of attention in a way the
// simulator does not model (sliding_window, gpt-oss's layer_types) are named in a warning the command
// line prints, as are numerics with no parameters (clip_qkv, DBRX's router jitter, gpt-oss's clamped
// SwiGLU and its MXFP4 quantization_config). A key whose value would build a model these shapes do
// not describe (OPT's word_embed_proj_dim, a post-norm OPT, BLOOM's post-norm residual, a DBRX
// normalisation of the expert weights by another p-norm) is refused by name. Unknown model_types are
// refused.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/model.hpp"

namespace stagecraft::spec {

using nlohmann::json;

namespace {

constexpr const char* kFamilies =
    "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"gemma\", \"gemma2\", \"gpt_neox\", \"falcon\", \"gptj\", "
    "\"opt\", \"bloom\", \"phi\", \"phi3\", \"mixtral\", \"qwen2_moe\", \"qwen3_moe\", \"olmoe\", \"dbrx\", \"gpt_oss\", "
    "\"deepseek_v2\" or \"deepseek_v3\"";

bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

std::string hf_name(const json& j, const std::string& file) {
  if (j.contains("_name_or_path") && j["_name_or_path"].is_string() &&
      !j["_name_or_path"].get<std::string>().empty()) {
    return std::filesystem::path(j["_name_or_path"].get<std::string>()).filename().string();
  }
  std::filesystem::path p(file);
  if (p.filename() == "config.json" && p.has_parent_path()) return p.parent_path().filename().string();
  return p.stem().string();
}

// One family's reader: the config, its ObjectReader, the Model being built and the keys each field
// came from (for validation errors that point at the user's key).
class Reader {
 public:
  Reader(const json& j, const std::string& file, const std::string& family)
      : j_(j), r_(j, file, "") {
    m.file = file;
    m.name = hf_name(j, file);
    m.source = "Hugging Face " + family + " config.json (" + file + ")";
  }

  bool has(const char* key) const { return present(j_, key); }
  // The first of `keys` present (a family renamed some keys across versions: n_layer / num_hidden_layers).
  int64_t integer(std::initializer_list<const char*> keys, std::string& used) {
    for (const char* k : keys) {
      if (has(k)) {
        used = k;
        return r_.integer(k);
      }
    }
    used = *keys.begin();
    return r_.integer(used);  // absent: "missing required key"; null: "expected a number"
  }
  int64_t integer(const char* key, std::string& used) { return integer({key}, used); }
  int64_t integer_or(const char* key, int64_t fallback) { return has(key) ? r_.integer(key) : fallback; }
  double number_or(const char* key, double fallback) { return has(key) ? r_.number(key) : fallback; }
  bool boolean_or(const char* key, bool fallback) { return has(key) ? r_.boolean(key) : fallback; }
  std::string string_or(const char* key, const std::string& fallback) { return has(key) ? r_.string(key) : fallback; }
  [[noreturn]] void fail_value(const char* key, const std::string& expected) const { r_.fail_value(key, expected); }

  void warn(const char* key, const std::string& what) {
    std::string pointer = "/";
    pointer += key;
    warn_at(pointer, j_.at(key), what);
  }
  // A warning on a value anywhere in the config (`pointer`: a nested key such as /attn_config/clip_qkv).
  void warn_at(const std::string& pointer, const json& value, const std::string& what) {
    m.warnings.push_back(m.file + ": " + pointer + ": " + describe(value) + " " + what);
  }
  // sliding_window: the attention of each token reaches back this many tokens (count::attention_keys
  // costs a layer's scores over min(s, w) keys); kept on the model, noted, since the CPU executor
  // does not run a window shorter than the sequence.
  void warn_sliding_window(const char* key = "sliding_window") {
    if (!has(key)) return;
    if (j_.at(key).is_number_integer()) m.sliding_window = std::max<int64_t>(0, j_.at(key).get<int64_t>());
    if (m.sliding_window > 0) {
      warn(key, "is noted: each layer's attention scores are costed over min(seq_len, window) keys");
    }
  }
  // rope_scaling: kept by type, so that the executor refuses what it does not compute.
  void note_rope_scaling() {
    if (!has("rope_scaling")) return;
    m.warnings.push_back(m.file + ": /rope_scaling: noted; it changes no cost Stagecraft models");
    const json& s = j_.at("rope_scaling");
    m.rope_scaling = s.is_object() && s.contains("rope_type") && s["rope_type"].is_string() ? s["rope_type"].get<std::string>()
                     : s.is_object() && s.contains("type") && s["type"].is_string()        ? s["type"].get<std::string>()
                                                                                            : std::string("unknown");
  }
  // The norms' epsilon (layer_norm_epsilon, rms_norm_eps, ...) and RoPE's base, as the family's
  // config class defaults them.
  void numerics(const char* eps_key, double eps_default, double theta_default = 10000.0) {
    m.norm_eps = number_or(eps_key, eps_default);
    keys_.norm_eps = eps_key;  // an error names the config's own key, not ours
    m.rope_theta = number_or("rope_theta", theta_default);
  }

  // The activation of an MLP: `key`'s value must start with one of `accepted` (HF spells GELU
  // "gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast").
  void require_activation(const char* key, std::initializer_list<const char*> accepted, const std::string& expected) {
    if (!has(key)) return;
    const std::string act = r_.string(key);
    m.gelu_exact = act == "gelu";  // transformers' "gelu" is the erf form; gelu_new and the rest are tanh
    for (const char* a : accepted) {
      if (act.rfind(a, 0) == 0) return;
    }
    r_.fail_value(key, expected);
  }

  // A config's max_position_embeddings (n_positions) is the longest sequence the model takes, not the
  // length it is trained at (Llama-3.1 says 131072; Mistral-7B 32768). Without a training length
  // from the training file or --seq-len, it is planned at min(limit, kDefaultHfSeqLen), and says so.
  void positions(std::initializer_list<const char*> keys, std::optional<int64_t> fallback = std::nullopt) {
    for (const char* k : keys) {
      if (has(k)) {
        set_positions(r_.integer(k), k);
        keys_.seq_len = keys_.max_positions = k;
        return;
      }
    }
    if (!fallback) r_.fail(*keys.begin(), "the longest sequence the model takes");
    set_positions(*fallback, *keys.begin());
    keys_.seq_len = keys_.max_positions = *keys.begin();
  }

  void common(const std::string& layers, const std::string& hidden, const std::string& heads, const std::string& kv,
              const std::string& ffn, const std::string& vocab) {
    keys_.layers = layers, keys_.hidden = hidden, keys_.heads = heads, keys_.kv_heads = kv, keys_.ffn_hidden = ffn,
    keys_.vocab = vocab;
  }

  // The LLaMA-style keys most families share (num_hidden_layers, hidden_size, num_attention_heads,
  // num_key_value_heads, intermediate_size, vocab_size, head_dim, tie_word_embeddings).
  void llama_shapes(bool tied_default, std::optional<int64_t> head_dim_default = std::nullopt) {
    std::string l, h, a, kv = "num_key_value_heads", f, v;
    m.layers = integer("num_hidden_layers", l);
    m.hidden = integer("hidden_size", h);
    m.heads = integer("num_attention_heads", a);
    m.kv_heads = has("num_key_value_heads") ? r_.integer("num_key_value_heads") : m.heads;
    m.ffn_hidden = integer("intermediate_size", f);
    m.vocab = integer("vocab_size", v);
    common(l, h, a, kv, f, v);
    head_dim(head_dim_default);
    m.tied_embeddings = boolean_or("tie_word_embeddings", tied_default);
  }

  // head_dim other than hidden_size / num_attention_heads (Mistral-NeMo: 128, not 5120 / 32 = 160;
  // Gemma-7B: 256 with 3072 / 16 = 192) changes every attention shape.
  void head_dim(std::optional<int64_t> fallback) {
    const int64_t d = has("head_dim") ? r_.integer("head_dim") : fallback.value_or(0);
    if (has("head_dim") && d < 1) r_.fail_value("head_dim", "a positive head width");
    if (d > 0 && !(m.heads > 0 && m.hidden % m.heads == 0 && d == m.hidden / m.heads)) m.head_size = d;
  }

  Model finish() {
    validate_model(m, keys_);
    return m;
  }

  Model m;

 private:
  void set_positions(int64_t limit, const std::string& key) {
    m.max_positions = limit;
    m.seq_len = std::min(limit, kDefaultHfSeqLen);
    if (limit > kDefaultHfSeqLen) {
      m.length_note = (m.file + ": /" + key + ": " + std::to_string(limit) +
                           " is the longest sequence the model takes, not a training length: unless the training "
                           "file's seq_len or --seq-len sets one, it is planned at " +
                           std::to_string(kDefaultHfSeqLen) + " tokens a sequence");
    }
  }

  const json& j_;
  ObjectReader r_;
  ModelKeys keys_;
};

Model from_gpt2(const json& j, const std::string& file) {
  Reader r(j, file, "GPT-2");
  Model& m = r.m;
  std::string l, h, a, v;
  m.layers = r.integer("n_layer", l);
  m.hidden = r.integer("n_embd", h);
  m.heads = r.integer("n_head", a);
  m.kv_heads = m.heads;
  m.ffn_hidden = r.integer_or("n_inner", m.hidden <= limits::kHidden ? 4 * m.hidden : 0);  // null means 4h
  m.vocab = r.integer("vocab_size", v);
  r.common(l, h, a, a, "n_inner", v);
  r.positions({"n_positions"});
  r.require_activation("activation_function", {"gelu"}, "a GELU variant (\"gelu_new\", \"gelu\")");
  if (!r.has("activation_function")) m.gelu_exact = false;  // GPT2Config: gelu_new
  r.numerics("layer_norm_epsilon", 1e-5);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  m.set_biases(true);
  return r.finish();
}

// LlamaForCausalLM / MistralForCausalLM: q, k, v, o with attention_bias; gate, up, down with
// mlp_bias; RMSNorm before each sublayer and at the end; untied head unless tie_word_embeddings.
// Phi3ForCausalLM (Phi-3, Phi-3.5-mini, Phi-4) is the same layout with qkv_proj and gate_up_proj
// fused (the same tensors' sizes), no biases, RoPE on partial_rotary_factor (1 by default).
Model from_llama(const json& j, const std::string& file, const std::string& family) {
  Reader r(j, file, family);
  Model& m = r.m;
  r.llama_shapes(false);
  r.positions({"max_position_embeddings"});
  r.warn_sliding_window();
  r.note_rope_scaling();
  r.require_activation("hidden_act", {"silu", "swish"}, "\"silu\" (SwiGLU MLP)");
  r.numerics("rms_norm_eps", 1e-6);  // LlamaConfig, MistralConfig, Phi3Config
  m.mlp = Mlp::kSwiglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.set_biases(false);
  m.qkv_bias = m.out_bias = r.boolean_or("attention_bias", false);
  m.mlp_bias = r.boolean_or("mlp_bias", false);
  m.rotary_fraction = r.number_or("partial_rotary_factor", 1.0);
  return r.finish();
}

// Qwen2ForCausalLM (Qwen2, Qwen2.5): LLaMA's layout with biases on q, k and v only.
// Qwen3ForCausalLM: no QKV bias (attention_bias), head_dim explicit (128 by default), and an
// RMSNorm of head_dim on each query and key head (q_norm, k_norm).
Model from_qwen(const json& j, const std::string& file, bool qwen3) {
  Reader r(j, file, qwen3 ? "Qwen3" : "Qwen2");
  Model& m = r.m;
  r.llama_shapes(false, qwen3 ? std::optional<int64_t>(128) : std::nullopt);
  r.positions({"max_position_embeddings"});
  // Qwen applies sliding_window only when use_sliding_window says so (the released configs say false).
  if (r.boolean_or("use_sliding_window", false)) {
    r.warn_sliding_window();
    // Qwen2Attention: the window on layers from max_window_layers on (Qwen2Config's default 28)
    const int64_t from = r.integer_or("max_window_layers", 28);
    if (m.sliding_window > 0 && from > 0) {
      for (int64_t i = from; i < m.layers; ++i) m.sliding_window_layers.push_back(i);
      if (m.sliding_window_layers.empty()) m.sliding_window = 0;  // no layer has it
    }
  }
  r.note_rope_scaling();
  r.require_activation("hidden_act", {"silu", "swish"}, "\"silu\" (SwiGLU MLP)");
  r.numerics("rms_norm_eps", 1e-6);  // Qwen2Config, Qwen3Config
  m.mlp = Mlp::kSwiglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.set_biases(false);
  if (qwen3) {
    m.qkv_bias = m.out_bias = r.boolean_or("attention_bias", false);
    m.qk_norm = true;
  } else {
    m.qkv_bias = true;
  }
  return r.finish();
}

// GemmaForCausalLM: head_dim 256 by default, GeGLU (gelu_pytorch_tanh gate), RMSNorm, the LM head
// always tied to the embedding. Gemma2: a norm before and after each sublayer (four per block),
// alternating local (sliding-window) and global attention, logit soft-capping.
Model from_gemma(const json& j, const std::string& file, bool gemma2) {
  Reader r(j, file, gemma2 ? "Gemma-2" : "Gemma");
  Model& m = r.m;
  r.llama_shapes(true, 256);
  r.positions({"max_position_embeddings"});
  if (!m.tied_embeddings) r.fail_value("tie_word_embeddings", "true (Gemma's LM head is the embedding table)");
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    r.require_activation(key, {"gelu"}, "a GELU variant (\"gelu_pytorch_tanh\": the GeGLU MLP)");
  }
  if (gemma2) {
    r.warn_sliding_window();
    // Gemma2Attention: the window on even layers (local), the whole sequence on odd ones (global)
    if (m.sliding_window > 0) {
      for (int64_t i = 0; i < m.layers; i += 2) m.sliding_window_layers.push_back(i);
      if (m.layers == 1) m.sliding_window_layers.clear();
    }
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
      if (r.has(key)) r.warn(key, "is noted: soft-capping is elementwise and changes no cost Stagecraft models");
    }
    m.attn_norms = m.mlp_norms = 2;
  }
  r.note_rope_scaling();
  m.mlp = Mlp::kGeglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.set_biases(false);
  return r.finish();
}

// GPTNeoXForCausalLM (Pythia, GPT-NeoX-20B): fused query_key_value and dense with attention_bias,
// dense_h_to_4h and dense_4h_to_h with biases, LayerNorms with biases; with use_parallel_residual
// (the default) attention and MLP read the block input through their own norms; RoPE on rotary_pct
// of each head; an untied embed_out without bias.
Model from_gpt_neox(const json& j, const std::string& file) {
  Reader r(j, file, "GPT-NeoX");
  Model& m = r.m;
  r.llama_shapes(false);
  m.kv_heads = m.heads;
  r.positions({"max_position_embeddings"});
  r.note_rope_scaling();
  r.require_activation("hidden_act", {"gelu"}, "a GELU variant (\"gelu\")");
  m.mlp = Mlp::kGelu;
  m.norm = Norm::kLayerNorm;
  m.position = Position::kRope;
  m.rotary_fraction = r.number_or("rotary_pct", 0.25);
  m.parallel_attention = r.boolean_or("use_parallel_residual", true);
  m.set_biases(true);
  m.qkv_bias = m.out_bias = r.boolean_or("attention_bias", true);
  return r.finish();
}

// FalconForCausalLM (Falcon-7B/40B/180B, and the older RefinedWeb configs): fused QKV of
// heads + 2 * kv heads (multi_query: one K/V head; new_decoder_architecture: num_kv_heads), dense,
// dense_h_to_4h and dense_4h_to_h with `bias`; LayerNorms always with biases. Parallel attention uses
// one input_layernorm (7B), the new architecture ln_attn and ln_mlp (num_ln_in_parallel_attn, 2 by
// default); without parallel_attn, a norm before each sublayer. ALiBi when `alibi`, else RoPE.
// Tied head.
Model from_falcon(const json& j, const std::string& file) {
  Reader r(j, file, "Falcon");
  Model& m = r.m;
  std::string l, h, a, v;
  m.layers = r.integer({"num_hidden_layers", "n_layer"}, l);
  m.hidden = r.integer("hidden_size", h);
  m.heads = r.integer({"num_attention_heads", "n_head"}, a);
  m.vocab = r.integer("vocab_size", v);
  const bool new_arch = r.boolean_or("new_decoder_architecture", false);
  std::string kv = "num_kv_heads";
  if (new_arch) {
    m.kv_heads = r.integer_or("num_kv_heads", m.heads);
  } else {
    kv = "multi_query";
    m.kv_heads = r.boolean_or("multi_query", true) ? 1 : m.heads;
  }
  m.ffn_hidden = r.integer_or("ffn_hidden_size", m.hidden <= limits::kHidden ? 4 * m.hidden : 0);
  r.common(l, h, a, kv, "ffn_hidden_size", v);
  r.head_dim(std::nullopt);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  m.position = r.boolean_or("alibi", false) ? Position::kAlibi : Position::kRope;
  // FalconConfig's max_position_embeddings defaults to 2048, the length Falcon was trained at.
  r.positions({"max_position_embeddings"}, 2048);
  if (m.position == Position::kAlibi) m.max_positions = 0;  // ALiBi has no table and no limit
  r.note_rope_scaling();
  r.require_activation("activation", {"gelu"}, "a GELU variant (\"gelu\")");
  m.mlp = Mlp::kGelu;
  m.norm = Norm::kLayerNorm;
  m.set_biases(r.boolean_or("bias", false));
  m.norm_bias = true;
  const bool parallel = new_arch || r.boolean_or("parallel_attn", true);
  m.parallel_attention = parallel;
  if (parallel) m.mlp_norms = new_arch && r.integer_or("num_ln_in_parallel_attn", 2) == 2 ? 1 : 0;
  return r.finish();
}

// GPTJForCausalLM: q, k, v, out without biases; fc_in and fc_out with; one LayerNorm (ln_1) that
// attention and MLP share (parallel); RoPE on rotary_dim of each head; an untied LM head with bias.
Model from_gptj(const json& j, const std::string& file) {
  Reader r(j, file, "GPT-J");
  Model& m = r.m;
  std::string l, h, a, v;
  m.layers = r.integer("n_layer", l);
  m.hidden = r.integer("n_embd", h);
  m.heads = r.integer("n_head", a);
  m.kv_heads = m.heads;
  m.ffn_hidden = r.integer_or("n_inner", m.hidden <= limits::kHidden ? 4 * m.hidden : 0);
  m.vocab = r.integer("vocab_size", v);
  r.common(l, h, a, a, "n_inner", v);
  r.positions({"n_positions"});
  r.require_activation("activation_function", {"gelu"}, "a GELU variant (\"gelu_new\")");
  m.mlp = Mlp::kGelu;
  m.norm = Norm::kLayerNorm;
  m.position = Position::kRope;
  m.set_biases(false);
  m.mlp_bias = m.norm_bias = true;
  m.parallel_attention = true;
  m.mlp_norms = 0;
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  m.lm_head_bias = !m.tied_embeddings;
  if (r.has("rotary_dim") && m.heads > 0 && m.hidden % m.heads == 0) {
    const int64_t rd = r.integer_or("rotary_dim", 0);
    const int64_t d = m.hidden / m.heads;
    if (rd < 1 || rd > d) r.fail_value("rotary_dim", "a width from 1 to the head's " + std::to_string(d));
    m.rotary_fraction = static_cast<double>(rd) / static_cast<double>(d);
  }
  return r.finish();
}

// OPTForCausalLM: k, v, q, out_proj, fc1, fc2 with biases (enable_bias), LayerNorms before each
// sublayer and at the end, ReLU, a learned position table of max_position_embeddings + 2 rows
// (OPTLearnedPositionalEmbedding's offset), the LM head tied.
Model from_opt(const json& j, const std::string& file) {
  Reader r(j, file, "OPT");
  Model& m = r.m;
  std::string l, h, a, f, v;
  m.layers = r.integer("num_hidden_layers", l);
  m.hidden = r.integer("hidden_size", h);
  m.heads = r.integer("num_attention_heads", a);
  m.kv_heads = m.heads;
  m.ffn_hidden = r.integer("ffn_dim", f);
  m.vocab = r.integer("vocab_size", v);
  r.common(l, h, a, a, f, v);
  r.positions({"max_position_embeddings"});
  // OPT-350m embeds in 512 and projects to 1024 (project_in / project_out) and normalizes after each
  // sublayer: shapes these models do not describe.
  if (r.has("word_embed_proj_dim") && r.integer_or("word_embed_proj_dim", m.hidden) != m.hidden) {
    r.fail_value("word_embed_proj_dim", "hidden_size (" + std::to_string(m.hidden) +
                                            "): Stagecraft does not model OPT's embedding projections");
  }
  if (!r.boolean_or("do_layer_norm_before", true)) {
    r.fail_value("do_layer_norm_before", "true: Stagecraft models pre-norm blocks only");
  }
  if (!r.boolean_or("layer_norm_elementwise_affine", true)) {
    r.fail_value("layer_norm_elementwise_affine", "true (LayerNorms with weights and biases)");
  }
  r.require_activation("activation_function", {"relu"}, "\"relu\" (OPT's MLP)");
  m.mlp = Mlp::kRelu;
  m.norm = Norm::kLayerNorm;
  m.position = Position::kLearned;
  m.position_offset = 2;
  m.set_biases(r.boolean_or("enable_bias", true));
  m.norm_bias = true;
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  return r.finish();
}

// BloomForCausalLM: word_embeddings followed by word_embeddings_layernorm, fused query_key_value,
// dense, dense_h_to_4h, dense_4h_to_h with biases, LayerNorms with biases, ALiBi, tied head. A
// BLOOM config declares no longest sequence (ALiBi has none); it is planned at its seq_length or at
// 2048, the length BLOOM was trained at.
Model from_bloom(const json& j, const std::string& file) {
  Reader r(j, file, "BLOOM");
  Model& m = r.m;
  std::string l, h, a, v;
  m.layers = r.integer({"n_layer", "num_hidden_layers"}, l);
  m.hidden = r.integer({"hidden_size", "n_embed"}, h);
  m.heads = r.integer({"n_head", "num_attention_heads"}, a);
  m.kv_heads = m.heads;
  m.ffn_hidden = m.hidden <= limits::kHidden ? 4 * m.hidden : 0;
  m.vocab = r.integer("vocab_size", v);
  r.common(l, h, a, a, h, v);
  if (r.boolean_or("apply_residual_connection_post_layernorm", false)) {
    r.fail_value("apply_residual_connection_post_layernorm", "false: Stagecraft models pre-norm residuals only");
  }
  m.seq_len = r.integer_or("seq_length", 2048);
  if (!r.has("seq_length")) {
    m.length_note = file + ": a BLOOM config declares no training length (ALiBi takes any): unless the "
                           "training file's seq_len or --seq-len sets one, it is planned at 2048 tokens a sequence";
  }
  m.max_positions = 0;
  m.mlp = Mlp::kGelu;
  m.norm = Norm::kLayerNorm;
  m.position = Position::kAlibi;
  m.embedding_norm = true;
  m.set_biases(true);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", true);
  return r.finish();
}

// PhiForCausalLM (Phi-1, Phi-1.5, Phi-2): q, k, v, dense, fc1, fc2 with biases, one LayerNorm per
// block that parallel attention and MLP share, RoPE on partial_rotary_factor of each head, optional
// LayerNorms of head_dim on q and k (qk_layernorm), an untied LM head with bias.
Model from_phi(const json& j, const std::string& file) {
  Reader r(j, file, "Phi");
  Model& m = r.m;
  r.llama_shapes(false);
  r.positions({"max_position_embeddings"});
  r.note_rope_scaling();
  r.require_activation("hidden_act", {"gelu"}, "a GELU variant (\"gelu_new\")");
  m.mlp = Mlp::kGelu;
  m.norm = Norm::kLayerNorm;
  m.position = Position::kRope;
  m.rotary_fraction = r.number_or("partial_rotary_factor", 0.5);
  m.qk_norm = r.boolean_or("qk_layernorm", false);
  m.set_biases(true);
  m.parallel_attention = true;
  m.mlp_norms = 0;
  m.lm_head_bias = !m.tied_embeddings;
  return r.finish();
}

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

}  // namespace

bool is_hf_config(const json& j) {
  return j.is_object() && (j.contains("model_type") || j.contains("n_layer") ||
                           j.contains("num_hidden_layers") || j.contains("architectures"));
}

Model model_from_hf_config(const json& j, const std::string& file) {
  // model_type must name a family whose layers these shapes describe exactly: a config without it
  // (or with a number there) is not read as one family or another by guesswork.
  if (!j.contains("model_type") || !j["model_type"].is_string()) {
    throw SpecError(file, "/model_type",
                    std::string(j.contains("model_type") ? "expected a string" : "missing") +
                        ": a Hugging Face config names its family (" + kFamilies + " are read)" +
                        (j.contains("model_type") ? ", got " + describe(j["model_type"]) : ""));
  }
  const std::string type = j["model_type"].get<std::string>();
  // The mixture-of-experts families read exactly (above); the others are refused by name with what
  // their layers have that these shapes do not describe.
  if (type == "mixtral") return from_mixtral(j, file);
  if (type == "qwen2_moe") return from_qwen_moe(j, file, false);
  if (type == "qwen3_moe") return from_qwen_moe(j, file, true);
  if (type == "olmoe") return from_olmoe(j, file);
  if (type == "dbrx") return from_dbrx(j, file);
  if (type == "gpt_oss") return from_gpt_oss(j, file);
  if (type == "deepseek_v2") return from_deepseek(j, file, false);
  if (type == "deepseek_v3") return from_deepseek(j, file, true);
  const std::pair<const char*, const char*> unread[] = {
      {"jamba", "its Mamba layers are not transformer blocks"},
      {"granitemoe", "its shared-weight expert layout is not read yet"},
      {"phimoe", "its expert layout is not read yet"}};
  for (const auto& [moe, why] : unread) {
    if (type == moe) {
      throw SpecError(file, "/model_type",
                      "\"" + type + "\" is a mixture-of-experts family Stagecraft does not read yet: " + why +
                          " (read: mixtral, qwen2_moe, qwen3_moe, olmoe, dbrx, gpt_oss, deepseek_v2, deepseek_v3)");
    }
  }
  // an expert key on a dense family's config: its layers are not the dense ones that family builds
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size"}) {
    if (present(j, key)) {
      throw SpecError(file, std::string("/") + key,
                      "an expert key on a config of model_type " + describe(j["model_type"]) +
                          ", whose layers are dense: Stagecraft reads experts in the families mixtral, qwen2_moe, "
                          "qwen3_moe, olmoe, dbrx, gpt_oss, deepseek_v2 and deepseek_v3");
    }
  }
  if (type == "gpt2") return from_gpt2(j, file);
  if (type == "llama") return from_llama(j, file, "LLaMA");
  if (type == "mistral") return from_llama(j, file, "Mistral");
  if (type == "qwen2") return from_qwen(j, file, false);
  if (type == "qwen3") return from_qwen(j, file, true);
  if (type == "gemma") return from_gemma(j, file, false);
  if (type == "gemma2") return from_gemma(j, file, true);
  if (type == "gpt_neox") return from_gpt_neox(j, file);
  if (type == "falcon" || type == "RefinedWeb" || type == "RefinedWebModel") return from_falcon(j, file);
  if (type == "gptj") return from_gptj(j, file);
  if (type == "opt") return from_opt(j, file);
  if (type == "bloom") return from_bloom(j, file);
  if (type == "phi") return from_phi(j, file);
  if (type == "phi3") return from_llama(j, file, "Phi-3");
  throw SpecError(file, "/model_type",
                  std::string("expected one of the families Stagecraft reads exactly (") + kFamilies + "), got \"" +
                      type + "\"");
}

}  // namespace stagecraft::spec
