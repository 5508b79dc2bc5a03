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
  // The training sequence length in tokens: model.json's seq_len (or, for a Hugging Face config,
  // min(max_position_embeddings, kDefaultHfSeqLen)) until a training file's seq_len or --seq-len
  // replaces it (with_training_length).
  int64_t seq_len = 0;
  // The longest sequence the model takes (Hugging Face max_position_embeddings / n_positions;
  // model.json's max_positions): a limit on seq_len, and the rows of a learned position table.
  // 0: no limit declared (RoPE models built in code or from a model.json without the key).
  int64_t max_positions = 0;
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
  // Rows of the learned position table: max_positions when declared, else seq_len.
  int64_t position_rows() const { return max_positions > 0 ? max_positions : seq_len; }
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
              ffn_hidden = "ffn_hidden", vocab = "vocab", seq_len = "seq_len", max_positions = "max_positions";
};
// The training length a Hugging Face config is planned at when nothing sets one: its
// max_position_embeddings when at most this, else this (with a warning naming --seq-len).
inline constexpr int64_t kDefaultHfSeqLen = 8192;
// Checks the invariants of a Model (positivity, divisibility); throws SpecError naming m.file.
void validate_model(const Model& m, const ModelKeys& keys = {});

struct Training;
// The model as a training run sees it: seq_len replaced by the training's seq_len when that is set
// (the training file's "seq_len" or --seq-len). Throws SpecError naming the training file when the
// length exceeds max_positions (for a learned table without max_positions: its seq_len rows).
Model with_training_length(Model m, const Training& t);

nlohmann::json to_json(const Model& m);
const char* to_string(Mlp v);
const char* to_string(Norm v);
const char* to_string(Position v);

}  // namespace stagecraft::spec
