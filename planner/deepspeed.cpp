#include "planner/deepspeed.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "core/spec/limits.hpp"
#include "planner/space.hpp"

namespace stagecraft::planner {

using nlohmann::json;

namespace {

constexpr const char* kPipelineZero =
    "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism";   // deepspeed/runtime/pipe/engine.py

bool uniform_split(const spec::Plan& p) {
  if (p.stage_layers.empty()) return false;
  int64_t total = 0;
  for (int64_t l : p.stage_layers) total += l;
  const auto n = static_cast<int64_t>(p.stage_layers.size());
  for (int64_t s = 0; s < n; ++s) {
    if (p.stage_layers[static_cast<std::size_t>(s)] != total / n + (s < total % n ? 1 : 0)) return false;
  }
  return true;
}

json zero_section(const spec::ZeroConfig& z, int64_t dp) {
  json j = {{"stage", z.stage},
          {"overlap_comm", z.overlap_comm},
          {"contiguous_gradients", true},
          {"reduce_scatter", true},
          {"reduce_bucket_size", z.reduce_bucket},
          {"allgather_bucket_size", z.allgather_bucket},
          {"stage3_prefetch_bucket_size", z.prefetch_bucket},
          {"stage3_max_live_parameters", z.max_live_parameters},
          {"stage3_max_reuse_distance", z.max_reuse_distance},
          {"stage3_param_persistence_threshold", z.param_persistence_threshold},
          {"offload_optimizer", {{"device", z.offload_optimizer == spec::Offload::kCpu ? "cpu" : "none"}, {"pin_memory", true}}},
          {"offload_param", {{"device", z.offload_param == spec::Offload::kCpu ? "cpu" : "none"}, {"pin_memory", true}}}};
  // ZeRO++ and MiCS, as read_zeropp reads them
  if (z.hpz_group > 1) j["zero_hpz_partition_size"] = z.hpz_group;
  if (z.quantized_weights.on()) j["zero_quantized_weights"] = true;
  if (z.quantized_gradients.on()) j["zero_quantized_gradients"] = true;
  if (spec::hierarchical(z, dp)) j["mics_shard_size"] = z.shard_group;
  if (z.hierarchical_gather) j["mics_hierarchical_params_gather"] = true;
  return j;
}

std::vector<std::string> export_warnings(const spec::Plan& p) {
  std::vector<std::string> w;
  if (p.pp > 1 && p.zero.stage >= 2) {
    w.push_back("pipeline parallelism (pp = " + std::to_string(p.pp) + ") with ZeRO stage " + std::to_string(p.zero.stage) +
                ": DeepSpeed's pipeline engine refuses it (\"" + kPipelineZero +
                "\", deepspeed/runtime/pipe/engine.py); run this plan with Stagecraft's executor (stagecraft run), "
                "or choose ZeRO stage 0 or 1 for DeepSpeed");
  }
  if (p.pp > 1 && p.schedule != spec::Schedule::k1F1B) {
    w.push_back(std::string("schedule \"") + spec::to_string(p.schedule) +
                "\": DeepSpeed's pipeline engine runs 1F1B (TrainSchedule) only; the exported stage count runs as 1F1B");
  }
  if (p.sequence_parallel) {
    w.push_back("sequence parallelism: DeepSpeed's AutoTP does not split norms and dropout over the sequence; "
                "it needs a Megatron-style model (Megatron-DeepSpeed)");
  }
  if (p.recompute == spec::Recompute::kSelective) {
    w.push_back("selective recompute: DeepSpeed has no config key for it; checkpoint attention in the model code "
                "(Megatron's --recompute-granularity selective)");
  }
  if (!p.stage_layers.empty() && !uniform_split(p)) {
    w.push_back("stage split: DeepSpeed's partition methods are \"parameters\", \"uniform\" and \"type:<regex>\"; this "
                "plan's split is in stagecraft.plan.stage_layers");
  }
  return w;
}

// ---- import -------------------------------------------------------------------------------------

// Reads DeepSpeed's keys without rejecting the many others a ds_config may hold.
class DsReader {
 public:
  DsReader(const json& root, std::string file, std::vector<std::string>& defaults)
      : root_(root), file_(std::move(file)), defaults_(defaults) {}

  const json* at(const std::string& pointer) const {
    const json::json_pointer p(pointer);
    return root_.contains(p) ? &root_.at(p) : nullptr;
  }
  [[noreturn]] void fail(const std::string& pointer, const std::string& detail) const {
    throw spec::SpecError(file_, pointer, detail);
  }
  // An element count or size: a number (5e8 is fine), "auto" or absent takes the default.
  std::optional<int64_t> count(const std::string& pointer, std::optional<int64_t> fallback, const std::string& what) {
    const json* v = at(pointer);
    if (v == nullptr || (v->is_string() && v->get<std::string>() == "auto")) {
      if (fallback) note(pointer, what + (v ? " (\"auto\")" : ""), *fallback);
      return fallback;
    }
    if (!v->is_number()) fail(pointer, "expected a number, got " + spec::describe(*v));
    const double d = v->get<double>();
    if (!(d >= 0) || std::floor(d) != d) fail(pointer, "expected a non-negative integer, got " + spec::describe(*v));
    if (d > 0x1p53) fail(pointer, "expected at most 2^53, got " + spec::describe(*v));
    return static_cast<int64_t>(d);
  }
  bool flag(const std::string& pointer, bool fallback, const std::string& what) {
    const json* v = at(pointer);
    if (v == nullptr) {
      defaults_.push_back(dotted(pointer) + ": " + what + " " + (fallback ? "true" : "false"));
      return fallback;
    }
    if (!v->is_boolean()) fail(pointer, "expected true or false, got " + spec::describe(*v));
    return v->get<bool>();
  }
  std::string text(const std::string& pointer, const std::string& fallback) const {
    const json* v = at(pointer);
    if (v == nullptr) return fallback;
    if (!v->is_string()) fail(pointer, "expected a string, got " + spec::describe(*v));
    return v->get<std::string>();
  }
  const std::string& file() const { return file_; }

 private:
  static std::string dotted(const std::string& pointer) {
    std::string key = pointer.substr(1);
    std::replace(key.begin(), key.end(), '/', '.');
    return key;
  }
  void note(const std::string& pointer, const std::string& what, int64_t value) {
    defaults_.push_back(dotted(pointer) + ": " + what + " " + short_elems(value));
  }

  const json& root_;
  std::string file_;
  std::vector<std::string>& defaults_;
};

// Top-level keys DeepSpeed reads: deepspeed/runtime/config.py with constants.py, and the section
// parsers it calls (zero/config.py, activation_checkpointing/config.py, profiling/config.py,
// monitor/config.py, comm/config.py, compression/config.py, data_pipeline/config.py,
// elasticity/config.py, autotuning/config.py, nebula/config.py, swap_tensor/aio_config.py,
// checkpoint_engine, hybrid_engine, compile). DeepSpeed ignores any other top-level key.
const std::vector<std::string>& deepspeed_keys() {
  static const std::vector<std::string> keys = {
      "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "steps_per_print",
      "dump_state", "disable_allgather", "communication_data_type", "seq_parallel_communication_data_type",
      "prescale_gradients", "gradient_predivide_factor", "sparse_gradients", "zero_optimization",
      "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "gradient_clipping", "graph_harvesting",
      "fp16", "bf16", "bfloat16", "amp", "torch_autocast", "optimizer", "scheduler", "wall_clock_breakdown",
      "memory_breakdown", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger",
      "activation_checkpointing", "sparse_attention", "pipeline", "progressive_layer_drop", "eigenvalue",
      "quantize_training", "compression_training", "data_efficiency", "curriculum_learning", "checkpoint",
      "data_types", "aio", "elasticity", "autotuning", "nebula", "dataloader_drop_last", "hybrid_engine",
      "weight_quantization", "tensor_parallel", "use_data_before_expert_parallelism", "compile", "timers",
      "fp16_master_weights_and_grads", "zenflow", "vocabulary_size", "load_universal_checkpoint"};
  return keys;
}

// DeepSpeedZeroConfig's fields and their aliases (deepspeed/runtime/zero/config.py; populate_by_name,
// so both spellings of the stage-3 keys are accepted). DeepSpeed refuses any other key (extra="forbid").
const std::vector<std::string>& zero_keys() {
  static const std::vector<std::string> keys = {
      "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
      "allgather_partitions", "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights",
      "elastic_checkpoint", "offload_param", "offload_optimizer", "zenflow", "sub_group_size", "cpu_offload_param",
      "cpu_offload_use_pin_memory", "cpu_offload", "stage3_prefetch_bucket_size", "prefetch_bucket_size",
      "stage3_param_persistence_threshold", "param_persistence_threshold", "stage3_model_persistence_threshold",
      "model_persistence_threshold", "stage3_max_live_parameters", "max_live_parameters",
      "stage3_max_reuse_distance", "max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
      "gather_16bit_weights_on_model_save", "stage3_module_granularity_threshold", "module_granularity_threshold",
      "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params", "stage3_allgather_sequential",
      "allgather_sequential", "stage3_gather_fp16_weights_on_model_save", "ignore_unused_parameters",
      "legacy_stage1", "round_robin_gradients", "zero_hpz_partition_size", "zero_quantized_weights",
      "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size",
      "mics_hierarchical_params_gather", "memory_efficient_linear", "pipeline_loading_checkpoint",
      "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks",
      "save_muon_momentum_buffer_in_memory", "leaf_module"};
  return keys;
}

std::string suggestion(const std::string& key, const std::vector<std::string>& known) {
  const std::optional<std::string> near = spec::did_you_mean(key, known);
  return near ? " (did you mean \"" + *near + "\"?)" : "";
}

// The config as the readers below expect it: unknown keys checked, DeepSpeed's legacy boolean
// zero_optimization expanded, the short spellings of the stage-3 keys renamed to the long ones.
json normalized(const json& ds, const std::string& file, std::vector<std::string>& notes, std::vector<std::string>& warnings) {
  json out = ds;
  for (const auto& [key, value] : ds.items()) {
    if (key == "stagecraft" || std::find(deepspeed_keys().begin(), deepspeed_keys().end(), key) != deepspeed_keys().end()) {
      continue;
    }
    warnings.push_back("\"" + key + "\": not a key DeepSpeed reads, so DeepSpeed ignores it and so does this import" +
                       suggestion(key, deepspeed_keys()));
  }
  for (const char* section : {"fp16", "bf16", "bfloat16", "pipeline", "optimizer", "tensor_parallel", "activation_checkpointing"}) {
    if (ds.contains(section) && !ds.at(section).is_object()) {
      throw spec::SpecError(file, std::string("/") + section,
                            std::string("expected an object") +
                                (std::string(section).find("16") != std::string::npos ? " such as {\"enabled\": true}" : "") +
                                ", got " + spec::describe(ds.at(section)));
    }
  }
  if (ds.contains("zero_optimization")) {
    const json& z = ds.at("zero_optimization");
    if (z.is_boolean()) {
      // read_zero_config_deprecated: true is stage 1 with allgather_bucket_size = allgather_size.
      json expanded = {{"stage", z.get<bool>() ? 1 : 0}};
      if (z.get<bool>() && ds.contains("allgather_size")) expanded["allgather_bucket_size"] = ds.at("allgather_size");
      notes.push_back(std::string("zero_optimization: ") + (z.get<bool>() ? "true" : "false") +
                      ", DeepSpeed's deprecated form of stage " + (z.get<bool>() ? "1" : "0"));
      out["zero_optimization"] = expanded;
    } else if (!z.is_object()) {
      throw spec::SpecError(file, "/zero_optimization", "expected an object such as {\"stage\": 3}, got " + spec::describe(z));
    } else {
      for (const auto& [key, value] : z.items()) {
        if (std::find(zero_keys().begin(), zero_keys().end(), key) == zero_keys().end()) {
          throw spec::SpecError(file, "/zero_optimization/" + key,
                                "not a key of DeepSpeed's ZeRO config, which refuses keys it does not define (pydantic "
                                "extra=\"forbid\", deepspeed/runtime/config_utils.py)" + suggestion(key, zero_keys()));
        }
      }
      for (const char* name : {"prefetch_bucket_size", "param_persistence_threshold", "max_live_parameters",
                               "max_reuse_distance", "model_persistence_threshold"}) {
        const std::string long_name = std::string("stage3_") + name;
        if (!z.contains(name)) continue;
        if (z.contains(long_name)) {
          throw spec::SpecError(file, "/zero_optimization/" + std::string(name),
                                "given twice, as \"" + std::string(name) + "\" and \"" + long_name + "\"; keep one");
        }
        out["zero_optimization"][long_name] = z.at(name);
        out["zero_optimization"].erase(name);
      }
    }
  }
  return out;
}

spec::Dtype read_dtype(DsReader& r, const HfTrainerArgs& hf, std::vector<std::string>& notes) {
  auto enabled = [&](const char* section) {
    const json* v = r.at(std::string("/") + section + "/enabled");
    if (v == nullptr) return false;
    if (v->is_string() && v->get<std::string>() == "auto") {
      const bool on = std::string(section) == "fp16" ? hf.fp16 : hf.bf16;
      const std::string flag = std::string(section) == "fp16" ? "fp16" : "bf16";
      notes.push_back(std::string(section) + ".enabled: \"auto\", which the Hugging Face Trainer fills from "
                      "TrainingArguments." + flag + " (its --" + flag + " flag, false unless given): " +
                      (on ? "true" : "false") + "; write true or false for the precision your run uses");
      return on;
    }
    if (!v->is_boolean()) r.fail(std::string("/") + section + "/enabled", "expected true or false, got " + spec::describe(*v));
    return v->get<bool>();
  };
  const bool fp16 = enabled("fp16");
  const bool bf16 = enabled("bf16") || enabled("bfloat16");
  if (fp16 && bf16) r.fail("/bf16/enabled", "bfloat16 and fp16 modes cannot be simultaneously enabled (DeepSpeed's own check)");
  return fp16 ? spec::Dtype::kFp16 : bf16 ? spec::Dtype::kBf16 : spec::Dtype::kFp32;
}

// DeepSpeedConfig._set_batch_related_parameters, then _batch_assertion, with world = dp.
void read_batch(DsReader& r, int64_t dp, const HfTrainerArgs& hf, spec::Plan& p, spec::Training& t,
                std::vector<std::string>& notes) {
  const auto is_auto = [&r](const char* pointer) {
    const json* v = r.at(pointer);
    return v != nullptr && v->is_string() && v->get<std::string>() == "auto";
  };
  // "auto": what the Hugging Face Trainer fills in (trainer_config_process), before DeepSpeed reads it.
  std::optional<int64_t> micro = r.count("/train_micro_batch_size_per_gpu", std::nullopt, "");
  std::optional<int64_t> gas = r.count("/gradient_accumulation_steps", std::nullopt, "");
  std::optional<int64_t> train = r.count("/train_batch_size", std::nullopt, "");
  if (is_auto("/train_micro_batch_size_per_gpu")) {
    micro = hf.per_device_train_batch_size;
    notes.push_back("train_micro_batch_size_per_gpu: \"auto\", which the Hugging Face Trainer fills from "
                    "TrainingArguments.per_device_train_batch_size: " + std::to_string(*micro) +
                    (hf.per_device_train_batch_size == HfTrainerArgs{}.per_device_train_batch_size ? " (its default)" : ""));
  }
  if (is_auto("/gradient_accumulation_steps")) {
    gas = hf.gradient_accumulation_steps;
    notes.push_back("gradient_accumulation_steps: \"auto\", which the Hugging Face Trainer fills from "
                    "TrainingArguments.gradient_accumulation_steps: " + std::to_string(*gas) +
                    (hf.gradient_accumulation_steps == HfTrainerArgs{}.gradient_accumulation_steps ? " (its default)" : ""));
  }
  if (is_auto("/train_batch_size")) {
    // world × per-device batch × accumulation, from the Trainer's own values (not the config's)
    const int64_t m = is_auto("/train_micro_batch_size_per_gpu") || !micro ? hf.per_device_train_batch_size : *micro;
    const int64_t g = is_auto("/gradient_accumulation_steps") || !gas ? hf.gradient_accumulation_steps : *gas;
    train = spec::checked_mul(m, g, dp).value_or(spec::limits::kGlobalBatch + 1);
    notes.push_back("train_batch_size: \"auto\", which the Hugging Face Trainer fills with world × "
                    "per_device_train_batch_size × gradient_accumulation_steps = " + std::to_string(dp) + " × " +
                    std::to_string(m) + " × " + std::to_string(g) + " = " + std::to_string(*train) +
                    " (the data-parallel world)");
  }
  // DeepSpeed asserts each given value is positive; here that comes before any division by it.
  const auto check = [&](const std::optional<int64_t>& v, const char* pointer, const char* what, int64_t limit) {
    if (v && (*v <= 0 || *v > limit)) {
      r.fail(pointer, std::string(what) + ": " + std::to_string(*v) + " has to be greater than 0" +
                          (*v > 0 ? " and at most " + std::to_string(limit) : ""));
    }
  };
  check(train, "/train_batch_size", "Train batch size", spec::limits::kGlobalBatch);
  check(micro, "/train_micro_batch_size_per_gpu", "Micro batch size per gpu", spec::limits::kGlobalBatch);
  check(gas, "/gradient_accumulation_steps", "Gradient accumulation steps", spec::limits::kMicroBatches);
  int64_t b = 0, mb = 0, g = 0;
  if (train && micro && gas) {
    b = *train, mb = *micro, g = *gas;
  } else if (train && micro) {
    b = *train, mb = *micro, g = *train / *micro / dp;
    notes.push_back("gradient_accumulation_steps: train_batch_size / micro / dp = " + std::to_string(g) + " (as DeepSpeed computes it)");
  } else if (train && gas) {
    b = *train, g = *gas, mb = *train / dp / *gas;
    notes.push_back("train_micro_batch_size_per_gpu: train_batch_size / dp / gas = " + std::to_string(mb) + " (as DeepSpeed computes it)");
  } else if (micro && gas) {
    mb = *micro, g = *gas, b = spec::checked_mul(*micro, *gas, dp).value_or(spec::limits::kGlobalBatch + 1);
    notes.push_back("train_batch_size: micro × gas × dp = " + std::to_string(b) + " (as DeepSpeed computes it)");
  } else if (train) {
    b = *train, g = 1, mb = *train / dp;
    notes.push_back("gradient_accumulation_steps: DeepSpeed's default 1; train_micro_batch_size_per_gpu = " + std::to_string(mb));
  } else if (micro) {
    mb = *micro, g = 1, b = *micro * dp;
    notes.push_back("gradient_accumulation_steps: DeepSpeed's default 1; train_batch_size = " + std::to_string(b));
  } else {
    r.fail("/train_batch_size", "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided (DeepSpeed's own check)");
  }
  if (b <= 0) r.fail("/train_batch_size", "Train batch size: " + std::to_string(b) + " has to be greater than 0");
  if (mb <= 0) r.fail("/train_micro_batch_size_per_gpu", "Micro batch size per gpu: " + std::to_string(mb) + " has to be greater than 0");
  if (g <= 0) r.fail("/gradient_accumulation_steps", "Gradient accumulation steps: " + std::to_string(g) + " has to be greater than 0");
  if (b > spec::limits::kGlobalBatch) {
    r.fail("/train_micro_batch_size_per_gpu", "train_batch_size = micro × gas × dp = " + std::to_string(b) + " above " +
                                                  std::to_string(spec::limits::kGlobalBatch) + " sequences");
  }
  if (g > spec::limits::kMicroBatches) {
    r.fail("/gradient_accumulation_steps", "gradient_accumulation_steps = " + std::to_string(g) + " above Stagecraft's " +
                                               std::to_string(spec::limits::kMicroBatches) + " micro-batches a step");
  }
  if (b != spec::checked_mul(mb, g, dp).value_or(-1)) {
    r.fail("/train_batch_size", "Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
                                "gradient_acc_step * world_size " + std::to_string(b) + " != " + std::to_string(mb) + " * " +
                                    std::to_string(g) + " * " + std::to_string(dp) + " (DeepSpeed's own check; world_size is the data-parallel size)");
  }
  p.micro_batch = mb;
  p.micro_batches = g;
  t.global_batch = b;
}

void read_zero(DsReader& r, const HfTrainerArgs& hf, std::vector<std::string>& notes, spec::ZeroConfig& z) {
  const spec::ZeroConfig d;
  const json* stage = r.at("/zero_optimization/stage");
  z.stage = 0;
  if (stage == nullptr) {
    r.count("/zero_optimization/stage", 0, "DeepSpeed's default");
  } else if (!stage->is_number_integer() || stage->get<int64_t>() < 0 || stage->get<int64_t>() > 3) {
    r.fail("/zero_optimization/stage", "expected a ZeRO stage 0, 1, 2 or 3, got " + spec::describe(*stage));
  } else {
    z.stage = static_cast<int>(stage->get<int64_t>());
  }
  const std::string dflt = "DeepSpeed's default";
  // "auto" sizes by the model's hidden size, as the Hugging Face Trainer fills them (trainer_config_finalize)
  const auto hidden_auto = [&](const char* key, int64_t* out, int64_t value, const std::string& rule) {
    const json* v = r.at(std::string("/zero_optimization/") + key);
    if (v == nullptr || !v->is_string() || v->get<std::string>() != "auto" || hf.hidden_size <= 0) return false;
    *out = value;
    notes.push_back(std::string("zero_optimization.") + key + ": \"auto\", which the Hugging Face Trainer fills with " +
                    rule + " = " + std::to_string(value) + " (hidden size " + std::to_string(hf.hidden_size) + ")");
    return true;
  };
  const int64_t h = hf.hidden_size;
  if (!hidden_auto("reduce_bucket_size", &z.reduce_bucket, h * h, "hidden²")) {
    z.reduce_bucket = *r.count("/zero_optimization/reduce_bucket_size", d.reduce_bucket, dflt);
  }
  z.allgather_bucket = *r.count("/zero_optimization/allgather_bucket_size", d.allgather_bucket, dflt);
  // int(0.9 · h²) in Python: the float product truncated
  if (z.stage != 3 || !hidden_auto("stage3_prefetch_bucket_size", &z.prefetch_bucket,
                                   static_cast<int64_t>(0.9 * static_cast<double>(h) * static_cast<double>(h)),
                                   "0.9 × hidden²")) {
    z.prefetch_bucket = *r.count("/zero_optimization/stage3_prefetch_bucket_size", d.prefetch_bucket, dflt);
  }
  z.max_live_parameters = *r.count("/zero_optimization/stage3_max_live_parameters", d.max_live_parameters, dflt);
  z.max_reuse_distance = *r.count("/zero_optimization/stage3_max_reuse_distance", d.max_reuse_distance, dflt);
  if (z.stage != 3 ||
      !hidden_auto("stage3_param_persistence_threshold", &z.param_persistence_threshold, 10 * h, "10 × hidden")) {
    z.param_persistence_threshold =
        *r.count("/zero_optimization/stage3_param_persistence_threshold", d.param_persistence_threshold, dflt);
  }
  for (const char* key : {"reduce_bucket_size", "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_max_live_parameters"}) {
    const std::string ptr = std::string("/zero_optimization/") + key;
    if (r.at(ptr) && r.at(ptr)->is_number() && r.at(ptr)->get<double>() < 1) r.fail(ptr, "expected at least 1 element");
  }
  z.overlap_comm = r.flag("/zero_optimization/overlap_comm", z.stage == 3,
                          std::string("DeepSpeed's default for stage ") + std::to_string(z.stage) + ":");
  const std::string device = r.text("/zero_optimization/offload_optimizer/device", "none");
  if (device != "none" && device != "cpu" && device != "nvme") {
    r.fail("/zero_optimization/offload_optimizer/device", "expected \"none\", \"cpu\" or \"nvme\", got \"" + device + "\"");
  }
  if (device == "nvme") r.fail("/zero_optimization/offload_optimizer/device", "\"nvme\" offload is not modelled; use \"cpu\" or \"none\"");
  z.offload_optimizer = device == "cpu" ? spec::Offload::kCpu : spec::Offload::kNone;
  if (z.offload_optimizer == spec::Offload::kCpu && z.stage == 0) {
    r.fail("/zero_optimization/offload_optimizer/device", "optimizer offload needs ZeRO stage 1, 2 or 3 (ZeRO-Offload)");
  }
  const std::string param_device = r.text("/zero_optimization/offload_param/device", "none");
  if (param_device != "none" && param_device != "cpu" && param_device != "nvme") {
    r.fail("/zero_optimization/offload_param/device", "expected \"none\", \"cpu\" or \"nvme\", got \"" + param_device + "\"");
  }
  if (param_device == "nvme") r.fail("/zero_optimization/offload_param/device", "\"nvme\" offload is not modelled; use \"cpu\" or \"none\"");
  if (param_device == "cpu") {
    // DeepSpeed: offload_param is valid with stage 3 only (zero/config.py); modelled with the optimizer offloaded too
    if (z.stage != 3) r.fail("/zero_optimization/offload_param/device", "parameter offload needs ZeRO stage 3");
    if (z.offload_optimizer != spec::Offload::kCpu) {
      r.fail("/zero_optimization/offload_param/device",
             "\"cpu\" is modelled with offload_optimizer \"cpu\" too (ZeRO-Infinity's CPU offload); set both, or \"none\"");
    }
    z.offload_param = spec::Offload::kCpu;
  }
}

// ZeRO++ and MiCS (zero_optimization's zero_hpz_partition_size, zero_quantized_weights,
// zero_quantized_gradients, zero_quantized_nontrainable_weights, mics_shard_size,
// mics_hierarchical_params_gather), as DeepSpeed's code reads them (microsoft/DeepSpeed edaa7221;
// ZERO3-HIERARCHICAL.md): DeepSpeed's config validates none of them; the ZeRO-3 engine reads them
// (below stage 3 nothing does), its asserts refuse some combinations, and its MiCS engine drops
// the ZeRO++ ones. `local` is the data-parallel ranks of one node (GPUs per node / tp); 0 when
// the cluster is not known.
void read_zeropp(DsReader& r, spec::Plan& p, const spec::Training& t, int64_t local, std::vector<std::string>& notes,
                 std::vector<std::string>& warnings) {
  spec::ZeroConfig& z = p.zero;
  const auto number = [&](const char* key, int64_t fallback) -> int64_t {
    const std::string ptr = std::string("/zero_optimization/") + key;
    const json* v = r.at(ptr);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer()) r.fail(ptr, "expected an integer, got " + spec::describe(*v));
    return v->get<int64_t>();
  };
  const auto on = [&](const char* key) {  // absent: false, DeepSpeed's default (not listed: it changes nothing)
    const std::string ptr = std::string("/zero_optimization/") + key;
    const json* v = r.at(ptr);
    if (v != nullptr && !v->is_boolean()) r.fail(ptr, "expected true or false, got " + spec::describe(*v));
    return v != nullptr && v->get<bool>();
  };
  const int64_t hpz = number("zero_hpz_partition_size", 1);
  const bool qwz = on("zero_quantized_weights");
  const bool qgz = on("zero_quantized_gradients");
  const bool frozen = on("zero_quantized_nontrainable_weights");
  const int64_t mics = number("mics_shard_size", -1);
  const bool hier = on("mics_hierarchical_params_gather");
  if (hpz < 0) r.fail("/zero_optimization/zero_hpz_partition_size", "expected an integer >= 0 (DeepSpeed: Field(1, ge=0)), got " + std::to_string(hpz));
  const bool any = hpz > 1 || qwz || qgz || mics > 0;
  if (any && z.stage != 3) {
    warnings.push_back("zero_optimization: ZeRO++ and MiCS keys are read by DeepSpeed's ZeRO-3 engine only, so at stage " +
                       std::to_string(z.stage) + " DeepSpeed ignores them and so does this import");
    return;
  }
  if (frozen) {
    warnings.push_back("zero_optimization.zero_quantized_nontrainable_weights: quantizes frozen parameters only; "
                       "Stagecraft's models train every parameter, so it changes nothing here");
  }
  const int64_t world = p.world();
  if (mics > 0) {
    if (hpz > 1 || qwz || qgz) {
      warnings.push_back("zero_optimization: mics_shard_size with ZeRO++ keys: DeepSpeed's MiCS engine is not given "
                         "zero_hpz_partition_size, zero_quantized_weights or zero_quantized_gradients (engine.py "
                         "_return_mics_optimizer) and gathers unquantized, so they are dropped");
    }
    if ((world / p.pp) % mics != 0) {
      r.fail("/zero_optimization/mics_shard_size", "expected a divisor of the data-parallel world " + std::to_string(world / p.pp) +
                                                       " (DeepSpeed asserts (world_size // pp_size) % shard_size == 0, mics_utils.py)");
    }
    if (z.offload_optimizer != spec::Offload::kNone || z.offload_param != spec::Offload::kNone) {
      r.fail("/zero_optimization/mics_shard_size", "MiCS with offload: DeepSpeed raises \"Local sharding has no support for CPU "
                                                   "offloading\" (mics.py allreduce_mics_shard_grads)");
    }
    if (mics < p.dp) {
      z.shard_group = mics;
      z.replica_sync = spec::ReplicaSync::kStep;
    } else {
      notes.push_back("zero_optimization.mics_shard_size " + std::to_string(mics) + ": the whole data-parallel group, plain ZeRO-3");
    }
    if (hier) {
      if (local <= 0) r.fail("/zero_optimization/mics_hierarchical_params_gather", "needs the cluster's GPUs per node");
      if (mics <= local || mics % local != 0) {
        r.fail("/zero_optimization/mics_hierarchical_params_gather",
               "a shard group spanning whole nodes: mics_shard_size " + std::to_string(mics) + " over " + std::to_string(local) +
                   " data-parallel ranks a node (DeepSpeed asserts \"sharding spans on single node, no need for hierarchy allgather\")");
      }
      if (z.shard_group > 0) {
        z.hierarchical_gather = true;
        z.local_group = local;
      }
    }
    return;
  }
  if (hier) warnings.push_back("zero_optimization.mics_hierarchical_params_gather: without mics_shard_size DeepSpeed ignores it");
  if (hpz > 1) {
    if (world % std::min(hpz, world) != 0) {
      r.fail("/zero_optimization/zero_hpz_partition_size", "expected a divisor of the world size " + std::to_string(world) +
                                                               " (DeepSpeed asserts it, groups._create_zero_param_parallel_group)");
    }
    if (p.tp * p.pp > 1) {
      warnings.push_back("zero_optimization.zero_hpz_partition_size: DeepSpeed forms hpZ groups of consecutive global ranks, "
                         "written for pure data parallelism; modelled as " + std::to_string(hpz) + " consecutive data-parallel ranks");
    }
    if (local > 0 && hpz > local) {
      warnings.push_back("zero_optimization.zero_hpz_partition_size " + std::to_string(hpz) + " spans more than a node's " +
                         std::to_string(local) + " data-parallel ranks: its secondary gathers cross nodes (DeepSpeed's tutorial "
                         "sets it to the GPUs per node)");
    }
    if (hpz < p.dp) z.hpz_group = hpz;
  }
  if (qwz) {
    z.quantized_weights = spec::kQwzDefault;
    if (t.dtype == spec::Dtype::kBf16) {
      warnings.push_back("zero_optimization.zero_quantized_weights with bf16: DeepSpeed's quantizer reads fp16, so bf16 "
                         "weights are cast to fp16 and back around each gather; values beyond 65504 overflow (DeepSpeed "
                         "issues #4852, #3992, #7775)");
    }
  }
  if (qgz) {
    if (const json* rs = r.at("/zero_optimization/reduce_scatter"); rs && rs->is_boolean() && !rs->get<bool>()) {
      r.fail("/zero_optimization/reduce_scatter", "true with zero_quantized_gradients (DeepSpeed asserts \"when enable "
                                                   "all_to_all_reduce, reduce_scatter should also be enabled\", stage3.py)");
    }
    if (local <= 0) r.fail("/zero_optimization/zero_quantized_gradients", "needs the cluster's GPUs per node (qgZ all-to-alls inside each node first)");
    if (local >= p.dp) {
      warnings.push_back("zero_optimization.zero_quantized_gradients: one node's data-parallel ranks hold the whole group, "
                         "and DeepSpeed's qgZ runs only across nodes (stage3.py __avg_scatter_grads: num_nodes > 1): off");
    } else {
      if (p.tp * p.pp > 1) {
        warnings.push_back("zero_optimization.zero_quantized_gradients: DeepSpeed's qgZ groups ranks by the world size and "
                           "the GPUs per node, written for pure data parallelism; modelled over the data-parallel group, " +
                           std::to_string(local) + " of its ranks a node");
      }
      z.quantized_gradients = spec::kQgzDefault;
      z.local_group = local;
    }
  }
}

// The "stagecraft" section an export wrote: the plan fields DeepSpeed cannot express.
void read_stagecraft(const json& ds, const std::string& file, spec::Plan& p) {
  if (!ds.contains("stagecraft") || !ds.at("stagecraft").contains("plan")) return;
  const spec::Plan s = spec::plan_from_json(ds.at("stagecraft").at("plan"), file + " (stagecraft.plan)");
  p.schedule = s.schedule;
  p.virtual_stages = s.virtual_stages;
  p.sequence_parallel = s.sequence_parallel && p.tp > 1;
  if (s.recompute == spec::Recompute::kSelective && p.recompute == spec::Recompute::kNone) p.recompute = s.recompute;
  if (static_cast<int64_t>(s.stage_layers.size()) == p.pp) p.stage_layers = s.stage_layers;
  if (p.pp < 2 || p.micro_batches % p.pp != 0) {
    if (p.schedule == spec::Schedule::kInterleaved) {
      p.schedule = spec::Schedule::k1F1B;
      p.virtual_stages = 1;
    }
  }
}

int64_t read_parallel(DsReader& r, const std::string& pointer, const std::string& what) {
  const json* v = r.at(pointer);
  if (v == nullptr || (v->is_string() && v->get<std::string>() == "auto")) return 1;
  if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > spec::limits::kGpus) {
    r.fail(pointer, "expected a positive " + what + " (at most " + std::to_string(spec::limits::kGpus) + "), got " +
                        spec::describe(*v));
  }
  return std::max<int64_t>(1, v->get<int64_t>());
}

}  // namespace

DeepSpeedExport to_deepspeed(const spec::Plan& plan, const spec::Training& training) {
  DeepSpeedExport out;
  const std::string opt = training.optimizer == spec::Optimizer::kAdamW ? "AdamW" : "Adam";
  json ds = {{"train_batch_size", plan.micro_batch * plan.micro_batches * plan.dp},
             {"train_micro_batch_size_per_gpu", plan.micro_batch},
             {"gradient_accumulation_steps", plan.micro_batches},
             {"gradient_clipping", 1.0},
             {"fp16", {{"enabled", training.dtype == spec::Dtype::kFp16}}},
             {"bf16", {{"enabled", spec::storage_dtype(training.dtype) == spec::Dtype::kBf16}}},
             {"optimizer", {{"type", opt}}},
             {"zero_optimization", zero_section(plan.zero, plan.dp)},
             {"pipeline",
              {{"stages", plan.pp},
               {"partition", uniform_split(plan) ? "uniform" : "parameters"},
               {"activation_checkpoint_interval", plan.recompute == spec::Recompute::kFull ? 1 : 0}}}};
  if (plan.tp > 1) ds["tensor_parallel"] = {{"autotp_size", plan.tp}};
  if (training.reduce_dtype) ds["communication_data_type"] = spec::to_string(*training.reduce_dtype);
  out.warnings = export_warnings(plan);
  if (plan.cp > 1) {
    out.warnings.push_back("cp " + std::to_string(plan.cp) + ": a DeepSpeed config has no context-parallel key; DeepSpeed-Ulysses' "
                           "sequence parallelism is set where the model is built (Megatron-DeepSpeed --ds-sequence-parallel-size " +
                           std::to_string(plan.cp) + "), and train_batch_size counts the dp replicas only");
  }
  if (training.dtype == spec::Dtype::kFp8) {
    out.warnings.push_back("dtype fp8: DeepSpeed has no FP8 key; the config says bf16, and FP8 GEMMs come from "
                           "Transformer Engine layers in the model code (te.Linear / te.LayerNormLinear under "
                           "te.fp8_autocast)");
  }
  ds["stagecraft"] = {{"plan", spec::to_json(plan)},
                      {"data_parallel", plan.dp},
                      {"note", "written by stagecraft export deepspeed; DeepSpeed reads only the keys it knows"},
                      {"warnings", out.warnings}};
  out.config = std::move(ds);
  return out;
}

DeepSpeedImport from_deepspeed(const json& ds, const std::string& file, int64_t gpus, int64_t layers,
                               const HfTrainerArgs& hf, int64_t gpus_per_node) {
  if (!ds.is_object()) throw spec::SpecError(file, "", "expected a JSON object (a DeepSpeed config), got " + spec::describe(ds));
  DeepSpeedImport out;
  const json config = normalized(ds, file, out.defaults, out.warnings);
  DsReader r(config, file, out.defaults);
  spec::Plan& p = out.plan;
  p.file = file;
  p.source = "imported from DeepSpeed config " + file;
  p.tp = read_parallel(r, "/tensor_parallel/autotp_size", "tensor-parallel size");
  p.pp = read_parallel(r, "/pipeline/stages", "pipeline stage count");
  if (!r.at("/pipeline/stages")) out.defaults.push_back("pipeline.stages: absent, so no pipeline (1 stage)");
  if (gpus <= 0 || gpus % (p.tp * p.pp) != 0) {
    r.fail(r.at("/pipeline/stages") ? "/pipeline/stages" : "/tensor_parallel/autotp_size",
           "expected autotp_size × pipeline stages (" + std::to_string(p.tp) + " × " + std::to_string(p.pp) +
               ") to divide the " + std::to_string(gpus) + " GPUs");
  }
  p.dp = gpus / (p.tp * p.pp);
  spec::Training& t = out.training;
  t.file = file;
  t.source = "imported from DeepSpeed config " + file;
  read_batch(r, p.dp, hf, p, t, out.defaults);
  t.dtype = read_dtype(r, hf, out.defaults);
  if (!r.at("/fp16/enabled") && !r.at("/bf16/enabled")) out.defaults.push_back("fp16, bf16: absent, so fp32 (DeepSpeed's default)");
  std::string opt = r.text("/optimizer/type", "adam");
  std::transform(opt.begin(), opt.end(), opt.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (opt != "adam" && opt != "adamw") r.fail("/optimizer/type", "expected \"Adam\" or \"AdamW\" (what Stagecraft models), got \"" + opt + "\"");
  t.optimizer = opt == "adamw" ? spec::Optimizer::kAdamW : spec::Optimizer::kAdam;
  read_zero(r, hf, out.defaults, p.zero);
  read_zeropp(r, p, t, gpus_per_node > 0 ? std::max<int64_t>(1, gpus_per_node / p.tp) : 0, out.defaults, out.warnings);
  // DeepSpeed's own collective schedule (spec/framework.hpp); gradients travel in
  // communication_data_type (engine.py l.939-950: the model dtype by default)
  t.framework = spec::Framework::kDeepSpeed;
  if (const json* comm = r.at("/communication_data_type"); comm && !comm->is_null()) {
    const std::string name = r.text("/communication_data_type", "");
    const auto dtype = spec::parse_dtype(name == "fp16" || name == "float16" ? "fp16"
                                         : name == "bf16" || name == "bfloat16" ? "bf16"
                                         : name == "fp32" || name == "float32" || name == "float" ? "fp32" : "");
    if (!dtype) r.fail("/communication_data_type", "expected \"fp16\", \"bf16\" or \"fp32\", got " + spec::describe(*comm));
    t.reduce_dtype = dtype;
  }
  const json* interval = r.at("/pipeline/activation_checkpoint_interval");
  if (interval && !interval->is_number_integer()) r.fail("/pipeline/activation_checkpoint_interval", "expected an integer, got " + spec::describe(*interval));
  p.recompute = interval && interval->get<int64_t>() > 0 ? spec::Recompute::kFull : spec::Recompute::kNone;
  if (r.at("/activation_checkpointing")) {
    // The section configures deepspeed.checkpointing, which the model code calls around each block
    // (Megatron-DeepSpeed's --checkpoint-activations): every block recomputes its forward.
    p.recompute = spec::Recompute::kFull;
    auto on = [&r](const std::string& pointer) {
      const json* v = r.at(pointer);
      if (v && !v->is_boolean()) r.fail(pointer, "expected true or false, got " + spec::describe(*v));
      return v && v->get<bool>();
    };
    out.defaults.push_back("activation_checkpointing: present, so every transformer block recomputes its forward in the "
                           "backward (full recompute, as the model code checkpointing each block does)");
    // deepspeed/runtime/activation_checkpointing/config.py reads these six and ignores any other key
    static const std::vector<std::string> keys = {"partition_activations", "contiguous_memory_optimization",
                                                  "cpu_checkpointing", "number_checkpoints",
                                                  "synchronize_checkpoint_boundary", "profile"};
    for (const auto& [key, value] : r.at("/activation_checkpointing")->items()) {
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        out.warnings.push_back("activation_checkpointing." + key + ": not a key DeepSpeed reads, so it is ignored" +
                               suggestion(key, keys));
      }
    }
    for (const char* key : {"contiguous_memory_optimization", "synchronize_checkpoint_boundary", "profile"}) {
      on(std::string("/activation_checkpointing/") + key);   // type-checked; they change no modelled figure
    }
    if (const json* n = r.at("/activation_checkpointing/number_checkpoints"); n && !n->is_null()) {
      if (!n->is_number_integer() || n->get<int64_t>() < 1) {
        r.fail("/activation_checkpointing/number_checkpoints", "expected a positive integer, got " + spec::describe(*n));
      }
      out.defaults.push_back("activation_checkpointing.number_checkpoints: " + std::to_string(n->get<int64_t>()) +
                             " sizes DeepSpeed's contiguous checkpoint buffer; which blocks recompute is the model "
                             "code's choice, modelled as every block");
    }
    if (on("/activation_checkpointing/partition_activations") && p.tp > 1) {
      out.warnings.push_back("activation_checkpointing.partition_activations: the saved activations split over the "
                             "tensor-parallel group are not modelled; the memory estimate keeps them whole on each GPU");
    }
    if (on("/activation_checkpointing/cpu_checkpointing")) {
      out.warnings.push_back("activation_checkpointing.cpu_checkpointing: saved activations in host memory are not "
                             "modelled; the memory estimate keeps them on the GPU");
    }
  }
  const std::string partition = r.text("/pipeline/partition", "parameters");
  if (partition == "uniform" && p.pp > 1) {
    // DeepSpeed's 'uniform' balances layer counts: blocks per stage, the first stages taking the rest
    for (int64_t s = 0; s < p.pp; ++s) p.stage_layers.push_back(layers / p.pp + (s < layers % p.pp ? 1 : 0));
  } else if (p.pp > 1 && partition != "parameters") {
    out.defaults.push_back("pipeline.partition \"" + partition + "\": modelled as a split balanced by cost");
  }
  read_stagecraft(ds, file, p);
  if (p.pp > 1 && p.zero.stage >= 2) {
    out.warnings.push_back("pipeline.stages " + std::to_string(p.pp) + " with ZeRO stage " + std::to_string(p.zero.stage) +
                           ": DeepSpeed's pipeline engine refuses this config (\"" + kPipelineZero +
                           "\", deepspeed/runtime/pipe/engine.py); it is simulated as Stagecraft's executor runs it, "
                           "which DeepSpeed cannot");
  }
  return out;
}

DeepSpeedImport load_deepspeed(const std::string& path, int64_t gpus, int64_t layers, const HfTrainerArgs& hf,
                               int64_t gpus_per_node) {
  return from_deepspeed(spec::read_json_file(path), path, gpus, layers, hf, gpus_per_node);
}

}  // namespace stagecraft::planner
