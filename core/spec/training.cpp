#include "core/spec/training.hpp"

#include "core/spec/json_reader.hpp"

namespace stagecraft::spec {

using nlohmann::json;

const char* to_string(Optimizer o) { return o == Optimizer::kAdamW ? "adamw" : "adam"; }

Training training_from_json(const json& j, const std::string& file) {
  ObjectReader r(j, file, "");
  Training t;
  t.file = file;
  t.global_batch = r.integer("global_batch");
  if (t.global_batch < 1) r.fail_value("global_batch", "a positive number of sequences");
  t.dtype = *parse_dtype(r.choice("dtype", {"fp16", "bf16", "fp32"}));
  t.optimizer = r.choice_or("optimizer", {"adam", "adamw"}, "adam") == "adamw" ? Optimizer::kAdamW
                                                                            : Optimizer::kAdam;
  t.source = r.string_or("source", "");
  r.finish();
  return t;
}

Training load_training(const std::string& path) { return training_from_json(read_json_file(path), path); }

json to_json(const Training& t) {
  json j = {{"global_batch", t.global_batch}, {"dtype", to_string(t.dtype)}, {"optimizer", to_string(t.optimizer)}};
  if (!t.source.empty()) j["source"] = t.source;
  return j;
}

}  // namespace stagecraft::spec
