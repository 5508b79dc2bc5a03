// Model: the transformer being trained (SCHEMAS.md, model.json). GPT-style decoder-only stacks
// with GPT-2/3 choices (gelu MLP, LayerNorm, learned positions, biases, tied embeddings) or
// LLaMA choices (SwiGLU, RMSNorm, RoPE, GQA, no biases, untied head).
// load_model() also accepts a Hugging Face config.json of the GPT-2 or LLaMA family.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stagecraft::spec {

enum class Mlp { kGelu, kSwiglu };          // 2 matrices h->f->h, or 3 (gate, up, down)
enum class Norm { kLayerNorm, kRmsNorm };   // weight + bias (if bias), or weight only
enum class Position { kLearned, kRope };    // s x h table, or no parameters

struct Model {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;       // == heads without grouped-query attention
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;
  Mlp mlp = Mlp::kGelu;
  Norm norm = Norm::kLayerNorm;
  Position position = Position::kLearned;
  bool tied_embeddings = true;
  bool bias = true;           // biases on every linear and norm
  std::string source;         // where the values come from
  std::string file;           // the file it was loaded from ("" when built in code)
  // What the source file says that Stagecraft reads but does not model (Hugging Face keys such as
  // sliding_window); the command line prints each as a warning.
  std::vector<std::string> warnings;

  int64_t head_dim() const { return hidden / heads; }
  int64_t kv_dim() const { return kv_heads * head_dim(); }
};

// Loads a Stagecraft model.json or a Hugging Face config.json (detected by its keys).
Model load_model(const std::string& path);
// Parses and validates; `file` names the origin in error messages.
Model model_from_json(const nlohmann::json& j, const std::string& file);
// Hugging Face config.json (GPT-2: n_layer/n_embd/...; LLaMA: num_hidden_layers/hidden_size/...).
bool is_hf_config(const nlohmann::json& j);
Model model_from_hf_config(const nlohmann::json& j, const std::string& file);
// The key each field was read from, so a validation error points at the user's own key.
struct ModelKeys {
  std::string layers = "layers", hidden = "hidden", heads = "heads", kv_heads = "kv_heads",
              ffn_hidden = "ffn_hidden", vocab = "vocab", seq_len = "seq_len";
};
// Checks the invariants of a Model (positivity, divisibility); throws SpecError naming m.file.
void validate_model(const Model& m, const ModelKeys& keys = {});

nlohmann::json to_json(const Model& m);
const char* to_string(Mlp v);
const char* to_string(Norm v);
const char* to_string(Position v);

}  // namespace stagecraft::spec
