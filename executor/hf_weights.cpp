#include "executor/hf_weights.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/io/file.hpp"
#include "core/spec/error.hpp"
#include "core/text/format.hpp"
#include "executor/errors.hpp"
#include "executor/model/layers.hpp"

namespace stagecraft::executor::hf {

using spec::Model;
using spec::SpecError;
namespace st = io::safetensors;
namespace fs = std::filesystem;

namespace {

// The prefix of the decoder's tensors as transformers saves the *ForCausalLM model.
std::string decoder_prefix(Family f) { return f == Family::kGpt2 ? "transformer." : "model."; }

// The Hugging Face base name (without .weight / .bias) of our linear or norm `what` in block i.
std::string block_name(Family f, int64_t i, const std::string& what) {
  const std::string b = (f == Family::kGpt2 ? "h." : "layers.") + std::to_string(i) + ".";
  if (f == Family::kGpt2) {
    if (what == "attn.norm1") return b + "ln_1";
    if (what == "mlp.norm2") return b + "ln_2";
    if (what == "attn.qkv") return b + "attn.c_attn";
    if (what == "attn.out") return b + "attn.c_proj";
    if (what == "mlp.up") return b + "mlp.c_fc";
    if (what == "mlp.down") return b + "mlp.c_proj";
  } else {
    if (what == "attn.norm1") return b + "input_layernorm";
    if (what == "mlp.norm2") return b + "post_attention_layernorm";
    if (what == "attn.out") return b + "self_attn.o_proj";
    if (what == "attn.q_norm") return b + "self_attn.q_norm";
    if (what == "attn.k_norm") return b + "self_attn.k_norm";
    if (what == "mlp.gate") return b + "mlp.gate_proj";
    if (what == "mlp.up") return b + "mlp.up_proj";
    if (what == "mlp.down") return b + "mlp.down_proj";
  }
  throw std::logic_error("hf: no " + std::string(to_string(f)) + " tensor for " + what);
}

// What of config.json must agree with the run's model, as (field, config's value, model's value).
std::vector<std::string> config_differences(const Model& hf, const Model& m) {
  std::vector<std::string> out;
  auto check = [&](const char* field, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(std::string(field) + " " + a + " (the run's model: " + b + ")");
  };
  auto i = [](int64_t v) { return std::to_string(v); };
  auto yes = [](bool v) { return std::string(v ? "true" : "false"); };
  check("layers", i(hf.layers), i(m.layers));
  check("hidden", i(hf.hidden), i(m.hidden));
  check("heads", i(hf.heads), i(m.heads));
  check("kv_heads", i(hf.kv_heads), i(m.kv_heads));
  check("head_dim", i(hf.head_dim()), i(m.head_dim()));
  // a model whose every MLP is a mixture of experts has no dense width (Mixtral's intermediate_size is the experts')
  if (!m.moe.on() || !m.moe.dense_layers.empty()) check("ffn_hidden", i(hf.ffn_hidden), i(m.ffn_hidden));
  check("vocab", i(hf.vocab), i(m.vocab));
  check("mlp", spec::to_string(hf.mlp), spec::to_string(m.mlp));
  check("norm", spec::to_string(hf.norm), spec::to_string(m.norm));
  check("position", spec::to_string(hf.position), spec::to_string(m.position));
  check("tied_embeddings", yes(hf.tied_embeddings), yes(m.tied_embeddings));
  check("qkv_bias", yes(hf.qkv_bias), yes(m.qkv_bias));
  check("out_bias", yes(hf.out_bias), yes(m.out_bias));
  check("mlp_bias", yes(hf.mlp_bias), yes(m.mlp_bias));
  check("norm_eps", text::fmt("%g", hf.norm_eps), text::fmt("%g", m.norm_eps));
  check("sliding_window", i(hf.sliding_window), i(m.sliding_window));
  check("qk_norm", yes(hf.qk_norm), yes(m.qk_norm));
  if (m.qk_norm) check("qk_norm_span", hf.qk_norm_whole ? "projection" : "head", m.qk_norm_whole ? "projection" : "head");
  check("moe.experts", i(hf.moe.experts), i(m.moe.experts));
  if (m.moe.on()) {
    auto list = [](const std::vector<int64_t>& v) {
      std::string s = "[";
      for (std::size_t k = 0; k < v.size(); ++k) {
        if (k > 0) s += ",";
        s += std::to_string(v[k]);
      }
      s += "]";
      return s;
    };
    check("moe.experts_per_token", i(hf.moe.top_k), i(m.moe.top_k));
    check("moe.expert_ffn_hidden", i(hf.moe.ffn_hidden), i(m.moe.ffn_hidden));
    check("moe.shared_ffn_hidden", i(hf.moe.shared_ffn_hidden), i(m.moe.shared_ffn_hidden));
    check("moe.shared_gate", yes(hf.moe.shared_gate), yes(m.moe.shared_gate));
    check("moe.dense_layers", list(hf.moe.dense_layers), list(m.moe.dense_layers));
    check("moe.normalize_top_k", yes(hf.moe.normalize_top_k), yes(m.moe.normalize_top_k));
    check("moe.router", hf.moe.router, m.moe.router);
  }
  if (m.position == spec::Position::kRope) check("rope_theta", text::fmt("%g", hf.rope_theta), text::fmt("%g", m.rope_theta));
  if (m.mlp == spec::Mlp::kGelu) check("gelu_approx", hf.gelu_exact ? "none" : "tanh", m.gelu_exact ? "none" : "tanh");
  return out;
}

// Buffers transformers saves in some versions but never loads as parameters.
bool ignorable(Family f, const std::string& name) {
  if (f == Family::kGpt2) return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
  return name.ends_with("rotary_emb.inv_freq");
}

}  // namespace

const char* to_string(Family f) {
  switch (f) {
    case Family::kGpt2: return "gpt2";
    case Family::kLlama: return "llama";
    case Family::kQwen2: return "qwen2";
    case Family::kMixtral: return "mixtral";
    case Family::kQwen2Moe: return "qwen2_moe";
    case Family::kOlmoe: return "olmoe";
    case Family::kQwen3: return "qwen3";
    case Family::kQwen3Moe: return "qwen3_moe";
    case Family::kMistral: return "mistral";
  }
  return "?";
}

Family family_of(const Model& m) {
  const std::vector<std::string> why = executor::unsupported_features(m);
  const bool gpt2 = m.position == spec::Position::kLearned && m.norm == spec::Norm::kLayerNorm && m.mlp == spec::Mlp::kGelu &&
                    m.kv_heads == m.heads && m.head_size == 0 && m.qkv_bias && m.out_bias && m.mlp_bias && m.norm_bias &&
                    m.position_offset == 0;
  const bool llama_like = m.position == spec::Position::kRope && m.norm == spec::Norm::kRmsNorm && m.mlp == spec::Mlp::kSwiglu;
  const bool moe = m.moe.on();
  // transformers' Mixtral and Qwen2-MoE attention: head_dim = hidden / heads
  const bool moe_heads = m.head_size == 0 || m.head_size * m.heads == m.hidden;
  // routers the families' modelling code has: a softmax over the experts, no biases, no groups or scaling
  const bool plain_router = m.moe.router == "softmax" && !m.moe.router_bias && !m.moe.router_logit_bias &&
                            m.moe.router_groups == 0 && m.moe.router_scaling == 1.0;
  const bool qk = m.qk_norm;
  // a window on every layer (Mistral's and Mixtral's sliding_window), or none; the families below
  // other than those two have none
  const bool window = m.sliding_window > 0, every_layer = m.sliding_window_layers.empty();
  if (why.empty() && gpt2 && !moe && !qk && !window) return Family::kGpt2;
  if (why.empty() && llama_like && m.qkv_bias == m.out_bias && !moe && !qk && !window) return Family::kLlama;
  // transformers' Mistral: LLaMA's layout without biases, a sliding window on every layer
  if (why.empty() && llama_like && !m.qkv_bias && !m.out_bias && !m.mlp_bias && !moe && !qk && window && every_layer) {
    return Family::kMistral;
  }
  if (why.empty() && llama_like && m.qkv_bias && !m.out_bias && !m.mlp_bias && !moe && !qk && !window) return Family::kQwen2;
  if (why.empty() && llama_like && moe && moe_heads && !qk && plain_router && !m.qkv_bias && !m.out_bias && !m.mlp_bias &&
      m.moe.shared_ffn_hidden == 0 && m.moe.normalize_top_k && m.moe.dense_layers.empty() && every_layer) {
    return Family::kMixtral;
  }
  if (why.empty() && llama_like && moe && moe_heads && !qk && plain_router && m.qkv_bias && !m.out_bias && !m.mlp_bias &&
      m.moe.shared_ffn_hidden > 0 && m.moe.shared_gate && !window) {
    return Family::kQwen2Moe;
  }
  // transformers' Qwen3 / Qwen3-MoE (modeling_qwen3.py, modeling_qwen3_moe.py): RMSNorms over each
  // head's q and k (head_dim wide) before RoPE, attention_bias on all four projections or none,
  // head_dim as the config says; Qwen3-MoE's experts without a shared one, dense layers as
  // mlp_only_layers
  if (why.empty() && llama_like && qk && !m.qk_norm_whole && m.qkv_bias == m.out_bias && !m.mlp_bias && !moe && !window) {
    return Family::kQwen3;
  }
  if (why.empty() && llama_like && moe && qk && !m.qk_norm_whole && plain_router && m.qkv_bias == m.out_bias &&
      !m.mlp_bias && m.moe.shared_ffn_hidden == 0 && !window) {
    return Family::kQwen3Moe;
  }
  // transformers' OLMoE: RMSNorms over the whole q and k projections, every layer's MLP experts
  if (why.empty() && llama_like && moe && moe_heads && qk && m.qk_norm_whole && plain_router && !m.qkv_bias &&
      !m.out_bias && !m.mlp_bias && m.moe.shared_ffn_hidden == 0 && m.moe.dense_layers.empty() && !window) {
    return Family::kOlmoe;
  }
  std::string list;
  for (const std::string& w : why) list += (list.empty() ? "" : "; ") + w;
  throw SpecError(m.file.empty() ? m.name : m.file, "",
                  "no Hugging Face family this tool reads and writes has this architecture (" + spec::architecture_text(m) +
                      (list.empty() ? "" : "; " + list) +
                      "): GPT-2 (learned positions, LayerNorm, GELU, all biases, multi-head), LLaMA / Mistral / Qwen2 "
                      "(RoPE, RMSNorm, SwiGLU; Mistral's sliding window on every layer), Mixtral (their experts, top-k renormalised, no shared expert), "
                      "Qwen2-MoE (Qwen2's attention, experts beside a gated shared expert), Qwen3 / Qwen3-MoE (norms "
                      "over each head's q and k; experts without a shared one) or OLMoE (norms over the whole q and k "
                      "projections, experts in every layer)");
}

std::vector<Piece> pieces_of(const Model& m, Family f, const count::TensorSpec& t) {
  const std::string& n = t.name;
  const bool vec = t.global_rows == 1;
  const std::string suffix = n.ends_with(".b") ? ".bias" : ".weight";
  auto whole = [&](const std::string& hf, bool transposed) {
    Piece p{hf + suffix, 0, t.global_cols, transposed, {}};
    p.shape = vec ? std::vector<int64_t>{t.global_cols}
                  : transposed ? std::vector<int64_t>{t.global_cols, t.global_rows}
                               : std::vector<int64_t>{t.global_rows, t.global_cols};
    return std::vector<Piece>{p};
  };
  const std::string dec = decoder_prefix(f);
  const bool linear_t = f != Family::kGpt2;  // nn.Linear stores [out, in]; GPT-2's Conv1D [in, out]
  if (n == "embedding.wte") return whole(dec + (f == Family::kGpt2 ? "wte" : "embed_tokens"), false);
  if (n == "embedding.wpe") return whole(dec + "wpe", false);
  if (n.rfind("head.normf.", 0) == 0) return whole(dec + (f == Family::kGpt2 ? "ln_f" : "norm"), false);
  if (n == "head.lm_head.w") return whole("lm_head", true);
  if (n.rfind("block.", 0) != 0) throw std::logic_error("hf: no Hugging Face tensor for " + n);
  const std::size_t dot = n.find('.', 6);
  const int64_t block = std::stoll(n.substr(6, dot - 6));
  const std::string what = n.substr(dot + 1, n.rfind('.') - dot - 1);  // "attn.qkv", "mlp.norm2", ...
  if (what == "attn.qkv" && f != Family::kGpt2) {
    const int64_t q = m.q_dim(), kv = m.kv_dim();
    const std::string b = dec + "layers." + std::to_string(block) + ".self_attn.";
    std::vector<Piece> out;
    int64_t col = 0;
    for (const auto& [proj, width] : {std::pair<const char*, int64_t>{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}}) {
      Piece p{b + proj + suffix, col, width, !vec, {}};
      p.shape = vec ? std::vector<int64_t>{width} : std::vector<int64_t>{width, t.global_rows};
      out.push_back(p);
      col += width;
    }
    return out;
  }
  const bool moe = f == Family::kMixtral || f == Family::kQwen2Moe || f == Family::kOlmoe || f == Family::kQwen3Moe;
  const std::string layer = dec + "layers." + std::to_string(block) + ".";
  const std::string moe_block = layer + (f == Family::kMixtral ? "block_sparse_moe." : "mlp.");
  if (moe && what == "mlp.router") return whole(moe_block + "gate", true);
  if (moe && what.rfind("mlp.experts.", 0) == 0) {
    // one piece per expert: its band of the stacked rows, nn.Linear [out, in] (a bias: [out])
    const std::string linear = what.substr(12);  // gate, up, down
    const std::string hf = f == Family::kMixtral ? (linear == "gate" ? "w1" : linear == "up" ? "w3" : "w2") : linear + "_proj";
    const int64_t experts = m.moe.experts, in = t.global_rows / experts;
    std::vector<Piece> out;
    for (int64_t e = 0; e < experts; ++e) {
      const bool bias = n.ends_with(".b");
      Piece p{moe_block + "experts." + std::to_string(e) + "." + hf + suffix, 0, t.global_cols, !bias, {}, e * in, in};
      p.shape = bias ? std::vector<int64_t>{t.global_cols} : std::vector<int64_t>{t.global_cols, in};
      out.push_back(p);
    }
    return out;
  }
  if (f == Family::kQwen2Moe && what.rfind("mlp.shared.", 0) == 0) {
    return whole(layer + "mlp.shared_expert." + what.substr(11) + "_proj", !vec);
  }
  if (f == Family::kQwen2Moe && what == "mlp.shared_gate") return whole(layer + "mlp.shared_expert_gate", true);
  const bool norm = what.ends_with("norm1") || what.ends_with("norm2") || what.ends_with("_norm");
  return whole(dec + block_name(f, block, what), linear_t && !norm && !vec);
}

nlohmann::json config_json(const Model& m, const std::string& torch_dtype) {
  const Family f = family_of(m);
  nlohmann::json j;
  if (f == Family::kGpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"n_layer", m.layers},
         {"n_embd", m.hidden},
         {"n_head", m.heads},
         {"n_inner", m.ffn_hidden},
         {"vocab_size", m.vocab},
         {"n_positions", m.position_rows()},
         {"n_ctx", m.position_rows()},
         {"activation_function", m.gelu_exact ? "gelu" : "gelu_new"},
         {"layer_norm_epsilon", m.norm_eps},
         {"resid_pdrop", 0.0},
         {"embd_pdrop", 0.0},
         {"attn_pdrop", 0.0},
         {"tie_word_embeddings", m.tied_embeddings}};
  } else {
    const char* arch = f == Family::kLlama     ? "LlamaForCausalLM"
                       : f == Family::kQwen2   ? "Qwen2ForCausalLM"
                       : f == Family::kMixtral ? "MixtralForCausalLM"
                       : f == Family::kOlmoe   ? "OlmoeForCausalLM"
                       : f == Family::kQwen3   ? "Qwen3ForCausalLM"
                       : f == Family::kMistral ? "MistralForCausalLM"
                       : f == Family::kQwen3Moe ? "Qwen3MoeForCausalLM"
                                               : "Qwen2MoeForCausalLM";
    j = {{"architectures", {arch}},
         {"model_type", to_string(f)},
         {"num_hidden_layers", m.layers},
         {"hidden_size", m.hidden},
         {"num_attention_heads", m.heads},
         {"num_key_value_heads", m.kv_heads},
         {"intermediate_size", m.ffn_hidden},
         {"vocab_size", m.vocab},
         {"max_position_embeddings", m.max_positions > 0 ? m.max_positions : m.seq_len},
         {"hidden_act", "silu"},
         {"rms_norm_eps", m.norm_eps},
         {"rope_theta", m.rope_theta},
         {"attention_dropout", 0.0},
         {"tie_word_embeddings", m.tied_embeddings}};
    if (f == Family::kLlama) {
      j["head_dim"] = m.head_dim();
      j["attention_bias"] = m.qkv_bias;
      j["mlp_bias"] = m.mlp_bias;
    }
    if (f == Family::kMixtral) {  // MixtralConfig: intermediate_size is each expert's width
      j["intermediate_size"] = m.moe.ffn_hidden;
      j["num_local_experts"] = m.moe.experts;
      j["num_experts_per_tok"] = m.moe.top_k;
      j["sliding_window"] = m.sliding_window > 0 ? nlohmann::json(m.sliding_window) : nlohmann::json(nullptr);
      j["output_router_logits"] = false;
    }
    if (f == Family::kMistral) {
      j["head_dim"] = m.head_dim();
      j["sliding_window"] = m.sliding_window;
    }
    if (f == Family::kQwen3 || f == Family::kQwen3Moe) {
      j["head_dim"] = m.head_dim();
      j["attention_bias"] = m.qkv_bias;
      j["use_sliding_window"] = false;
    }
    if (f == Family::kOlmoe) {  // OlmoeConfig: intermediate_size is each expert's width
      j["intermediate_size"] = m.moe.ffn_hidden;
      j["num_experts"] = m.moe.experts;
      j["num_experts_per_tok"] = m.moe.top_k;
      j["norm_topk_prob"] = m.moe.normalize_top_k;
      j["attention_bias"] = false;
      j["clip_qkv"] = nullptr;
      j["output_router_logits"] = false;
    }
    if (f == Family::kQwen2Moe || f == Family::kQwen3Moe) {  // Qwen2MoeConfig, Qwen3MoeConfig: intermediate_size
      j["moe_intermediate_size"] = m.moe.ffn_hidden;       // is the dense layers' width
      if (f == Family::kQwen2Moe) j["shared_expert_intermediate_size"] = m.moe.shared_ffn_hidden;
      j["num_experts"] = m.moe.experts;
      j["num_experts_per_tok"] = m.moe.top_k;
      j["norm_topk_prob"] = m.moe.normalize_top_k;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = m.moe.dense_layers;
      j["use_sliding_window"] = false;
      j["output_router_logits"] = false;
    }
  }
  j["torch_dtype"] = torch_dtype;
  j["_name_or_path"] = m.name;
  return j;
}

HfReader::HfReader(const Model& m, std::string dir) : model_(m), family_(family_of(m)), folder_(dir) {
  const std::string config = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config)) throw SpecError(dir, "", "has no config.json (a Hugging Face checkpoint folder has one)");
  const Model hf = spec::load_model(config);
  if (const std::vector<std::string> diff = config_differences(hf, m); !diff.empty()) {
    std::string list;
    for (const std::string& d : diff) list += (list.empty() ? "" : "; ") + d;
    throw SpecError(config, "", "describes another model than the run's '" + m.name + "': " + list);
  }
  // GPT-2 checkpoints written by GPT2Model (the hub's "gpt2") have no "transformer." prefix.
  const std::vector<std::string> names = folder_.names();
  const std::set<std::string> present(names.begin(), names.end());
  const std::string dec = decoder_prefix(family_);
  const std::string probe = family_ == Family::kGpt2 ? "wte.weight" : "embed_tokens.weight";
  const bool bare = present.count(dec + probe) == 0 && present.count(probe) != 0;
  std::set<std::string> used;
  const ParamLayout full(m);
  for (const TensorSlot& s : full.tensors()) {
    std::vector<Resolved> rs;
    for (Piece p : pieces_of(m, family_, s.spec)) {
      if (bare && p.name.rfind(dec, 0) == 0) p.name = p.name.substr(dec.size());
      st::File* file = folder_.file_of(p.name);
      if (file == nullptr) {
        std::string shape = "[";
        for (std::size_t k = 0; k < p.shape.size(); ++k) shape += (k ? ", " : "") + std::to_string(p.shape[k]);
        throw SpecError(folder_.where(), "/" + p.name,
                        "missing: model '" + m.name + "' needs this " + to_string(family_) + " tensor of shape " + shape + "]" +
                            " (for its " + s.name + ")");
      }
      const st::TensorInfo* info = file->find(p.name);
      if (info->shape != p.shape) {
        st::TensorInfo want;
        want.shape = p.shape;
        throw SpecError(file->path(), "/" + p.name + "/shape",
                        "expected " + want.shape_text() + " for model '" + m.name + "' (its " + s.name + "), found " +
                            info->shape_text());
      }
      if (info->dtype != st::Dtype::kF32 && info->dtype != st::Dtype::kBF16 && info->dtype != st::Dtype::kF16 &&
          info->dtype != st::Dtype::kF64) {
        throw SpecError(file->path(), "/" + p.name + "/dtype",
                        std::string("expected F32, BF16, F16 or F64, found ") + st::to_string(info->dtype));
      }
      used.insert(p.name);
      rs.push_back({p, file, info});
    }
    pieces_[s.name] = std::move(rs);
  }
  for (const std::string& n : names) {
    if (used.count(n) != 0 || ignorable(family_, n)) continue;
    if (m.tied_embeddings && n == "lm_head.weight") continue;  // some writers save the tied copy too
    st::File* file = folder_.file_of(n);
    throw SpecError(file->path(), "/" + n,
                    "unexpected: model '" + m.name + "' (" + to_string(family_) + ") has no such tensor; the checkpoint is of another architecture");
  }
}

void HfReader::read(const TensorSlot& s, int64_t lo, int64_t hi, std::span<float> out) {
  std::fill(out.begin(), out.end(), 0.0f);  // padding rows and columns stay 0
  if (hi <= lo) return;
  const auto it = pieces_.find(s.name);
  if (it == pieces_.end()) throw std::logic_error("HfReader: no tensor " + s.name);
  const int64_t cols = s.cols, R = s.spec.global_rows;
  const int64_t r_lo = lo / cols, r_hi = std::min((hi - 1) / cols + 1, s.map.valid_rows);
  if (r_lo >= r_hi) return;
  std::vector<float> buf;
  for (const count::ColumnPiece& cp : s.map.cols) {
    for (Resolved& rp : it->second) {
      const Piece& p = rp.piece;
      const int64_t g0 = std::max(cp.global, p.col0), g1 = std::min(cp.global + cp.count, p.col0 + p.cols);
      if (g0 >= g1) continue;
      const int64_t lc0 = cp.local + (g0 - cp.global);  // our local column of g0
      // the piece's band of our rows, as local rows [pr_lo, pr_hi)
      const int64_t prows = p.rows < 0 ? R : p.rows;
      const int64_t pr_lo = std::max(r_lo, p.row0 - s.map.row0), pr_hi = std::min(r_hi, p.row0 + prows - s.map.row0);
      if (pr_lo >= pr_hi) continue;
      if (!p.transposed) {
        for (int64_t r = pr_lo; r < pr_hi; ++r) {
          const int64_t row_first = r * cols + lc0;
          const int64_t a = std::max(lo, row_first), b = std::min(hi, row_first + (g1 - g0));
          if (a >= b) continue;
          const int64_t elem = (s.map.row0 + r - p.row0) * p.cols + (g0 - p.col0) + (a - row_first);
          rp.file->read(*rp.info, elem, out.subspan(static_cast<std::size_t>(a - lo), static_cast<std::size_t>(b - a)));
        }
        continue;
      }
      buf.resize(static_cast<std::size_t>(pr_hi - pr_lo));
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t lc = lc0 + (g - g0);
        // only the rows of this column that fall in [lo, hi)
        const int64_t ra = std::max(pr_lo, (lo - lc + cols - 1) / cols);  // lo - lc > -cols: no negative division
        const int64_t rb = hi - 1 < lc ? 0 : std::min(pr_hi, (hi - 1 - lc) / cols + 1);
        if (ra >= rb) continue;
        std::span<float> seg(buf.data(), static_cast<std::size_t>(rb - ra));
        rp.file->read(*rp.info, (g - p.col0) * prows + s.map.row0 + ra - p.row0, seg);
        for (int64_t r = ra; r < rb; ++r) out[static_cast<std::size_t>(r * cols + lc - lo)] = seg[static_cast<std::size_t>(r - ra)];
      }
    }
  }
  // Weights holding NaN or inf give a NaN loss whatever follows: name the tensor instead.
  const auto bad = std::find_if(out.begin(), out.end(), [](float v) { return !std::isfinite(v); });
  if (bad != out.end()) {
    const int64_t count = std::count_if(out.begin(), out.end(), [](float v) { return !std::isfinite(v); });
    std::string names;
    for (const Resolved& rp : it->second) {
      if (!names.empty()) names += ", ";
      names += rp.piece.name;
    }
    throw NonFiniteError(folder_.dir() + ": tensor " + names + " holds " + std::to_string(count) + " non-finite value" +
                         (count == 1 ? "" : "s") + " (" + text::fmt("%g", static_cast<double>(*bad)) +
                         " at element " + std::to_string(lo + (bad - out.begin())) + " of " + s.name +
                         "): the checkpoint is damaged or diverged; evaluating or training from it gives NaN");
  }
}

void write_folder(const Model& m, std::span<const float> values, const std::string& dir, st::Dtype dtype) {
  const Family f = family_of(m);
  const ParamLayout full(m);
  if (static_cast<int64_t>(values.size()) != full.size()) {
    throw std::logic_error("hf::write_folder: " + std::to_string(values.size()) + " values for a model of " +
                           std::to_string(full.size()));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw SpecError(dir, "", "cannot create the folder: " + ec.message());
  std::vector<std::vector<float>> data;
  std::vector<st::WriteTensor> tensors;
  data.reserve(full.tensors().size() * 3);
  for (const TensorSlot& s : full.tensors()) {
    const float* src = values.data() + s.offset;
    for (const Piece& p : pieces_of(m, f, s.spec)) {
      const int64_t rows = p.rows < 0 ? s.rows : p.rows;
      std::vector<float> v(static_cast<std::size_t>(p.cols * rows));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < p.cols; ++c) {
          const float x = src[(p.row0 + r) * s.cols + p.col0 + c];
          v[static_cast<std::size_t>(p.transposed ? c * rows + r : r * p.cols + c)] = x;
        }
      }
      if (std::any_of(v.begin(), v.end(), [](float x) { return !std::isfinite(x); })) {
        throw std::logic_error("hf::write_folder: tensor " + s.name + " holds a non-finite value");
      }
      data.push_back(std::move(v));
      tensors.push_back({p.name, p.shape, data.back()});
    }
  }
  const std::string torch_dtype = dtype == st::Dtype::kBF16 ? "bfloat16" : "float32";
  st::write((fs::path(dir) / "model.safetensors").string(), tensors, dtype, {{"format", "pt"}});
  io::write_file((fs::path(dir) / "config.json").string(), config_json(m, torch_dtype).dump(2) + "\n");
  const nlohmann::json gen = {{"_from_model_config", true}};
  io::write_file((fs::path(dir) / "generation_config.json").string(), gen.dump(2) + "\n");
}

}  // namespace stagecraft::executor::hf
