// Small specs for the Program tests, built in code so each test shows its numbers.
#pragma once

#include <nlohmann/json.hpp>

#include "core/program/lower.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::program::test {

// GPT-style: h = 64, 4 heads, ffn 256, vocab 128, seq 16.
inline spec::Model gpt(int64_t layers, bool tied = true) {
  return spec::model_from_json({{"name", "gpt"}, {"layers", layers}, {"hidden", 64}, {"heads", 4}, {"vocab", 128},
                                {"seq_len", 16}, {"tied_embeddings", tied}},
                               "gpt.json");
}

// framework: training.json's "framework" value (null: absent, the default).
inline spec::Training training(int64_t global_batch, const nlohmann::json& framework = nullptr) {
  nlohmann::json j = {{"global_batch", global_batch}, {"dtype", "bf16"}};
  if (!framework.is_null()) j["framework"] = framework;
  return spec::training_from_json(j, "training.json");
}

// A plan from JSON; global batch = micro_batch * micro_batches * dp.
inline Program lower_json(const spec::Model& m, const nlohmann::json& plan_json, const nlohmann::json& framework = nullptr) {
  spec::Plan p = spec::plan_from_json(plan_json, "plan.json");
  return lower(m, training(p.micro_batch * p.micro_batches * p.dp, framework), p);
}

}  // namespace stagecraft::program::test
