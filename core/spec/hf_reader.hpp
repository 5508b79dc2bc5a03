// The Hugging Face config.json readers' shared parts (hf_import.cpp, hf_import_moe.cpp): a family's
// Reader (the config, its ObjectReader, the Model being built and the keys each field came from),
// and the family readers one file hands the other. Internal to core/spec.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/model.hpp"

namespace stagecraft::spec::hf {

using nlohmann::json;

inline bool present(const json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

inline std::string hf_name(const json& j, const std::string& file) {
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

// The dense families' readers (hf_import.cpp) that a mixture-of-experts family builds on.
Model from_qwen(const json& j, const std::string& file, bool qwen3);

// The mixture-of-experts families (hf_import_moe.cpp).
Model from_mixtral(const json& j, const std::string& file);
Model from_qwen_moe(const json& j, const std::string& file, bool qwen3);
Model from_olmoe(const json& j, const std::string& file);
Model from_dbrx(const json& j, const std::string& file);
Model from_gpt_oss(const json& j, const std::string& file);
Model from_deepseek(const json& j, const std::string& file, bool v3);

}  // namespace stagecraft::spec::hf
