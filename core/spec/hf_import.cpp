// Hugging Face config.json import for the GPT-2 and LLaMA families. HF configs carry many keys
// Stagecraft has no use for (dropout, token ids, rope scaling), so unknown keys are ignored here;
// the keys that define the shapes are required and type-checked like any spec.
#include <algorithm>
#include <filesystem>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/model.hpp"

namespace stagecraft::spec {

using nlohmann::json;

namespace {

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

// A config's max_position_embeddings (n_positions) is the longest sequence the model takes, not the
// length it is trained at (Llama-3.1 says 131072; Mistral-7B 32768). Without a training length
// from the training file or --seq-len, it is planned at min(limit, kDefaultHfSeqLen), and says so.
void set_positions(Model& m, int64_t limit, const std::string& key) {
  m.max_positions = limit;
  m.seq_len = std::min(limit, kDefaultHfSeqLen);
  if (limit > kDefaultHfSeqLen) {
    m.warnings.push_back(m.file + ": /" + key + ": " + std::to_string(limit) +
                         " is the longest sequence the model takes, not a training length: unless the training "
                         "file's seq_len or --seq-len sets one, it is planned at " +
                         std::to_string(kDefaultHfSeqLen) + " tokens a sequence");
  }
}

Model from_gpt2(const json& j, const std::string& file) {
  ObjectReader r(j, file, "");
  Model m;
  m.file = file;
  m.name = hf_name(j, file);
  m.layers = r.integer("n_layer");
  m.hidden = r.integer("n_embd");
  m.heads = r.integer("n_head");
  m.kv_heads = m.heads;
  m.ffn_hidden = present(j, "n_inner") ? r.integer("n_inner") : m.hidden <= limits::kHidden ? 4 * m.hidden : 0;  // null means 4h
  m.vocab = r.integer("vocab_size");
  set_positions(m, r.integer("n_positions"), "n_positions");
  if (present(j, "activation_function")) {
    std::string act = r.string("activation_function");
    if (act.rfind("gelu", 0) != 0) r.fail_value("activation_function", "a GELU variant (\"gelu_new\", \"gelu\")");
  }
  m.mlp = Mlp::kGelu;
  m.norm = Norm::kLayerNorm;
  m.position = Position::kLearned;
  m.tied_embeddings = present(j, "tie_word_embeddings") ? r.boolean("tie_word_embeddings") : true;
  m.bias = true;
  m.source = "Hugging Face GPT-2 config.json (" + file + ")";
  ModelKeys keys{"n_layer", "n_embd", "n_head", "n_head", "n_inner", "vocab_size", "n_positions", "n_positions"};
  validate_model(m, keys);
  return m;
}

Model from_llama(const json& j, const std::string& file) {
  ObjectReader r(j, file, "");
  Model m;
  m.file = file;
  m.name = hf_name(j, file);
  m.layers = r.integer("num_hidden_layers");
  m.hidden = r.integer("hidden_size");
  m.heads = r.integer("num_attention_heads");
  m.kv_heads = present(j, "num_key_value_heads") ? r.integer("num_key_value_heads") : m.heads;
  m.ffn_hidden = r.integer("intermediate_size");
  m.vocab = r.integer("vocab_size");
  set_positions(m, r.integer("max_position_embeddings"), "max_position_embeddings");
  // head_dim other than hidden_size / num_attention_heads (Mistral-NeMo: 128, not 5120 / 32 = 160)
  // changes every attention shape; counting it as hidden / heads gave 12.77 B for a 12.25 B model.
  if (present(j, "head_dim") && m.heads > 0 && r.integer("head_dim") * m.heads != m.hidden) {
    r.fail_value("head_dim", "hidden_size / num_attention_heads = " + std::to_string(m.hidden) + " / " +
                                 std::to_string(m.heads) + " (Stagecraft does not yet model attention of another width)");
  }
  if (present(j, "sliding_window")) {
    m.warnings.push_back(file + ": /sliding_window: " + describe(j["sliding_window"]) +
                         " is not modelled: attention is costed over the whole sequence");
  }
  if (present(j, "rope_scaling")) {
    m.warnings.push_back(file + ": /rope_scaling: noted; it changes no cost Stagecraft models");
  }
  if (present(j, "hidden_act")) {
    std::string act = r.string("hidden_act");
    if (act != "silu" && act != "swish") r.fail_value("hidden_act", "\"silu\" (SwiGLU MLP)");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (present(j, key) && r.boolean(key)) {
      r.fail_value(key, "false (Stagecraft models LLaMA-family layers without biases)");
    }
  }
  m.mlp = Mlp::kSwiglu;
  m.norm = Norm::kRmsNorm;
  m.position = Position::kRope;
  m.tied_embeddings = present(j, "tie_word_embeddings") ? r.boolean("tie_word_embeddings") : false;
  m.bias = false;
  m.source = "Hugging Face LLaMA config.json (" + file + ")";
  ModelKeys keys{"num_hidden_layers",  "hidden_size", "num_attention_heads", "num_key_value_heads",
                 "intermediate_size", "vocab_size",  "max_position_embeddings", "max_position_embeddings"};
  validate_model(m, keys);
  return m;
}

}  // namespace

bool is_hf_config(const json& j) {
  return j.is_object() && (j.contains("model_type") || j.contains("n_layer") ||
                           j.contains("num_hidden_layers") || j.contains("architectures"));
}

Model model_from_hf_config(const json& j, const std::string& file) {
  // model_type must name a family whose layers these shapes describe exactly: a config without it
  // (or with a number there) is not read as LLaMA by guesswork.
  if (!j.contains("model_type") || !j["model_type"].is_string()) {
    throw SpecError(file, "/model_type",
                    std::string(j.contains("model_type") ? "expected a string" : "missing") +
                        ": a Hugging Face config names its family (\"gpt2\", \"llama\" or \"mistral\" are read)" +
                        (j.contains("model_type") ? ", got " + describe(j["model_type"]) : ""));
  }
  const std::string type_name = j["model_type"].get<std::string>();
  // Mixture-of-experts layers (Mixtral, Qwen-MoE, DeepSeek-V2/V3, DBRX, OLMoE, Jamba) route each token
  // to k of E expert MLPs: parameters, FLOPs and the all-to-all traffic differ from a dense block,
  // and none of that is modelled, so such a config is refused by name rather than counted dense.
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size"}) {
    if (present(j, key)) {
      throw SpecError(file, std::string("/") + key,
                      "a mixture-of-experts config (model_type " + describe(j["model_type"]) +
                          "): Stagecraft does not model expert layers yet; dense models only");
    }
  }
  for (const char* moe : {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx", "olmoe", "jamba",
                          "granitemoe", "phimoe"}) {
    if (type_name == moe) {
      throw SpecError(file, "/model_type",
                      "\"" + type_name + "\" is a mixture-of-experts family: Stagecraft does not model expert layers "
                      "yet; dense models only");
    }
  }
  if (j.contains("n_layer") && (type_name.empty() || type_name == "gpt2")) return from_gpt2(j, file);
  if (j.contains("num_hidden_layers") &&
      (type_name.empty() || type_name == "llama" || type_name == "mistral")) {
    return from_llama(j, file);
  }
  std::string type = j.contains("model_type") ? describe(j["model_type"]) : "unknown";
  throw SpecError(file, "/model_type",
                  "expected a GPT-2 (n_layer, n_embd, ...) or LLaMA (num_hidden_layers, hidden_size, ...) "
                  "family config (model_type \"gpt2\", \"llama\" or \"mistral\"), got model_type " + type);
}

}  // namespace stagecraft::spec
