// DeepSpeed export (batch identity, keys, DeepSpeed's own refusal of pipeline + ZeRO >= 2) and
// import (DeepSpeed's code defaults for missing keys, its batch resolution and its checks).
#include "planner/deepspeed.hpp"

#include <gtest/gtest.h>

#include "core/spec/json_reader.hpp"
#include "support.hpp"

namespace stagecraft::planner {
namespace {

spec::Plan plan_of(const nlohmann::json& j) { return spec::plan_from_json(j, "plan.json"); }

spec::Training training(int64_t batch, spec::Dtype dtype) {
  spec::Training t;
  t.attention = "unfused";  // the hand derivations time the score GEMMs
  t.global_batch = batch;
  t.dtype = dtype;
  t.optimizer = spec::Optimizer::kAdamW;
  return t;
}

TEST(DeepSpeedExport, SatisfiesTheBatchIdentityAndCarriesTheZeroKeys) {
  const spec::Plan p = plan_of({{"tp", 2}, {"pp", 2}, {"dp", 4}, {"micro_batch", 3}, {"micro_batches", 8},
                                {"zero", {{"stage", 1}, {"reduce_bucket", 10'000'000}, {"offload_optimizer", "cpu"}}}});
  const DeepSpeedExport e = to_deepspeed(p, training(96, spec::Dtype::kBf16));
  const nlohmann::json& ds = e.config;
  // train_batch_size = micro × accumulation × dp, DeepSpeed's _batch_assertion
  EXPECT_EQ(ds.at("train_batch_size"), 3 * 8 * 4);
  EXPECT_EQ(ds.at("train_micro_batch_size_per_gpu"), 3);
  EXPECT_EQ(ds.at("gradient_accumulation_steps"), 8);
  EXPECT_EQ(ds.at("bf16").at("enabled"), true);
  EXPECT_EQ(ds.at("fp16").at("enabled"), false);
  EXPECT_EQ(ds.at("optimizer").at("type"), "AdamW");
  const nlohmann::json& z = ds.at("zero_optimization");
  EXPECT_EQ(z.at("stage"), 1);
  EXPECT_EQ(z.at("reduce_bucket_size"), 10'000'000);
  EXPECT_EQ(z.at("allgather_bucket_size"), 500'000'000);
  EXPECT_EQ(z.at("stage3_prefetch_bucket_size"), 50'000'000);
  EXPECT_EQ(z.at("stage3_max_live_parameters"), 1'000'000'000);
  EXPECT_EQ(z.at("stage3_param_persistence_threshold"), 100'000);
  EXPECT_EQ(z.at("overlap_comm"), false);   // the plan's value (DeepSpeed's default below stage 3)
  EXPECT_EQ(z.at("offload_optimizer").at("device"), "cpu");
  EXPECT_EQ(ds.at("pipeline").at("stages"), 2);
  EXPECT_EQ(ds.at("tensor_parallel").at("autotp_size"), 2);
  EXPECT_TRUE(e.warnings.empty()) << e.warnings.front();
}

TEST(DeepSpeedExport, Fp8IsBf16ForDeepSpeedWithAWarning) {
  // DeepSpeed has no FP8 key: its engine runs bf16, and FP8 GEMMs come from TE modules in the model.
  const spec::Plan p = plan_of({{"tp", 1}, {"pp", 1}, {"dp", 8}, {"micro_batch", 1}, {"micro_batches", 8}});
  const DeepSpeedExport e = to_deepspeed(p, training(64, spec::Dtype::kFp8));
  EXPECT_EQ(e.config.at("bf16").at("enabled"), true);
  EXPECT_EQ(e.config.at("fp16").at("enabled"), false);
  ASSERT_EQ(e.warnings.size(), 1u);
  EXPECT_EQ(e.warnings[0].rfind("dtype fp8: DeepSpeed has no FP8 key", 0), 0u) << e.warnings[0];
}

TEST(DeepSpeedExport, WarnsWithDeepSpeedsReasonWhenPipelineMeetsZero2Or3) {
  for (int stage : {2, 3}) {
    const spec::Plan p = plan_of({{"pp", 4}, {"dp", 2}, {"micro_batches", 8}, {"zero", {{"stage", stage}}}});
    const DeepSpeedExport e = to_deepspeed(p, training(16, spec::Dtype::kFp16));
    ASSERT_FALSE(e.warnings.empty());
    EXPECT_NE(e.warnings.front().find("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"), std::string::npos)
        << e.warnings.front();
  }
  const spec::Plan fine = plan_of({{"pp", 4}, {"dp", 2}, {"micro_batches", 8}, {"zero", {{"stage", 1}}}});
  EXPECT_TRUE(to_deepspeed(fine, training(16, spec::Dtype::kFp16)).warnings.empty());
}

TEST(DeepSpeedImport, MissingKeysTakeDeepSpeedsCodeDefaults) {
  const DeepSpeedImport d = load_deepspeed(std::string(STAGECRAFT_PLANNER_TEST_DATA) + "/ds_minimal.json", 2, 4);
  // {"train_batch_size": 8, "fp16": {"enabled": true}, "zero_optimization": {"stage": 3}} on 2 GPUs
  EXPECT_EQ(d.plan.tp, 1);
  EXPECT_EQ(d.plan.pp, 1);
  EXPECT_EQ(d.plan.dp, 2);
  EXPECT_EQ(d.plan.micro_batch, 8 / 2);   // gradient_accumulation_steps defaults to 1
  EXPECT_EQ(d.plan.micro_batches, 1);
  EXPECT_EQ(d.training.global_batch, 8);
  EXPECT_EQ(d.training.dtype, spec::Dtype::kFp16);
  const spec::ZeroConfig& z = d.plan.zero;
  EXPECT_EQ(z.stage, 3);
  EXPECT_EQ(z.reduce_bucket, 500'000'000);
  EXPECT_EQ(z.allgather_bucket, 500'000'000);
  EXPECT_EQ(z.prefetch_bucket, 50'000'000);
  EXPECT_EQ(z.max_live_parameters, 1'000'000'000);
  EXPECT_EQ(z.max_reuse_distance, 1'000'000'000);
  EXPECT_EQ(z.param_persistence_threshold, 100'000);
  EXPECT_TRUE(z.overlap_comm);   // DeepSpeed turns it on by default for stage 3 only
  EXPECT_EQ(z.offload_optimizer, spec::Offload::kNone);
  bool noted = false;
  for (const std::string& n : d.defaults) noted |= n.find("zero_optimization.reduce_bucket_size: DeepSpeed's default 5e8") != std::string::npos;
  EXPECT_TRUE(noted);

  const DeepSpeedImport s2 = from_deepspeed({{"train_micro_batch_size_per_gpu", 2}, {"zero_optimization", {{"stage", 2}}}},
                                            "ds.json", 4, 4);
  EXPECT_FALSE(s2.plan.zero.overlap_comm);
  EXPECT_EQ(s2.training.global_batch, 2 * 1 * 4);   // micro × default accumulation 1 × dp
  EXPECT_EQ(s2.training.dtype, spec::Dtype::kFp32);
}

TEST(DeepSpeedImport, CompletesTheBatchTripleAsDeepSpeedDoes) {
  // train and micro given: gas = train / micro / dp
  const DeepSpeedImport d = from_deepspeed({{"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 2},
                                            {"pipeline", {{"stages", 2}}}, {"tensor_parallel", {{"autotp_size", 2}}}},
                                           "ds.json", 16, 4);
  EXPECT_EQ(d.plan.dp, 16 / (2 * 2));
  EXPECT_EQ(d.plan.micro_batches, 64 / 2 / 4);
  // an inconsistent triple fails with DeepSpeed's own message, naming the file and key
  test::expect_spec_error(
      [] {
        from_deepspeed({{"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 2}, {"gradient_accumulation_steps", 3}},
                       "ds.json", 8, 4);
      },
      "/train_batch_size", "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 64 != 2 * 3 * 8");
  test::expect_spec_error([] { from_deepspeed({{"fp16", {{"enabled", true}}}}, "ds.json", 8, 4); }, "/train_batch_size",
                          "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
  test::expect_spec_error(
      [] { from_deepspeed({{"train_batch_size", 8}, {"fp16", {{"enabled", true}}}, {"bf16", {{"enabled", true}}}}, "ds.json", 8, 4); },
      "/bf16/enabled", "cannot be simultaneously enabled");
  test::expect_spec_error([] { from_deepspeed({{"train_batch_size", 8}, {"pipeline", {{"stages", 3}}}}, "ds.json", 8, 4); },
                          "/pipeline/stages", "to divide the 8 GPUs");
}

// Zeros used to reach the divisions (train / micro / dp, train / dp / gas) before DeepSpeed's own
// positivity checks and kill the process with SIGFPE; tp × pp could wrap to 0.
TEST(DeepSpeedImport, ZeroOrHugeBatchValuesAreRefusedBeforeAnyDivision) {
  test::expect_spec_error(
      [] { from_deepspeed({{"train_batch_size", 64}, {"gradient_accumulation_steps", 0}}, "ds.json", 8, 4); },
      "/gradient_accumulation_steps", "Gradient accumulation steps: 0 has to be greater than 0");
  test::expect_spec_error(
      [] { from_deepspeed({{"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 0}}, "ds.json", 8, 4); },
      "/train_micro_batch_size_per_gpu", "Micro batch size per gpu: 0 has to be greater than 0");
  test::expect_spec_error(
      [] {
        from_deepspeed({{"train_batch_size", 64}, {"tensor_parallel", {{"autotp_size", int64_t{1} << 62}}},
                        {"pipeline", {{"stages", 4}}}},
                       "ds.json", 8, 4);
      },
      "/tensor_parallel/autotp_size", "at most 1048576");
  // micro × gas × dp = 2^24 × 2^14 × 8 = 2^41 does not fit in the 2^24-sequence batch limit.
  test::expect_spec_error(
      [] {
        from_deepspeed({{"train_micro_batch_size_per_gpu", int64_t{1} << 24}, {"gradient_accumulation_steps", int64_t{1} << 14}},
                       "ds.json", 8, 4);
      },
      "/train_micro_batch_size_per_gpu", "above 16777216 sequences");
  // More than 2^14 micro-batches a step is a Program too large to build.
  test::expect_spec_error(
      [] { from_deepspeed({{"train_batch_size", 1 << 20}, {"train_micro_batch_size_per_gpu", 1}}, "ds.json", 8, 4); },
      "/gradient_accumulation_steps", "above Stagecraft's 16384 micro-batches a step");
}

bool mentions(const std::vector<std::string>& lines, const std::string& fragment) {
  for (const std::string& l : lines) {
    if (l.find(fragment) != std::string::npos) return true;
  }
  return false;
}

// UX-AUDIT D9: what DeepSpeed refuses is refused, what it ignores is said, nothing diverges silently.
TEST(DeepSpeedImport, AZeroKeyDeepSpeedDoesNotDefineIsRefusedWithTheNearestKey) {
  test::expect_spec_error(
      [] {
        from_deepspeed({{"train_batch_size", 64}, {"zero_optimization", {{"stage", 3}, {"stage3_prefetch_bucket_sizes", 1e7}}}},
                       "ds.json", 8, 4);
      },
      "/zero_optimization/stage3_prefetch_bucket_sizes", "did you mean \"stage3_prefetch_bucket_size\"?");
}

TEST(DeepSpeedImport, ATopLevelKeyDeepSpeedDoesNotReadIsAWarningWithTheNearestKey) {
  // zero_optimisation (British spelling) is not DeepSpeed's key: DeepSpeed runs ZeRO-0, and says nothing.
  const DeepSpeedImport ds =
      from_deepspeed({{"train_batch_size", 64}, {"zero_optimisation", {{"stage", 3}}}}, "ds.json", 8, 4);
  EXPECT_EQ(ds.plan.zero.stage, 0);
  EXPECT_TRUE(mentions(ds.warnings, "\"zero_optimisation\": not a key DeepSpeed reads")) << ds.warnings.size();
  EXPECT_TRUE(mentions(ds.warnings, "did you mean \"zero_optimization\"?"));
  // Keys DeepSpeed reads but Stagecraft does not model (a scheduler) are no warning.
  const DeepSpeedImport quiet = from_deepspeed({{"train_batch_size", 64}, {"scheduler", {{"type", "WarmupLR"}}}}, "ds.json", 8, 4);
  EXPECT_TRUE(quiet.warnings.empty());
}

TEST(DeepSpeedImport, ShortSpellingsOfTheStage3KeysAreReadLikeTheLongOnes) {
  const DeepSpeedImport ds = from_deepspeed(
      {{"train_batch_size", 64}, {"zero_optimization", {{"stage", 3}, {"prefetch_bucket_size", 12345678}}}}, "ds.json", 8, 4);
  EXPECT_EQ(ds.plan.zero.prefetch_bucket, 12345678);
  test::expect_spec_error(
      [] {
        from_deepspeed({{"train_batch_size", 64},
                        {"zero_optimization", {{"stage", 3}, {"max_live_parameters", 1}, {"stage3_max_live_parameters", 2}}}},
                       "ds.json", 8, 4);
      },
      "/zero_optimization/max_live_parameters", "given twice");
}

TEST(DeepSpeedImport, LegacyBooleanZeroIsStageOneAndOtherNonObjectsAreRefused) {
  // read_zero_config_deprecated: true is stage 1, false stage 0.
  const DeepSpeedImport on = from_deepspeed({{"train_batch_size", 64}, {"zero_optimization", true}}, "ds.json", 8, 4);
  EXPECT_EQ(on.plan.zero.stage, 1);
  EXPECT_TRUE(mentions(on.defaults, "DeepSpeed's deprecated form of stage 1"));
  const DeepSpeedImport off = from_deepspeed({{"train_batch_size", 64}, {"zero_optimization", false}}, "ds.json", 8, 4);
  EXPECT_EQ(off.plan.zero.stage, 0);
  test::expect_spec_error([] { from_deepspeed({{"train_batch_size", 64}, {"zero_optimization", 3}}, "ds.json", 8, 4); },
                          "/zero_optimization", "expected an object such as {\"stage\": 3}, got 3");
  // "fp16": true would crash DeepSpeed (it reads fp16.enabled): refused, not read as fp32.
  test::expect_spec_error([] { from_deepspeed({{"train_batch_size", 64}, {"fp16", true}}, "ds.json", 8, 4); }, "/fp16",
                          "expected an object such as {\"enabled\": true}, got true");
}

TEST(DeepSpeedImport, AutoPrecisionSaysWhatItBecame) {
  // The Hugging Face Trainer fills "auto" from TrainingArguments.bf16 / .fp16: false unless given.
  const DeepSpeedImport ds = from_deepspeed({{"train_batch_size", 64}, {"bf16", {{"enabled", "auto"}}}}, "ds.json", 8, 4);
  EXPECT_EQ(ds.training.dtype, spec::Dtype::kFp32);
  EXPECT_TRUE(mentions(ds.defaults, "bf16.enabled: \"auto\", which the Hugging Face Trainer fills from TrainingArguments.bf16"));
  EXPECT_TRUE(mentions(ds.defaults, ": false;"));
  HfTrainerArgs bf16;
  bf16.bf16 = true;
  const DeepSpeedImport on = from_deepspeed({{"train_batch_size", 64}, {"bf16", {{"enabled", "auto"}}}}, "ds.json", 8, 4, bf16);
  EXPECT_EQ(on.training.dtype, spec::Dtype::kBf16);
}

TEST(DeepSpeedImport, AutoBatchIsWhatTheTrainerFillsIn) {
  // HF's zero3 template: every batch key "auto". TrainingArguments' defaults: per-device batch 8,
  // accumulation 1; train_batch_size = world × 8 × 1. On 8 GPUs with autotp 2: dp = 4, so 32.
  const nlohmann::json cfg = {{"train_batch_size", "auto"},
                              {"train_micro_batch_size_per_gpu", "auto"},
                              {"gradient_accumulation_steps", "auto"},
                              {"tensor_parallel", {{"autotp_size", 2}}}};
  const DeepSpeedImport ds = from_deepspeed(cfg, "ds.json", 8, 4);
  EXPECT_EQ(ds.plan.micro_batch, 8);
  EXPECT_EQ(ds.plan.micro_batches, 1);
  EXPECT_EQ(ds.training.global_batch, 4 * 8 * 1);
  EXPECT_TRUE(mentions(ds.defaults, "per_device_train_batch_size: 8 (its default)"));
  EXPECT_TRUE(mentions(ds.defaults, "= 4 × 8 × 1 = 32"));
  // With the Trainer's own values: per-device 2, accumulation 4: 4 × 2 × 4 = 32 again, in 4 micro-batches.
  HfTrainerArgs hf;
  hf.per_device_train_batch_size = 2;
  hf.gradient_accumulation_steps = 4;
  const DeepSpeedImport mine = from_deepspeed(cfg, "ds.json", 8, 4, hf);
  EXPECT_EQ(mine.plan.micro_batch, 2);
  EXPECT_EQ(mine.plan.micro_batches, 4);
  EXPECT_EQ(mine.training.global_batch, 32);
}

TEST(DeepSpeedImport, AutoBucketSizesFollowTheHiddenSize) {
  // trainer_config_finalize with hidden 4096: reduce_bucket_size = 4096² = 16,777,216;
  // stage 3: prefetch = int(0.9 × 4096²) = 15,099,494 (15,099,494.4 truncated), persistence = 40,960.
  const nlohmann::json z3 = {{"train_batch_size", 64},
                             {"zero_optimization",
                              {{"stage", 3},
                               {"reduce_bucket_size", "auto"},
                               {"stage3_prefetch_bucket_size", "auto"},
                               {"stage3_param_persistence_threshold", "auto"}}}};
  HfTrainerArgs hf;
  hf.hidden_size = 4096;
  const DeepSpeedImport ds = from_deepspeed(z3, "ds.json", 8, 4, hf);
  EXPECT_EQ(ds.plan.zero.reduce_bucket, int64_t{4096} * 4096);
  EXPECT_EQ(ds.plan.zero.prefetch_bucket, 15099494);
  EXPECT_EQ(ds.plan.zero.param_persistence_threshold, 10 * 4096);
  EXPECT_TRUE(mentions(ds.defaults, "reduce_bucket_size: \"auto\", which the Hugging Face Trainer fills with hidden² = 16777216"));
  // Without the hidden size (a model not known), DeepSpeed's defaults, said as such.
  const DeepSpeedImport bare = from_deepspeed(z3, "ds.json", 8, 4);
  EXPECT_EQ(bare.plan.zero.reduce_bucket, spec::ZeroConfig{}.reduce_bucket);
  EXPECT_TRUE(mentions(bare.defaults, "reduce_bucket_size: DeepSpeed's default (\"auto\")"));
  // Stage 2: only reduce_bucket_size is filled; the stage-3 keys are not used.
  nlohmann::json z2 = z3;
  z2["zero_optimization"]["stage"] = 2;
  const DeepSpeedImport two = from_deepspeed(z2, "ds.json", 8, 4, hf);
  EXPECT_EQ(two.plan.zero.reduce_bucket, int64_t{4096} * 4096);
  EXPECT_EQ(two.plan.zero.prefetch_bucket, spec::ZeroConfig{}.prefetch_bucket);
}

TEST(DeepSpeedImport, ActivationCheckpointingMeansFullRecompute) {
  const DeepSpeedImport plain = from_deepspeed({{"train_batch_size", 64}}, "ds.json", 8, 4);
  EXPECT_EQ(plain.plan.recompute, spec::Recompute::kNone);
  const DeepSpeedImport ds = from_deepspeed(
      {{"train_batch_size", 64}, {"activation_checkpointing", {{"partition_activations", false}, {"cpu_checkpointing", true}}}},
      "ds.json", 8, 4);
  EXPECT_EQ(ds.plan.recompute, spec::Recompute::kFull);
  EXPECT_TRUE(mentions(ds.defaults, "activation_checkpointing: present"));
  // number_checkpoints sizes the contiguous buffer (read, said); a key DeepSpeed does not read is a
  // warning with the nearest one; a non-boolean flag or a non-positive count is refused
  const DeepSpeedImport n = from_deepspeed(
      {{"train_batch_size", 64}, {"activation_checkpointing", {{"number_checkpoints", 4}, {"partition_activation", true}}}},
      "ds.json", 8, 4);
  EXPECT_TRUE(mentions(n.defaults, "number_checkpoints: 4 sizes DeepSpeed's contiguous checkpoint buffer"));
  EXPECT_TRUE(mentions(n.warnings, "activation_checkpointing.partition_activation: not a key DeepSpeed reads"));
  EXPECT_TRUE(mentions(n.warnings, "did you mean \"partition_activations\"?"));
  test::expect_spec_error([] { from_deepspeed({{"train_batch_size", 64}, {"activation_checkpointing", {{"number_checkpoints", 0}}}},
                                              "ds.json", 8, 4); },
                          "/activation_checkpointing/number_checkpoints", "positive integer");
  test::expect_spec_error([] { from_deepspeed({{"train_batch_size", 64}, {"activation_checkpointing", {{"profile", "yes"}}}},
                                              "ds.json", 8, 4); },
                          "/activation_checkpointing/profile", "true or false");
  EXPECT_TRUE(mentions(ds.warnings, "cpu_checkpointing"));
}

TEST(DeepSpeedImport, PipelineWithZero2Or3IsAWarningWithDeepSpeedsReason) {
  // 8 GPUs = 2 stages x 4 replicas; 64 = micro 2 x gas 8 x dp 4.
  const DeepSpeedImport ds = from_deepspeed(
      {{"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 2}, {"pipeline", {{"stages", 2}}},
       {"zero_optimization", {{"stage", 3}}}},
      "ds.json", 8, 4);
  EXPECT_EQ(ds.plan.pp, 2);
  EXPECT_EQ(ds.plan.dp, 4);
  EXPECT_TRUE(mentions(ds.warnings, "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")) << ds.warnings.size();
  const DeepSpeedImport one = from_deepspeed(
      {{"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 2}, {"pipeline", {{"stages", 2}}},
       {"zero_optimization", {{"stage", 1}}}},
      "ds.json", 8, 4);
  EXPECT_TRUE(one.warnings.empty());
}

TEST(DeepSpeedRoundTrip, ExportThenImportGivesThePlanBack) {
  const spec::Plan p = plan_of({{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batch", 2}, {"micro_batches", 4},
                                {"schedule", "interleaved"}, {"virtual_stages", 2}, {"sequence_parallel", true},
                                {"recompute", "selective"}, {"stage_layers", {4, 2}},
                                {"zero", {{"stage", 1}, {"reduce_bucket", 1'000'000}, {"overlap_comm", true}}}});
  const DeepSpeedImport back = from_deepspeed(to_deepspeed(p, training(16, spec::Dtype::kBf16)).config, "ds.json", 8, 6);
  EXPECT_EQ(spec::to_json(back.plan).dump(), spec::to_json([&] {
              spec::Plan q = p;
              q.file = back.plan.file;
              q.source = back.plan.source;
              return q;
            }()).dump());
  EXPECT_EQ(back.training.global_batch, 16);
  EXPECT_EQ(back.training.optimizer, spec::Optimizer::kAdamW);
}

TEST(DeepSpeedImport, OffloadParamIsReadWithStage3AndOptimizerOffload) {
  // HF's ZeRO-3 offload template: both offloads on the CPU.
  const nlohmann::json z3 = {{"train_batch_size", 64},
                             {"zero_optimization", {{"stage", 3},
                                                    {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}},
                                                    {"offload_param", {{"device", "cpu"}, {"pin_memory", true}}}}}};
  const DeepSpeedImport ds = from_deepspeed(z3, "ds.json", 8, 4);
  EXPECT_EQ(ds.plan.zero.offload_param, spec::Offload::kCpu);
  EXPECT_EQ(to_deepspeed(ds.plan, ds.training).config.at("zero_optimization").at("offload_param").at("device"), "cpu");
  nlohmann::json two = z3;
  two["zero_optimization"]["stage"] = 2;
  test::expect_spec_error([&] { from_deepspeed(two, "ds.json", 8, 4); }, "/zero_optimization/offload_param/device", "stage 3");
  nlohmann::json alone = z3;
  alone["zero_optimization"].erase("offload_optimizer");
  test::expect_spec_error([&] { from_deepspeed(alone, "ds.json", 8, 4); }, "/zero_optimization/offload_param/device",
                          "offload_optimizer");
  nlohmann::json nvme = z3;
  nvme["zero_optimization"]["offload_param"]["device"] = "nvme";
  test::expect_spec_error([&] { from_deepspeed(nvme, "ds.json", 8, 4); }, "/zero_optimization/offload_param/device", "not modelled");
}

}  // namespace
}  // namespace stagecraft::planner

namespace stagecraft::planner {
namespace {

// A ZeRO-3 config on 64 GPUs (bf16, micro-batch 4) with `keys` added to zero_optimization,
// imported for a cluster of `per_node` GPUs a node.
DeepSpeedImport import_zero3(const nlohmann::json& keys, int64_t per_node = 8) {
  nlohmann::json ds = {{"train_batch_size", 256}, {"train_micro_batch_size_per_gpu", 4}, {"bf16", {{"enabled", true}}},
                       {"zero_optimization", {{"stage", 3}}}};
  ds["zero_optimization"].update(keys);
  return from_deepspeed(ds, "ds.json", 64, 24, {}, per_node);
}

bool warned(const DeepSpeedImport& im, const std::string& fragment) {
  for (const std::string& w : im.warnings) {
    if (w.find(fragment) != std::string::npos) return true;
  }
  return false;
}

TEST(DeepSpeedImport, ZeroPlusPlusKeysBecomeThePlansVariants) {
  // hpZ over a node's 8 ranks; qwZ int8 with DeepSpeed's 8000-element groups; qgZ over 8 ranks a node
  const DeepSpeedImport all =
      import_zero3({{"zero_hpz_partition_size", 8}, {"zero_quantized_weights", true}, {"zero_quantized_gradients", true}});
  EXPECT_EQ(all.plan.zero.hpz_group, 8);
  EXPECT_EQ(all.plan.zero.quantized_weights, spec::kQwzDefault);
  EXPECT_EQ(all.plan.zero.quantized_gradients, spec::kQgzDefault);
  EXPECT_EQ(all.plan.zero.local_group, 8);
  // DeepSpeed's fp16 quantizer kernel on bf16 weights: said
  EXPECT_TRUE(warned(all, "cast to fp16 and back"));
  // MiCS: shard groups of 16, replicas all-reduced at the accumulation boundary; hierarchical over 2 nodes
  const DeepSpeedImport mics = import_zero3({{"mics_shard_size", 16}, {"mics_hierarchical_params_gather", true}});
  EXPECT_EQ(mics.plan.zero.shard_group, 16);
  EXPECT_EQ(mics.plan.zero.replica_sync, spec::ReplicaSync::kStep);
  EXPECT_TRUE(mics.plan.zero.hierarchical_gather);
  EXPECT_EQ(mics.plan.zero.local_group, 8);
  // export writes them back, and import reads the export as it was
  const DeepSpeedExport out = to_deepspeed(all.plan, all.training);
  const nlohmann::json& z = out.config.at("zero_optimization");
  EXPECT_EQ(z.at("zero_hpz_partition_size"), 8);
  EXPECT_EQ(z.at("zero_quantized_weights"), true);
  EXPECT_EQ(z.at("zero_quantized_gradients"), true);
  const DeepSpeedImport back = from_deepspeed(out.config, "exported.json", 64, 24, {}, 8);
  EXPECT_EQ(spec::to_json(back.plan.zero), spec::to_json(all.plan.zero));
  const DeepSpeedExport mics_out = to_deepspeed(mics.plan, mics.training);
  EXPECT_EQ(mics_out.config.at("zero_optimization").at("mics_shard_size"), 16);
  EXPECT_EQ(mics_out.config.at("zero_optimization").at("mics_hierarchical_params_gather"), true);
}

TEST(DeepSpeedImport, ZeroPlusPlusKeysDeepSpeedWouldRefuseAreRefusedWithItsReason) {
  // groups._create_zero_param_parallel_group asserts world % size == 0
  stagecraft::test::expect_spec_error([] { import_zero3({{"zero_hpz_partition_size", 3}}); },
                                      "/zero_optimization/zero_hpz_partition_size", "divisor of the world size 64");
  // stage3.py: "when enable all_to_all_reduce, reduce_scatter should also be enabled"
  stagecraft::test::expect_spec_error([] { import_zero3({{"zero_quantized_gradients", true}, {"reduce_scatter", false}}); },
                                      "/zero_optimization/reduce_scatter", "reduce_scatter should also be enabled");
  // mics_utils.py asserts the shard size divides the data-parallel world
  stagecraft::test::expect_spec_error([] { import_zero3({{"mics_shard_size", 12}}); }, "/zero_optimization/mics_shard_size",
                                      "divisor of the data-parallel world 64");
  // mics.py: "Local sharding has no support for CPU offloading"
  stagecraft::test::expect_spec_error(
      [] { import_zero3({{"mics_shard_size", 8}, {"offload_optimizer", {{"device", "cpu"}}}}); },
      "/zero_optimization/mics_shard_size", "no support for CPU offloading");
  // mics_utils.py: "sharding spans on single node, no need for hierarchy allgather"
  stagecraft::test::expect_spec_error(
      [] { import_zero3({{"mics_shard_size", 8}, {"mics_hierarchical_params_gather", true}}); },
      "/zero_optimization/mics_hierarchical_params_gather", "no need for hierarchy allgather");
  stagecraft::test::expect_spec_error([] { import_zero3({{"zero_hpz_partition_size", -1}}); },
                                      "/zero_optimization/zero_hpz_partition_size", "ge=0");
}

TEST(DeepSpeedImport, ZeroPlusPlusKeysDeepSpeedIgnoresAreDroppedWithAWarning) {
  // below stage 3 nothing reads them
  nlohmann::json ds = {{"train_batch_size", 256}, {"train_micro_batch_size_per_gpu", 4},
                       {"zero_optimization", {{"stage", 2}, {"zero_hpz_partition_size", 8}, {"zero_quantized_weights", true}}}};
  const DeepSpeedImport stage2 = from_deepspeed(ds, "ds.json", 64, 24, {}, 8);
  EXPECT_EQ(stage2.plan.zero.hpz_group, 0);
  EXPECT_FALSE(stage2.plan.zero.quantized_weights.on());
  EXPECT_TRUE(warned(stage2, "ZeRO-3 engine only"));
  // MiCS's engine is not given the ZeRO++ settings
  const DeepSpeedImport mics = import_zero3({{"mics_shard_size", 8}, {"zero_quantized_weights", true}});
  EXPECT_EQ(mics.plan.zero.shard_group, 8);
  EXPECT_FALSE(mics.plan.zero.quantized_weights.on());
  EXPECT_TRUE(warned(mics, "_return_mics_optimizer"));
  // qgZ on one node (64 GPUs a node): off, as DeepSpeed runs it only across nodes
  const DeepSpeedImport one = import_zero3({{"zero_quantized_gradients", true}}, 64);
  EXPECT_FALSE(one.plan.zero.quantized_gradients.on());
  EXPECT_TRUE(warned(one, "num_nodes > 1"));
}

}  // namespace
}  // namespace stagecraft::planner
