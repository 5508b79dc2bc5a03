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
#include "core/spec/hf_reader.hpp"

namespace stagecraft::spec {

using nlohmann::json;

namespace {

constexpr const char* kFamilies =
    "\"gpt2\", \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"gemma\", \"gemma2\", \"gpt_neox\", \"falcon\", \"gptj\", "
    "\"opt\", \"bloom\", \"phi\", \"phi3\", \"mixtral\", \"qwen2_moe\", \"qwen3_moe\", \"olmoe\", \"dbrx\", \"gpt_oss\", "
    "\"deepseek_v2\" or \"deepseek_v3\"";

}  // namespace

namespace hf {

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

}  // namespace hf

using hf::present;

bool is_hf_config(const json& j) {
  return j.is_object() && (j.contains("model_type") || j.contains("n_layer") ||
                           j.contains("num_hidden_layers") || j.contains("architectures"));
}

Model model_from_hf_config(const json& j, const std::string& file) {
  using namespace hf;
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
