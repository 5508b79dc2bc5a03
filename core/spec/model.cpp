#include "core/spec/model.hpp"

#include <filesystem>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::spec {

using nlohmann::json;

namespace {

Mlp parse_mlp(const std::string& s) { return s == "swiglu" ? Mlp::kSwiglu : Mlp::kGelu; }
Norm parse_norm(const std::string& s) { return s == "rmsnorm" ? Norm::kRmsNorm : Norm::kLayerNorm; }
Position parse_position(const std::string& s) { return s == "rope" ? Position::kRope : Position::kLearned; }

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

const char* to_string(Mlp v) { return v == Mlp::kSwiglu ? "swiglu" : "gelu"; }
const char* to_string(Norm v) { return v == Norm::kRmsNorm ? "rmsnorm" : "layernorm"; }
const char* to_string(Position v) { return v == Position::kRope ? "rope" : "learned"; }

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
  if (m.hidden % m.heads != 0) {
    throw SpecError(m.file, "/" + k.hidden,
                    "expected a multiple of " + k.heads + " (" + std::to_string(m.heads) + "), got " +
                        std::to_string(m.hidden));
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    throw SpecError(m.file, "/" + k.kv_heads,
                    "expected a divisor of " + k.heads + " (" + std::to_string(m.heads) + "), got " +
                        std::to_string(m.kv_heads));
  }
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
  m.mlp = parse_mlp(r.choice_or("mlp", {"gelu", "swiglu"}, "gelu"));
  // GPT's MLP is 4h wide; a SwiGLU width is a design choice (LLaMA rounds 8h/3), so it is required.
  if (m.mlp == Mlp::kSwiglu && !r.has("ffn_hidden")) {
    r.fail("ffn_hidden", "the MLP width (required with \"mlp\": \"swiglu\")");
  }
  m.ffn_hidden = r.integer_or("ffn_hidden", m.hidden <= limits::kHidden ? 4 * m.hidden : 0);  // 0: hidden is refused first
  m.vocab = r.integer("vocab");
  m.seq_len = r.integer("seq_len");
  m.norm = parse_norm(r.choice_or("norm", {"layernorm", "rmsnorm"}, "layernorm"));
  m.position = parse_position(r.choice_or("position", {"learned", "rope"}, "learned"));
  m.tied_embeddings = r.boolean_or("tied_embeddings", true);
  m.bias = r.boolean_or("bias", true);
  // A learned position table has as many rows as the longest sequence; without max_positions that
  // is seq_len. RoPE has no table, so without the key it sets no limit.
  m.max_positions = r.integer_or("max_positions", m.position == Position::kLearned ? m.seq_len : 0);
  if (r.has("max_positions") && m.max_positions < 1) r.fail_value("max_positions", "a positive number of tokens");
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
            {"bias", m.bias}};
  // max_positions only where it says more than the loader's default (learned: seq_len; RoPE: none),
  // so a model.json read and written back is the same file.
  if (m.max_positions > 0 && m.max_positions != (m.position == Position::kLearned ? m.seq_len : 0)) {
    j["max_positions"] = m.max_positions;
  }
  if (!m.source.empty()) j["source"] = m.source;
  return j;
}

}  // namespace stagecraft::spec
