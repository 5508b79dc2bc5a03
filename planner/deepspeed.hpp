// DeepSpeed interop: a Stagecraft plan as a DeepSpeed ds_config.json, and a user's ds_config.json
// as a Stagecraft plan and training (REFERENCE.md "DeepSpeed configuration").
//
// Export writes the keys DeepSpeed reads (deepspeed/runtime/config.py, zero/config.py,
// pipe/engine.py, tensor_parallel/config.py):
//   train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × dp
//                      (DeepSpeedConfig._batch_assertion, with the data-parallel world size)
//   fp16 / bf16 {enabled}, optimizer {type}, gradient_clipping,
//   zero_optimization {stage, overlap_comm, contiguous_gradients, reduce_scatter,
//                      reduce_bucket_size, allgather_bucket_size, stage3_prefetch_bucket_size,
//                      stage3_max_live_parameters, stage3_max_reuse_distance,
//                      stage3_param_persistence_threshold, offload_optimizer {device, pin_memory},
//                      offload_param {device, pin_memory}, and ZeRO++ / MiCS: zero_hpz_partition_size,
//                      zero_quantized_weights, zero_quantized_gradients, mics_shard_size,
//                      mics_hierarchical_params_gather}
//   pipeline {stages, partition, activation_checkpoint_interval}, tensor_parallel {autotp_size}
// plus a "stagecraft" object (DeepSpeed reads only the keys it knows) holding the full plan, so
// what DeepSpeed cannot express (schedule, virtual stages, sequence parallelism, selective
// recompute, the stage split) survives a round trip. It warns, with DeepSpeed's own reason, where
// DeepSpeed cannot run the plan (pipeline + ZeRO >= 2: "ZeRO-2 and ZeRO-3 are incompatible with
// pipeline parallelism", deepspeed/runtime/pipe/engine.py) or runs it differently.
//
// Import reads those keys (ZeRO++ and MiCS with the asserts DeepSpeed's ZeRO-3 engine makes, and a
// warning where DeepSpeed silently ignores or drops one: deepspeed.cpp read_zeropp); a missing key takes DeepSpeed's code default (bucket sizes 5e8,
// stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters and max_reuse_distance 1e9,
// stage3_param_persistence_threshold 1e5, overlap_comm true only for stage 3, stage 0, fp32,
// pipeline stages 1, autotp_size 0 = no tensor parallelism), and the batch triple is completed as
// DeepSpeedConfig._set_batch_related_parameters does. Each default applied is reported.
//
// Import follows DeepSpeed where it is strict and says where it is not: a key of
// zero_optimization that DeepSpeedZeroConfig does not define is refused, as DeepSpeed's pydantic
// model refuses it (extra="forbid", deepspeed/runtime/config_utils.py), with "did you mean"; both
// spellings of the stage-3 keys are read (stage3_prefetch_bucket_size or prefetch_bucket_size,
// populate_by_name); `"zero_optimization": true|false` is DeepSpeed's legacy form, stage 1 or 0
// (read_zero_config_deprecated, zero/config.py); fp16, bf16 and zero_optimization must otherwise be
// objects. A top-level key DeepSpeed does not read is a warning (DeepSpeed ignores it). "auto" is
// filled as the Hugging Face Trainer fills it (HfTrainerArgs below) and reported. An activation_checkpointing
// section means the model checkpoints its layers (Megatron-DeepSpeed's --checkpoint-activations):
// full recompute. Pipeline + ZeRO >= 2, which DeepSpeed's pipeline engine refuses, is a warning.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::planner {

struct DeepSpeedExport {
  nlohmann::json config;
  std::vector<std::string> warnings;   // where DeepSpeed cannot run the plan as Stagecraft would
};

// The plan must be valid for the training (tp·pp·dp GPUs, the batch identity).
DeepSpeedExport to_deepspeed(const spec::Plan& plan, const spec::Training& training);

struct DeepSpeedImport {
  spec::Plan plan;
  spec::Training training;
  std::vector<std::string> defaults;   // "zero_optimization.reduce_bucket_size: DeepSpeed's default 5e8", ...
  // What DeepSpeed would not do as read here: top-level keys it does not read (with "did you
  // mean"), pipeline + ZeRO >= 2, activation-checkpointing options that are not modelled.
  std::vector<std::string> warnings;
};

// What the Hugging Face Trainer fills a config's "auto" values with (transformers
// integrations/deepspeed.py, HfTrainerDeepSpeedConfig.trainer_config_process and _finalize):
//   train_micro_batch_size_per_gpu   TrainingArguments.per_device_train_batch_size (default 8)
//   gradient_accumulation_steps      TrainingArguments.gradient_accumulation_steps (default 1)
//   train_batch_size                 world × the two above (here the data-parallel world, as
//                                    DeepSpeed's own batch check counts it)
//   fp16.enabled / bf16.enabled      TrainingArguments.fp16 / .bf16 (default false)
//   zero_optimization.reduce_bucket_size                  hidden_size²
//   zero_optimization.stage3_prefetch_bucket_size         0.9 · hidden_size²  (stage 3)
//   zero_optimization.stage3_param_persistence_threshold  10 · hidden_size    (stage 3)
// Each value filled is listed in the import's defaults. Keys the Trainer fills that change no
// modelled figure (optimizer and scheduler params, gradient_clipping) are accepted as "auto".
struct HfTrainerArgs {
  int64_t per_device_train_batch_size = 8;
  int64_t gradient_accumulation_steps = 1;
  bool fp16 = false;
  bool bf16 = false;
  int64_t hidden_size = 0;   // the model's; 0: unknown, so those "auto" sizes take DeepSpeed's defaults
};

// Reads a ds_config for `gpus` GPUs and a model of `layers` blocks (for pipeline.partition
// "uniform"), resolving "auto" as the Hugging Face Trainer would with `hf`. Throws SpecError naming
// `file`, the JSON pointer and the reason (DeepSpeed's own wording for its batch and precision
// checks).
// `gpus_per_node`: the cluster's (qgZ and MiCS's hierarchical gather group ranks by node); 0 when
// not known, and then a config that needs it is refused.
DeepSpeedImport from_deepspeed(const nlohmann::json& ds, const std::string& file, int64_t gpus, int64_t layers,
                               const HfTrainerArgs& hf = {}, int64_t gpus_per_node = 0);
DeepSpeedImport load_deepspeed(const std::string& path, int64_t gpus, int64_t layers, const HfTrainerArgs& hf = {},
                               int64_t gpus_per_node = 0);

}  // namespace stagecraft::planner
