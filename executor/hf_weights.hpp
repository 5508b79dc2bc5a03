// Weights in and out in Hugging Face format: a folder of config.json, model.safetensors (or the
// sharded model.safetensors.index.json form) and generation_config.json, as transformers'
// save_pretrained writes it and from_pretrained reads it (docs/interop.md).
//
// Each Stagecraft tensor (core/count/tensors.hpp; row-major [in x out], y = x . W + b) is made of
// whole Hugging Face tensors ("pieces"), each covering a band of its columns:
//   family   ours                  Hugging Face (prefix transformer. / model.)      layout
//   gpt2     embedding.wte         wte.weight [V, h]                                same
//            embedding.wpe         wpe.weight [P, h]                                same
//            attn.norm1 / mlp.norm2 h.i.ln_1 / h.i.ln_2 .weight, .bias             same
//            attn.qkv [h, 3h]      h.i.attn.c_attn (Conv1D: weight [in, out])       same (q | k | v fused)
//            attn.out, mlp.up/down h.i.attn.c_proj, h.i.mlp.c_fc, h.i.mlp.c_proj    same (Conv1D)
//            head.normf            ln_f                                             same
//            head.lm_head [h, V]   lm_head.weight [V, h] (nn.Linear), untied only  transposed
//   llama    embedding.wte         embed_tokens.weight [V, h]                       same
//   (mistral attn.norm1 / mlp.norm2 layers.i.input_layernorm / post_attention_layernorm
//    qwen2)  attn.qkv [h, q+2kv]   layers.i.self_attn.q_proj | k_proj | v_proj      each transposed
//                                  (nn.Linear: weight [out, in]), .bias when present
//            attn.out [q, h]       layers.i.self_attn.o_proj                         transposed
//            mlp.gate/up/down      layers.i.mlp.gate_proj / up_proj / down_proj      transposed
//            head.normf            norm.weight;  head.lm_head: lm_head.weight        transposed
//   mixtral  as llama; mlp.router [h, E]  layers.i.block_sparse_moe.gate [E, h]     transposed
//            mlp.experts.gate / up / down [E·in, out], rows [e·in, (e+1)·in) of expert e:
//                                  block_sparse_moe.experts.e.w1 / w3 / w2          each transposed
//   qwen2_moe as qwen2; mlp.router  layers.i.mlp.gate [E, h]                         transposed
//            mlp.experts.*          layers.i.mlp.experts.e.gate_proj / up_proj / down_proj (as above)
//            mlp.shared.*           layers.i.mlp.shared_expert.gate_proj / up_proj / down_proj
//            mlp.shared_gate [h, 1] layers.i.mlp.shared_expert_gate [1, h]          transposed
//            a dense layer (mlp_only_layers) as qwen2
// A tied head has no lm_head tensor (transformers ties it to the embedding and does not save it).
//
// Import (HfReader) checks the whole checkpoint before any value is read: config.json describes
// the same model, every tensor the model needs is there with the expected shape, and nothing else
// is (buffers transformers never loads are ignored: GPT-2's attn.bias / attn.masked_bias,
// rotary_emb.inv_freq). Each rank then reads only the bytes of the values it keeps
// (StageState::init_params): direct pieces as row segments, transposed pieces as the segments of
// the Hugging Face rows its columns are. Errors throw spec::SpecError naming the tensor, the file,
// and the expected and found shapes.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/io/safetensors.hpp"
#include "core/spec/model.hpp"
#include "executor/model/params.hpp"

namespace stagecraft::executor::hf {

enum class Family { kGpt2, kLlama, kQwen2, kMixtral, kQwen2Moe, kOlmoe, kQwen3, kQwen3Moe, kMistral };
const char* to_string(Family f);

// The family whose modelling code computes `m` as the CPU executor does, or SpecError(m.file)
// naming what no family writes (ALiBi, parallel blocks, ...).
Family family_of(const spec::Model& m);

struct Piece {
  std::string name;        // the Hugging Face tensor
  int64_t col0 = 0;        // the band of our (unsharded) columns it fills
  int64_t cols = 0;
  bool transposed = false; // stored [cols, rows] (nn.Linear) rather than [rows, cols]
  std::vector<int64_t> shape;  // its shape as transformers writes it
  int64_t row0 = 0;        // the band of our (unsharded) rows it fills: [row0, row0 + rows), all when
  int64_t rows = -1;       // rows < 0 (a stacked expert tensor holds one piece per expert)
};
// Our tensor `name` (unsharded [rows x cols], count::TensorSpec's global shape) as Hugging Face
// tensors, in column order; empty for a tied head's copy of the table.
std::vector<Piece> pieces_of(const spec::Model& m, Family f, const count::TensorSpec& t);

// config.json of `m` for its family, with torch_dtype ("float32" or "bfloat16").
nlohmann::json config_json(const spec::Model& m, const std::string& torch_dtype);

// Reads our tensors' values from a checkpoint folder (see the top of this file).
class HfReader : public ParamSource {
 public:
  // Checks DIR/config.json against `m` and every tensor's name and shape (headers only).
  HfReader(const spec::Model& m, std::string dir);
  void read(const TensorSlot& t, int64_t lo, int64_t hi, std::span<float> out) override;
  int64_t bytes_read() const { return folder_.bytes_read(); }
  Family family() const { return family_; }

 private:
  struct Resolved {
    Piece piece;
    io::safetensors::File* file = nullptr;
    const io::safetensors::TensorInfo* info = nullptr;
  };
  spec::Model model_;
  Family family_;
  io::safetensors::Folder folder_;
  std::map<std::string, std::vector<Resolved>> pieces_;  // by our tensor name
};

// Writes `values` (the whole model, in ParamLayout(m)'s order: model_params.hpp) to DIR as
// config.json, model.safetensors (`dtype` kF32 or kBF16) and generation_config.json, each file
// through io::AtomicFile. Throws SpecError naming the folder when it cannot be written.
void write_folder(const spec::Model& m, std::span<const float> values, const std::string& dir, io::safetensors::Dtype dtype);

}  // namespace stagecraft::executor::hf
