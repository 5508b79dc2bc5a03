#include "core/spec/model.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::spec {

using nlohmann::json;

namespace {

Mlp parse_mlp(const std::string& s) {
  if (s == "swiglu") return Mlp::kSwiglu;
  if (s == "relu") return Mlp::kRelu;
  if (s == "geglu") return Mlp::kGeglu;
  return Mlp::kGelu;
}
Norm parse_norm(const std::string& s) { return s == "rmsnorm" ? Norm::kRmsNorm : Norm::kLayerNorm; }
Position parse_position(const std::string& s) {
  if (s == "rope") return Position::kRope;
  if (s == "alibi") return Position::kAlibi;
  return Position::kLearned;
}

std::string stem_of(const std::string& file) {
  std::filesystem::path p(file);
  if (p.filename() == "config.json" && p.has_parent_path()) return p.parent_path().filename().string();
  return p.stem().string();
}

void require_positive(const Model& m, const std::string& key, int64_t value, int64_t limit) {
  if (value < 1) {
    throw SpecError(m.file, "/" + key, "expected a positive integer, got " + std::to_string(value));
  }
  if (value > limit) {
    throw SpecError(m.file, "/" + key, "expected at most " + std::to_string(limit) + " (Stagecraft's limit), got " +
                                           std::to_string(value));
  }
}

}  // namespace

const char* to_string(Mlp v) {
  switch (v) {
    case Mlp::kSwiglu: return "swiglu";
    case Mlp::kRelu: return "relu";
    case Mlp::kGeglu: return "geglu";
    case Mlp::kGelu: break;
  }
  return "gelu";
}
const char* to_string(Norm v) { return v == Norm::kRmsNorm ? "rmsnorm" : "layernorm"; }
const char* to_string(Position v) {
  switch (v) {
    case Position::kRope: return "rope";
    case Position::kAlibi: return "alibi";
    case Position::kLearned: break;
  }
  return "learned";
}

void validate_model(const Model& m, const ModelKeys& k) {
  require_positive(m, k.layers, m.layers, limits::kLayers);
  require_positive(m, k.hidden, m.hidden, limits::kHidden);
  require_positive(m, k.heads, m.heads, limits::kHidden);
  require_positive(m, k.kv_heads, m.kv_heads, limits::kHidden);
  require_positive(m, k.ffn_hidden, m.ffn_hidden, limits::kFfnHidden);
  require_positive(m, k.vocab, m.vocab, limits::kVocab);
  require_positive(m, k.seq_len, m.seq_len, limits::kSeqLen);
  if (m.max_positions != 0) require_positive(m, k.max_positions, m.max_positions, limits::kSeqLen);
  if (m.max_positions != 0 && m.seq_len > m.max_positions) {
    throw SpecError(m.file, "/" + k.seq_len,
                    "expected at most " + k.max_positions + " (" + std::to_string(m.max_positions) +
                        ", the longest sequence the model takes), got " + std::to_string(m.seq_len));
  }
  if (m.head_size != 0) {
    require_positive(m, k.head_size, m.head_size, limits::kHidden);
    if (m.head_size > limits::kHidden / m.heads) {
      throw SpecError(m.file, "/" + k.head_size,
                      "expected " + k.heads + " x " + k.head_size + " at most " + std::to_string(limits::kHidden) +
                          " (Stagecraft's limit on the attention's width), got " + std::to_string(m.heads) + " x " +
                          std::to_string(m.head_size));
    }
  } else if (m.hidden % m.heads != 0) {
    throw SpecError(m.file, "/" + k.hidden,
                    "expected a multiple of " + k.heads + " (" + std::to_string(m.heads) + "), got " +
                        std::to_string(m.hidden) + " (or a head_dim that says the head width)");
  }
  if (m.attn_norms < 1 || m.attn_norms > 2) {
    throw SpecError(m.file, "/attn_norms", "expected 1 (pre-norm) or 2 (pre- and post-norm), got " +
                                               std::to_string(m.attn_norms));
  }
  if (m.mlp_norms < 0 || m.mlp_norms > 2 || (m.mlp_norms == 0 && !m.parallel_attention)) {
    throw SpecError(m.file, "/mlp_norms",
                    "expected 1 or 2 (0 only with parallel_attention, where the MLP shares the attention's norm), got " +
                        std::to_string(m.mlp_norms));
  }
  if (!(m.rotary_fraction > 0 && m.rotary_fraction <= 1)) {
    throw SpecError(m.file, "/rotary_fraction", "expected a share in (0, 1], got " + std::to_string(m.rotary_fraction));
  }
  if (m.rotary_fraction != 1 && m.position != Position::kRope) {
    throw SpecError(m.file, "/rotary_fraction", "expected 1 unless \"position\" is \"rope\", got " +
                                                    std::to_string(m.rotary_fraction));
  }
  if (m.position_offset < 0 || m.position_offset > 64 || (m.position_offset != 0 && m.position != Position::kLearned)) {
    throw SpecError(m.file, "/position_offset",
                    "expected 0..64 extra rows of a learned position table (0 unless \"position\" is \"learned\"), got " +
                        std::to_string(m.position_offset));
  }
  if (!(m.norm_eps > 0 && m.norm_eps < 1)) {
    throw SpecError(m.file, "/" + k.norm_eps, "expected a positive epsilon below 1, got " + std::to_string(m.norm_eps));
  }
  if (!(m.rope_theta > 1 && std::isfinite(m.rope_theta))) {
    throw SpecError(m.file, "/rope_theta", "expected a finite RoPE base above 1, got " + std::to_string(m.rope_theta));
  }
  if (m.sliding_window < 0) {
    throw SpecError(m.file, "/sliding_window", "expected 0 (none) or a positive window, got " + std::to_string(m.sliding_window));
  }
  if (!m.sliding_window_layers.empty() && m.sliding_window == 0) {
    throw SpecError(m.file, "/sliding_window_layers", "expected no layers without a sliding_window");
  }
  for (std::size_t i = 0; i < m.sliding_window_layers.size(); ++i) {
    const int64_t l = m.sliding_window_layers[i];
    if (l < 0 || l >= m.layers || (i > 0 && l <= m.sliding_window_layers[i - 1])) {
      throw SpecError(m.file, "/sliding_window_layers/" + std::to_string(i),
                      "expected increasing layer indices in 0.." + std::to_string(m.layers - 1) + ", got " + std::to_string(l));
    }
  }
  if (m.qk_norm_whole && !m.qk_norm) {
    throw SpecError(m.file, "/qk_norm_span", "expected \"head\" (the default) without qk_norm: there are no q/k norms to span");
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    throw SpecError(m.file, "/" + k.kv_heads,
                    "expected a divisor of " + k.heads + " (" + std::to_string(m.heads) + "), got " +
                        std::to_string(m.kv_heads));
  }
  if (m.moe.on()) {
    require_positive(m, k.moe + "/experts", m.moe.experts, limits::kExperts);
    if (m.moe.experts < 2) throw SpecError(m.file, "/" + k.moe + "/experts", "expected at least 2 experts, got 1");
    if (m.moe.top_k < 1 || m.moe.top_k > m.moe.experts) {
      throw SpecError(m.file, "/" + k.moe + "/experts_per_token",
                      "expected 1.." + std::to_string(m.moe.experts) + " (the experts), got " + std::to_string(m.moe.top_k));
    }
    require_positive(m, k.moe + "/expert_ffn_hidden", m.moe.ffn_hidden, limits::kFfnHidden);
    if (m.moe.shared_ffn_hidden < 0 || m.moe.shared_ffn_hidden > limits::kFfnHidden) {
      throw SpecError(m.file, "/" + k.moe + "/shared_ffn_hidden",
                      "expected 0 (no shared expert) .. " + std::to_string(limits::kFfnHidden) + ", got " +
                          std::to_string(m.moe.shared_ffn_hidden));
    }
    if (m.moe.shared_gate && m.moe.shared_ffn_hidden == 0) {
      throw SpecError(m.file, "/" + k.moe + "/shared_gate", "expected false without shared experts (shared_ffn_hidden 0)");
    }
    for (std::size_t i = 0; i < m.moe.dense_layers.size(); ++i) {
      const int64_t l = m.moe.dense_layers[i];
      if (l < 0 || l >= m.layers || (i > 0 && l <= m.moe.dense_layers[i - 1])) {
        throw SpecError(m.file, "/" + k.moe + "/dense_layers/" + std::to_string(i),
                        "expected increasing layer indices in 0.." + std::to_string(m.layers - 1) + ", got " + std::to_string(l));
      }
    }
    if (m.moe.router != "softmax" && m.moe.router != "sigmoid") {
      throw SpecError(m.file, "/" + k.moe + "/router", "expected \"softmax\" or \"sigmoid\", got \"" + m.moe.router + "\"");
    }
    if (!(m.moe.router_scaling > 0) || !std::isfinite(m.moe.router_scaling)) {
      throw SpecError(m.file, "/" + k.moe + "/router_scaling",
                      "expected a positive factor on the gates (1: none), got " + std::to_string(m.moe.router_scaling));
    }
    const int64_t groups = m.moe.router_groups, chosen = m.moe.router_group_top_k;
    if (groups < 0 || groups == 1 || (groups > 1 && m.moe.experts % groups != 0)) {
      throw SpecError(m.file, "/" + k.moe + "/router_groups",
                      "expected 0 (no group-limited routing) or a divisor of the " + std::to_string(m.moe.experts) +
                          " experts above 1, got " + std::to_string(groups));
    }
    if (groups == 0 && chosen != 0) {
      throw SpecError(m.file, "/" + k.moe + "/router_group_top_k", "expected 0 without router_groups, got " + std::to_string(chosen));
    }
    // each chosen group scored by its top (k / chosen) scores, and the k taken from chosen groups
    if (groups > 1 && (chosen < 1 || chosen > groups || chosen > m.moe.top_k || chosen * (m.moe.experts / groups) < m.moe.top_k)) {
      throw SpecError(m.file, "/" + k.moe + "/router_group_top_k",
                      "expected 1.." + std::to_string(std::min(groups, m.moe.top_k)) + " groups holding at least the " +
                          std::to_string(m.moe.top_k) + " experts a token takes (" + std::to_string(m.moe.experts / groups) +
                          " a group), got " + std::to_string(chosen));
    }
  }
  if (m.mla.on()) {
    const std::string p = "/" + k.mla + "/";
    if (m.mla.q_lora_rank < 0) throw SpecError(m.file, p + "q_lora_rank", "expected 0 (no query bottleneck) or a rank");
    require_positive(m, k.mla + "/kv_lora_rank", m.mla.kv_lora_rank, limits::kHidden);
    require_positive(m, k.mla + "/qk_nope_head_dim", m.mla.qk_nope_head_dim, limits::kHidden);
    require_positive(m, k.mla + "/qk_rope_head_dim", m.mla.qk_rope_head_dim, limits::kHidden);
    require_positive(m, k.mla + "/v_head_dim", m.mla.v_head_dim, limits::kHidden);
    if (m.position != Position::kRope) throw SpecError(m.file, "/position", "expected \"rope\" with latent attention (mla)");
  }
}

bool Model::moe_layer(int64_t layer) const {
  return moe.on() && !std::binary_search(moe.dense_layers.begin(), moe.dense_layers.end(), layer);
}

Model model_from_json(const json& j, const std::string& file) {
  if (is_hf_config(j)) return model_from_hf_config(j, file);
  ObjectReader r(j, file, "");
  Model m;
  m.file = file;
  m.name = r.string_or("name", stem_of(file));
  m.layers = r.integer("layers");
  m.hidden = r.integer("hidden");
  m.heads = r.integer("heads");
  m.kv_heads = r.integer_or("kv_heads", m.heads);
  m.mlp = parse_mlp(r.choice_or("mlp", {"gelu", "swiglu", "relu", "geglu"}, "gelu"));
  // GPT's MLP is 4h wide; a gated width is a design choice (LLaMA rounds 8h/3), so it is required.
  if (gated(m.mlp) && !r.has("ffn_hidden")) {
    r.fail("ffn_hidden", std::string("the MLP width (required with \"mlp\": \"") + to_string(m.mlp) + "\")");
  }
  m.ffn_hidden = r.integer_or("ffn_hidden", m.hidden <= limits::kHidden ? 4 * m.hidden : 0);  // 0: hidden is refused first
  m.vocab = r.integer("vocab");
  m.seq_len = r.integer("seq_len");
  m.norm = parse_norm(r.choice_or("norm", {"layernorm", "rmsnorm"}, "layernorm"));
  m.position = parse_position(r.choice_or("position", {"learned", "rope", "alibi"}, "learned"));
  m.tied_embeddings = r.boolean_or("tied_embeddings", true);
  m.set_biases(r.boolean_or("bias", true));
  m.qkv_bias = r.boolean_or("qkv_bias", m.qkv_bias);
  m.out_bias = r.boolean_or("out_bias", m.out_bias);
  m.mlp_bias = r.boolean_or("mlp_bias", m.mlp_bias);
  m.norm_bias = r.boolean_or("norm_bias", m.norm_bias);
  m.lm_head_bias = r.boolean_or("lm_head_bias", false);
  if (m.lm_head_bias && m.tied_embeddings) r.fail_value("lm_head_bias", "false with tied_embeddings (a tied head has no bias)");
  m.head_size = r.integer_or("head_dim", 0);
  if (r.has("head_dim") && m.head_size < 1) r.fail_value("head_dim", "a positive head width");
  m.qk_norm = r.boolean_or("qk_norm", false);
  m.qk_norm_whole = r.choice_or("qk_norm_span", {"head", "projection"}, "head") == "projection";
  m.attention_sinks = r.boolean_or("attention_sinks", false);
  m.rotary_fraction = r.number_or("rotary_fraction", 1.0);
  m.parallel_attention = r.boolean_or("parallel_attention", false);
  m.attn_norms = r.integer_or("attn_norms", 1);
  m.mlp_norms = r.integer_or("mlp_norms", 1);
  m.embedding_norm = r.boolean_or("embedding_norm", false);
  m.position_offset = r.integer_or("position_offset", 0);
  m.norm_eps = r.number_or("norm_eps", 1e-5);
  m.rope_theta = r.number_or("rope_theta", 10000.0);
  m.gelu_exact = r.choice_or("gelu_approx", {"tanh", "none"}, "tanh") == "none";
  m.rope_scaling = r.string_or("rope_scaling", "");
  m.sliding_window = r.integer_or("sliding_window", 0);
  if (r.has("sliding_window_layers")) {
    const json& l = r.raw("sliding_window_layers");
    if (!l.is_array()) r.fail("sliding_window_layers", "an array of layer indices");
    for (const json& v : l) {
      if (!v.is_number_integer()) r.fail("sliding_window_layers", "an array of layer indices");
      m.sliding_window_layers.push_back(v.get<int64_t>());
    }
  }
  // A learned position table has as many rows as the longest sequence; without max_positions that
  // is seq_len. RoPE has no table, so without the key it sets no limit.
  m.max_positions = r.integer_or("max_positions", m.position == Position::kLearned ? m.seq_len : 0);
  if (r.has("max_positions") && m.max_positions < 1) r.fail_value("max_positions", "a positive number of tokens");
  if (r.has("moe")) {
    ObjectReader e = r.object("moe");
    m.moe.experts = e.integer("experts");
    m.moe.top_k = e.integer("experts_per_token");
    m.moe.ffn_hidden = e.integer("expert_ffn_hidden");
    m.moe.shared_ffn_hidden = e.integer_or("shared_ffn_hidden", 0);
    m.moe.shared_gate = e.boolean_or("shared_gate", false);
    if (e.has("dense_layers")) {
      const json& d = e.raw("dense_layers");
      if (!d.is_array()) e.fail("dense_layers", "an array of layer indices");
      for (const json& v : d) {
        if (!v.is_number_integer()) e.fail("dense_layers", "an array of layer indices");
        m.moe.dense_layers.push_back(v.get<int64_t>());
      }
    }
    m.moe.router = e.choice_or("router", {"softmax", "sigmoid"}, "softmax");
    m.moe.router_bias = e.boolean_or("router_bias", false);
    m.moe.router_logit_bias = e.boolean_or("router_logit_bias", false);
    m.moe.normalize_top_k = e.boolean_or("normalize_top_k", true);
    m.moe.router_scaling = e.number_or("router_scaling", 1.0);
    m.moe.router_groups = e.integer_or("router_groups", 0);
    m.moe.router_group_top_k = e.integer_or("router_group_top_k", 0);
    e.finish();
  }
  if (r.has("mla")) {
    ObjectReader a = r.object("mla");
    m.mla.q_lora_rank = a.integer_or("q_lora_rank", 0);
    m.mla.kv_lora_rank = a.integer("kv_lora_rank");
    m.mla.qk_nope_head_dim = a.integer("qk_nope_head_dim");
    m.mla.qk_rope_head_dim = a.integer("qk_rope_head_dim");
    m.mla.v_head_dim = a.integer("v_head_dim");
    a.finish();
  }
  m.source = r.string_or("source", "");
  r.finish();
  validate_model(m);
  return m;
}

Model load_model(const std::string& path) { return model_from_json(read_json_file(path), path); }

Model with_training_length(Model m, const Training& t) {
  if (!t.seq_len || *t.seq_len == m.seq_len) return m;
  // A learned table keeps the rows the model was built with, whatever length it trains at.
  if (m.position == Position::kLearned && m.max_positions == 0) m.max_positions = m.seq_len;
  if (m.max_positions > 0 && *t.seq_len > m.max_positions) {
    const auto [file, pointer] = t.origin_of("seq_len");
    throw SpecError(file, pointer,
                    "expected at most " + std::to_string(m.max_positions) + ", the longest sequence " +
                        (m.name.empty() ? std::string("the model") : m.name) + " takes" +
                        (m.file.empty() ? "" : " (" + m.file + ")") + ", got " + std::to_string(*t.seq_len));
  }
  m.seq_len = *t.seq_len;
  return m;
}

std::string architecture_text(const Model& m) {
  std::string s = std::string("mlp ") + to_string(m.mlp) + ", norm " + to_string(m.norm) + ", position " +
                  to_string(m.position) + ", " + (m.tied_embeddings ? "tied" : "untied") + " embeddings, ";
  std::string biases;
  auto bias = [&](bool on, const char* what) {
    if (on) biases += (biases.empty() ? "" : ", ") + std::string(what);
  };
  bias(m.qkv_bias, "qkv");
  bias(m.out_bias, "attention out");
  bias(m.mlp_bias, "mlp");
  bias(m.norm_has_bias(), "norms");
  bias(m.lm_head_bias, "LM head");
  s += biases.empty() ? "no biases" : "biases on " + biases;
  if (m.head_size != 0) s += ", head_dim " + std::to_string(m.head_size);
  if (m.qk_norm) s += m.qk_norm_whole ? ", q/k norms over the whole projections" : ", q/k norms";
  if (m.attention_sinks) s += ", attention sinks";
  if (m.rotary_fraction != 1) s += ", RoPE on " + std::to_string(static_cast<int>(std::lround(100 * m.rotary_fraction))) + "% of each head";
  if (m.parallel_attention) s += m.mlp_norms == 0 ? ", parallel attention + MLP (one norm)" : ", parallel attention + MLP";
  if (m.attn_norms == 2 || m.mlp_norms == 2) s += ", post-sublayer norms";
  if (m.embedding_norm) s += ", embedding norm";
  if (m.position_offset != 0) s += ", " + std::to_string(m.position_offset) + " offset position rows";
  if (m.mla.on()) {
    s += ", latent attention (q rank " + std::to_string(m.mla.q_lora_rank) + ", kv rank " + std::to_string(m.mla.kv_lora_rank) + ")";
  }
  if (m.moe.on()) {
    s += ", " + std::to_string(m.moe.experts) + " experts (top-" + std::to_string(m.moe.top_k) + ", width " +
         std::to_string(m.moe.ffn_hidden) + ", " + m.moe.router + " router";
    if (m.moe.router_logit_bias) s += " with a logit bias";
    if (m.moe.shared_ffn_hidden > 0) s += ", shared width " + std::to_string(m.moe.shared_ffn_hidden);
    s += ")";
    if (!m.moe.dense_layers.empty()) s += ", " + std::to_string(m.moe.dense_layers.size()) + " dense layers";
  }
  return s;
}

json to_json(const Model& m) {
  json j = {{"name", m.name},
            {"layers", m.layers},
            {"hidden", m.hidden},
            {"heads", m.heads},
            {"kv_heads", m.kv_heads},
            {"ffn_hidden", m.ffn_hidden},
            {"vocab", m.vocab},
            {"seq_len", m.seq_len},
            {"mlp", to_string(m.mlp)},
            {"norm", to_string(m.norm)},
            {"position", to_string(m.position)},
            {"tied_embeddings", m.tied_embeddings},
            {"bias", m.qkv_bias && m.out_bias && m.mlp_bias && m.norm_bias}};
  // The finer keys only where they say more than "bias" and the loader's defaults, so a model.json
  // written before they existed reads and writes back the same (and stores the same hashes).
  const bool all = j["bias"].get<bool>();
  if (m.qkv_bias != all) j["qkv_bias"] = m.qkv_bias;
  if (m.out_bias != all) j["out_bias"] = m.out_bias;
  if (m.mlp_bias != all) j["mlp_bias"] = m.mlp_bias;
  if (m.norm_bias != all) j["norm_bias"] = m.norm_bias;
  if (m.lm_head_bias) j["lm_head_bias"] = true;
  if (m.head_size != 0) j["head_dim"] = m.head_size;
  if (m.qk_norm) j["qk_norm"] = true;
  if (m.qk_norm_whole) j["qk_norm_span"] = "projection";
  if (m.attention_sinks) j["attention_sinks"] = true;
  if (m.rotary_fraction != 1) j["rotary_fraction"] = m.rotary_fraction;
  if (m.parallel_attention) j["parallel_attention"] = true;
  if (m.attn_norms != 1) j["attn_norms"] = m.attn_norms;
  if (m.mlp_norms != 1) j["mlp_norms"] = m.mlp_norms;
  if (m.embedding_norm) j["embedding_norm"] = true;
  if (m.position_offset != 0) j["position_offset"] = m.position_offset;
  if (m.norm_eps != 1e-5) j["norm_eps"] = m.norm_eps;
  if (m.rope_theta != 10000) j["rope_theta"] = m.rope_theta;
  if (m.gelu_exact) j["gelu_approx"] = "none";
  if (!m.rope_scaling.empty()) j["rope_scaling"] = m.rope_scaling;
  if (m.sliding_window != 0) j["sliding_window"] = m.sliding_window;
  if (!m.sliding_window_layers.empty()) j["sliding_window_layers"] = m.sliding_window_layers;
  // max_positions only where it says more than the loader's default (learned: seq_len; RoPE: none),
  // so a model.json read and written back is the same file.
  if (m.max_positions > 0 && m.max_positions != (m.position == Position::kLearned ? m.seq_len : 0)) {
    j["max_positions"] = m.max_positions;
  }
  if (m.moe.on()) {
    json e = {{"experts", m.moe.experts}, {"experts_per_token", m.moe.top_k}, {"expert_ffn_hidden", m.moe.ffn_hidden}};
    if (m.moe.shared_ffn_hidden != 0) e["shared_ffn_hidden"] = m.moe.shared_ffn_hidden;
    if (m.moe.shared_gate) e["shared_gate"] = true;
    if (!m.moe.dense_layers.empty()) e["dense_layers"] = m.moe.dense_layers;
    if (m.moe.router != "softmax") e["router"] = m.moe.router;
    if (m.moe.router_bias) e["router_bias"] = true;
    if (m.moe.router_logit_bias) e["router_logit_bias"] = true;
    if (!m.moe.normalize_top_k) e["normalize_top_k"] = false;
    if (m.moe.router_scaling != 1.0) e["router_scaling"] = m.moe.router_scaling;
    if (m.moe.router_groups > 0) {
      e["router_groups"] = m.moe.router_groups;
      e["router_group_top_k"] = m.moe.router_group_top_k;
    }
    j["moe"] = e;
  }
  if (m.mla.on()) {
    j["mla"] = {{"q_lora_rank", m.mla.q_lora_rank}, {"kv_lora_rank", m.mla.kv_lora_rank},
                {"qk_nope_head_dim", m.mla.qk_nope_head_dim}, {"qk_rope_head_dim", m.mla.qk_rope_head_dim},
                {"v_head_dim", m.mla.v_head_dim}};
  }
  if (!m.source.empty()) j["source"] = m.source;
  return j;
}

}  // namespace stagecraft::spec
