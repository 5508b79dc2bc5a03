// Training: what the user fixes (SCHEMAS.md, training.json): the global batch in sequences, the
// compute format and the optimizer. Mixed precision keeps fp32 master weights and Adam moments
// (ZeRO's K = 12 bytes per parameter) whenever dtype is 16-bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/spec/dtype.hpp"
#include "core/spec/framework.hpp"

namespace stagecraft::spec {

enum class Optimizer { kAdam, kAdamW };
// How the model code runs its memory-bound layer work (sim/models/work.hpp has the bytes):
// fused kernels as Megatron-LM writes them (scale-mask-softmax, bias-GeLU, bias-dropout-add), or
// PyTorch eager ops one by one, as minGPT and Hugging Face's BERT/RoBERTa/GPT-2 modules do.
enum class Kernels { kFused, kEager };

struct Training {
  int64_t global_batch = 0;   // sequences per optimizer step, over all data-parallel ranks
  Dtype dtype = Dtype::kBf16;
  Optimizer optimizer = Optimizer::kAdam;
  // How the framework issues its data-parallel collectives (framework.hpp); "framework" in
  // training.json, a name or {"name": ..., "reduce_dtype": ...}.
  Framework framework = Framework::kDeepSpeed;
  std::optional<Dtype> reduce_dtype;   // the framework's gradient-collective dtype, when set
  Kernels kernels = Kernels::kFused;   // "kernels": "fused" (default) or "eager"
  std::string source;
  std::string file;

  // The framework's profile with this file's overrides; gradient collectives' element bytes.
  FrameworkProfile framework_profile() const;
  int64_t reduce_bytes() const;
};

Training load_training(const std::string& path);
Training training_from_json(const nlohmann::json& j, const std::string& file);
nlohmann::json to_json(const Training& t);
const char* to_string(Optimizer o);

}  // namespace stagecraft::spec
