#include "core/spec/plan.hpp"

#include <gtest/gtest.h>

#include "core/spec/model.hpp"
#include "core/spec/training.hpp"
#include "support.hpp"

namespace stagecraft::spec {
namespace {

using nlohmann::json;
using test::expect_spec_error;

Model eight_layers() {
  return model_from_json({{"name", "m8"}, {"layers", 8}, {"hidden", 64}, {"heads", 8}, {"kv_heads", 2},
                          {"vocab", 100}, {"seq_len", 32}},
                         "m8.json");
}

Training batch(int64_t global_batch) {
  return training_from_json({{"global_batch", global_batch}, {"dtype", "bf16"}}, "t.json");
}

TEST(Plan, DefaultsFollowDeepSpeed) {
  Plan p = plan_from_json({{"dp", 2}, {"zero", {{"stage", 3}}}}, "p.json");
  EXPECT_EQ(p.tp, 1);
  EXPECT_EQ(p.schedule, Schedule::k1F1B);
  EXPECT_EQ(p.zero.prefetch_bucket, 50'000'000);
  EXPECT_EQ(p.zero.reduce_bucket, 500'000'000);
  EXPECT_EQ(p.zero.param_persistence_threshold, 100'000);
  EXPECT_TRUE(p.zero.overlap_comm);  // DeepSpeed turns it on by default for stage 3 only
  EXPECT_FALSE(plan_from_json({{"zero", {{"stage", 2}}}}, "p.json").zero.overlap_comm);
  Plan again = plan_from_json(to_json(p), "again.json");
  EXPECT_EQ(to_json(again), to_json(p));
}

TEST(Plan, ValidPlanPasses) {
  // 2 x 2 x 2 = 8 GPUs; 2 sequences x 4 micro-batches x dp 2 = 16 = global batch.
  Plan p = plan_from_json({{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batch", 2}, {"micro_batches", 4},
                           {"schedule", "interleaved"}, {"virtual_stages", 2}, {"stage_layers", {4, 4}},
                           {"sequence_parallel", true}},
                          "p.json");
  EXPECT_NO_THROW(validate_plan(p, eight_layers(), batch(16), 8));
  // tp = 4 with kv_heads = 2: each pair of tp ranks shares a replicated KV head, as Megatron allows.
  Plan wide = plan_from_json({{"tp", 4}, {"micro_batches", 16}}, "p.json");
  EXPECT_NO_THROW(validate_plan(wide, eight_layers(), batch(16), 4));
}

struct BadPlan {
  const char* what;
  json plan;
  int64_t global_batch;
  int64_t gpus;
  const char* pointer;
  const char* fragment;
};

TEST(Plan, RejectsInconsistentPlans) {
  const BadPlan cases[] = {
      {"gpu count", {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 8}}, 16, 16, "/dp",
       "tp × pp × dp (2 × 2 × 2 = 8) to equal the GPU count, 16"},
      {"batch identity", {{"dp", 4}, {"micro_batch", 2}, {"micro_batches", 3}}, 16, 4, "/micro_batches",
       "micro_batch × micro_batches × dp (2 × 3 × 4 = 24) to equal global_batch 16 of t.json"},
      {"tp not dividing heads", {{"tp", 16}, {"micro_batches", 16}}, 16, 16, "/tp", "a divisor of heads (8"},
      {"stage layers sum", {{"pp", 2}, {"micro_batches", 16}, {"stage_layers", {3, 4}}}, 16, 2, "/stage_layers",
       "summing to the model's 8 layers, got 7"},
      {"stage layers length", {{"pp", 2}, {"micro_batches", 16}, {"stage_layers", {8}}}, 16, 2, "/stage_layers",
       "one entry per pipeline stage (pp = 2), got 1"},
      {"too many stages", {{"pp", 16}, {"micro_batches", 16}}, 16, 16, "/pp", "at most the model's 8 layers"},
      {"chunk without layers",
       {{"pp", 2}, {"micro_batches", 16}, {"schedule", "interleaved"}, {"virtual_stages", 2}, {"stage_layers", {7, 1}}},
       16, 2, "/stage_layers/1", "at least virtual_stages (2) layers, got 1"},
      {"experts of a dense model", {{"dp", 2}, {"ep", 2}, {"micro_batches", 8}}, 16, 2, "/ep",
       "1: model m8 has no experts, got ep 2"},
  };
  for (const BadPlan& c : cases) {
    SCOPED_TRACE(c.what);
    Plan p = plan_from_json(c.plan, "p.json");
    expect_spec_error([&] { validate_plan(p, eight_layers(), batch(c.global_batch), c.gpus); }, c.pointer,
                      c.fragment);
  }
}

TEST(Plan, RejectsBadFieldsOnLoad) {
  expect_spec_error([] { plan_from_json({{"schedule", "pipedream"}}, "p.json"); }, "/schedule",
                    "one of \"gpipe\", \"1f1b\", \"interleaved\", \"zb-h1\"");
  expect_spec_error([] { plan_from_json({{"virtual_stages", 2}}, "p.json"); }, "/virtual_stages",
                    "1 unless \"schedule\" is \"interleaved\"");
  expect_spec_error([] { plan_from_json({{"pp", 2}, {"schedule", "interleaved"}, {"virtual_stages", 2},
                                         {"micro_batches", 3}}, "p.json"); },
                    "/micro_batches", "a multiple of pp (2)");
  expect_spec_error([] { plan_from_json({{"sequence_parallel", true}}, "p.json"); }, "/sequence_parallel",
                    "false when tp is 1");
  expect_spec_error([] { plan_from_json({{"zero", {{"stage", 4}}}}, "p.json"); }, "/zero/stage",
                    "a ZeRO stage 0, 1, 2 or 3, got 4");
  expect_spec_error([] { plan_from_json({{"zero", {{"reduce_bucket", 0}}}}, "p.json"); }, "/zero/reduce_bucket",
                    "an integer from 1 to " + std::to_string(int64_t{1} << 50) + ", got 0");
  // 2^62 would overflow tp × pp × dp; every parallel size is at most the GPU limit, 2^20.
  expect_spec_error([] { plan_from_json({{"tp", int64_t{1} << 62}}, "p.json"); }, "/tp",
                    "an integer from 1 to 1048576, got 4611686018427387904");
  expect_spec_error([] { plan_from_json({{"zero", {{"stage", 0}, {"offload_optimizer", "cpu"}}}}, "p.json"); },
                    "/zero/offload_optimizer", "needs stage 1, 2 or 3");
  expect_spec_error([] { plan_from_json({{"zero", {{"prefetch_bucket_size", 5}}}}, "p.json"); },
                    "/zero/prefetch_bucket_size", "did you mean \"prefetch_bucket\"");
  expect_spec_error([] { plan_from_json({{"stage_layers", {2, 0}}}, "p.json"); }, "/stage_layers/1",
                    "a positive layer count");
  expect_spec_error([] { training_from_json({{"global_batch", 8}, {"dtype", "fp64"}}, "t.json"); }, "/dtype",
                    "one of \"fp16\", \"bf16\", \"fp32\"");
  expect_spec_error([] { training_from_json({{"global_batch", 0}, {"dtype", "fp16"}}, "t.json"); }, "/global_batch",
                    "a positive number of sequences");
  expect_spec_error([] { training_from_json({{"global_batch", 8}, {"dtype", "bf16"}, {"tp_comm_overlap", "yes"}}, "t.json"); },
                    "/tp_comm_overlap", "true or false");
}

// Expert parallelism against a model with 4 experts (top-2) and a shared expert of 100, 8 GPUs.
TEST(Plan, ExpertParallelismIsCheckedAgainstTheModelAndFramework) {
  const Model moe = model_from_json({{"name", "moe4"}, {"layers", 4}, {"hidden", 64}, {"heads", 8}, {"ffn_hidden", 128},
                                     {"vocab", 100}, {"seq_len", 32}, {"mlp", "swiglu"},
                                     {"moe", {{"experts", 4}, {"experts_per_token", 2}, {"expert_ffn_hidden", 32},
                                              {"shared_ffn_hidden", 100}}}},
                                    "moe4.json");
  const Training megatron = training_from_json({{"global_batch", 16}, {"dtype", "bf16"}, {"framework", "megatron"}}, "t.json");
  // 8 ranks = tp 2 × dp 4: ep 4 folds into them (8 / 4 = 2 ranks hold each expert)
  Plan ok = plan_from_json({{"tp", 2}, {"dp", 4}, {"ep", 4}, {"sequence_parallel", true}, {"micro_batches", 4}}, "p.json");
  EXPECT_NO_THROW(validate_plan(ok, moe, megatron, 8));
  EXPECT_EQ(ok.expert_dp(), 2 * 4 / 4);
  EXPECT_EQ(plan_from_json(to_json(ok), "again.json").ep, 4);
  EXPECT_NE(summary(ok).find(" ep4 "), std::string::npos);
  const BadPlan cases[] = {
      {"ep not dividing the experts", {{"dp", 8}, {"ep", 8}, {"micro_batches", 2}}, 16, 8, "/ep", "a divisor of the experts (4"},
      {"ep beyond tp x dp", {{"pp", 4}, {"dp", 2}, {"ep", 4}, {"micro_batches", 8}}, 16, 8, "/ep", "a divisor of tp × cp × dp (2)"},
      {"tp without sp", {{"tp", 2}, {"dp", 4}, {"micro_batches", 4}}, 16, 8, "/sequence_parallel", "true with tp > 1"},
      {"etp not dividing the experts' width", {{"dp", 8}, {"etp", 64}, {"micro_batches", 2}}, 16, 8, "/etp",
       "a divisor of the routed experts' width (32"},
      {"ep x etp beyond tp x dp", {{"dp", 8}, {"ep", 4}, {"etp", 4}, {"micro_batches", 2}}, 16, 8, "/etp",
       "ep × etp a divisor of tp × cp × dp (8)"},
      {"shared width over tp", {{"tp", 8}, {"sequence_parallel", true}, {"micro_batches", 16}}, 16, 8, "/tp",
       "a divisor of the shared experts' width (100"},
      {"zero-3 with experts apart", {{"dp", 8}, {"ep", 2}, {"micro_batches", 2}, {"zero", {{"stage", 3}}}}, 16, 8,
       "/zero/stage", "at most 2 with experts held by other ranks"},
  };
  for (const BadPlan& c : cases) {
    SCOPED_TRACE(c.what);
    expect_spec_error([&] { validate_plan(plan_from_json(c.plan, "p.json"), moe, megatron, c.gpus); }, c.pointer, c.fragment);
  }
  // ep 1 with dp only: the experts' data-parallel group is the dense one, so ZeRO-3 is fine
  EXPECT_NO_THROW(validate_plan(plan_from_json({{"dp", 8}, {"micro_batches", 2}, {"zero", {{"stage", 3}}}}, "p.json"), moe,
                                batch(16), 8));
  expect_spec_error([&] { validate_plan(ok, moe, batch(16), 8); }, "/ep", "DeepSpeed-MoE carves expert-parallel groups");
  // expert tensor parallelism: the grid etp 2 × ep 2 × edp 2 folds into dp 8 (Megatron-Core);
  // DeepSpeed-MoE keeps each expert whole
  const Plan etp = plan_from_json({{"dp", 8}, {"ep", 2}, {"etp", 2}, {"micro_batches", 2}}, "p.json");
  EXPECT_NO_THROW(validate_plan(etp, moe, megatron, 8));
  EXPECT_EQ(etp.expert_dp(), 8 / (2 * 2));
  EXPECT_EQ(plan_from_json(to_json(etp), "again.json").etp, 2);
  EXPECT_NE(summary(etp).find(" ep2 etp2 "), std::string::npos);
  expect_spec_error([&] { validate_plan(etp, moe, batch(16), 8); }, "/etp", "DeepSpeed-MoE keeps each expert whole");
  // the all-gather token dispatcher: Megatron-Core's, without expert biases, written back only when chosen
  const Plan ag = plan_from_json({{"dp", 8}, {"ep", 2}, {"moe_dispatcher", "allgather"}, {"micro_batches", 2}}, "p.json");
  Model unbiased = moe;
  unbiased.set_biases(false);
  EXPECT_NO_THROW(validate_plan(ag, unbiased, megatron, 8));
  expect_spec_error([&] { validate_plan(ag, moe, megatron, 8); }, "/moe_dispatcher", "does not support them");
  EXPECT_EQ(plan_from_json(to_json(ag), "again.json").moe_dispatcher, MoeDispatcher::kAllGather);
  EXPECT_FALSE(to_json(ok).contains("moe_dispatcher"));
  EXPECT_NE(summary(ag).find(" ep2 ag-dispatch "), std::string::npos);
  expect_spec_error([&] { validate_plan(ag, unbiased, batch(16), 8); }, "/moe_dispatcher", "the all-gather token dispatcher is Megatron-Core's");
  expect_spec_error([] { plan_from_json({{"moe_dispatcher", "deepep"}}, "p.json"); }, "/moe_dispatcher", "\"alltoall\"");
  // the flex dispatcher (DeepEP): Megatron-Core's, over ep × etp > 1, not with padding to capacity
  const Plan flex = plan_from_json({{"dp", 8}, {"ep", 2}, {"moe_dispatcher", "flex"}, {"micro_batches", 2}}, "p.json");
  EXPECT_NO_THROW(validate_plan(flex, moe, megatron, 8));
  EXPECT_EQ(plan_from_json(to_json(flex), "again.json").moe_dispatcher, MoeDispatcher::kFlex);
  EXPECT_NE(summary(flex).find(" ep2 flex-dispatch "), std::string::npos);
  expect_spec_error([&] { validate_plan(flex, moe, batch(16), 8); }, "/moe_dispatcher", "the flex token dispatcher (DeepEP) is Megatron-Core's");
  const Plan flex_alone = plan_from_json({{"dp", 8}, {"moe_dispatcher", "flex"}, {"micro_batches", 2}}, "p.json");
  expect_spec_error([&] { validate_plan(flex_alone, moe, megatron, 8); }, "/moe_dispatcher", "requires TPxEP > 1");
  // DeepEP's configs: 2, 4, 8, 16, 24, ... 160 ranks; not 12, not 256
  EXPECT_TRUE(deepep_group_size(16) && deepep_group_size(160) && !deepep_group_size(12) && !deepep_group_size(256));
  const Plan flex_large = plan_from_json({{"dp", 16}, {"ep", 16}, {"moe_dispatcher", "flex"}, {"micro_batches", 1}}, "p.json");
  Model many = moe;
  many.moe.experts = 256;
  EXPECT_NO_THROW(validate_plan(flex_large, many, megatron, 16));
  Model twelve = moe;
  twelve.moe.experts = 96;
  const Training t24 = training_from_json({{"global_batch", 24}, {"dtype", "bf16"}, {"framework", "megatron"}}, "t.json");
  Plan flex12 = plan_from_json({{"dp", 12}, {"ep", 12}, {"moe_dispatcher", "flex"}, {"micro_batches", 2}}, "p.json");
  expect_spec_error([&] { validate_plan(flex12, twelve, t24, 12); }, "/moe_dispatcher", "Unsupported number of EP ranks");
  flex12.moe_dispatcher = MoeDispatcher::kAllToAll;
  EXPECT_NO_THROW(validate_plan(flex12, twelve, t24, 12));
  Training padded = megatron;
  padded.moe_capacity_factor = 1.0;
  padded.moe_pad_to_capacity = true;
  expect_spec_error([&] { validate_plan(flex, moe, padded, 8); }, "/moe_dispatcher", "does not support moe_pad_expert_input_to_capacity");
}

// "tp_comm_overlap" is read, defaults to false and is written back only when set.
TEST(Plan, TrainingTpCommOverlapRoundTrips) {
  const Training off = training_from_json({{"global_batch", 8}, {"dtype", "bf16"}}, "t.json");
  EXPECT_FALSE(off.tp_comm_overlap);
  EXPECT_FALSE(to_json(off).contains("tp_comm_overlap"));
  const Training on = training_from_json({{"global_batch", 8}, {"dtype", "bf16"}, {"tp_comm_overlap", true}}, "t.json");
  EXPECT_TRUE(on.tp_comm_overlap);
  EXPECT_TRUE(training_from_json(to_json(on), "back.json").tp_comm_overlap);
}

// The experts' capacity: dropless unless set, written back only when set, refused by field where
// it makes no sense; the busiest rank's load is the imbalance (dropless), min(imbalance, c) with
// drops, c padded: 1.5 and 1.25 give 1.25 dropped and padded, 1.1 and 1.25 give 1.1 dropped.
TEST(Plan, TrainingExpertCapacityRoundTripsAndCapsTheBusiestLoad) {
  const Training dropless = training_from_json({{"global_batch", 8}, {"dtype", "bf16"}, {"moe_imbalance", 1.5}}, "t.json");
  EXPECT_EQ(dropless.moe_capacity_factor, 0.0);
  EXPECT_EQ(dropless.moe_busiest_load(), 1.5);
  EXPECT_FALSE(to_json(dropless).contains("moe_capacity_factor"));
  const nlohmann::json capped = {{"global_batch", 8}, {"dtype", "bf16"}, {"moe_imbalance", 1.5}, {"moe_capacity_factor", 1.25}};
  const Training dropped = training_from_json(capped, "t.json");
  EXPECT_EQ(dropped.moe_busiest_load(), 1.25);
  nlohmann::json padded_json = capped;
  padded_json["moe_pad_to_capacity"] = true;
  padded_json["moe_imbalance"] = 1.1;
  const Training padded = training_from_json(padded_json, "t.json");
  EXPECT_EQ(padded.moe_busiest_load(), 1.25);
  nlohmann::json light = capped;
  light["moe_imbalance"] = 1.1;
  EXPECT_EQ(training_from_json(light, "t.json").moe_busiest_load(), 1.1);
  const Training back = training_from_json(to_json(padded), "back.json");
  EXPECT_EQ(back.moe_capacity_factor, 1.25);
  EXPECT_TRUE(back.moe_pad_to_capacity);
  expect_spec_error([] { training_from_json({{"global_batch", 8}, {"dtype", "bf16"}, {"moe_capacity_factor", -1}}, "t.json"); },
                    "/moe_capacity_factor", "above 0 and at most 1024");
  expect_spec_error([] { training_from_json({{"global_batch", 8}, {"dtype", "bf16"}, {"moe_pad_to_capacity", true}}, "t.json"); },
                    "/moe_pad_to_capacity", "false without moe_capacity_factor");
}

// Products of allowed sizes are checked, never wrapped: 2^24 × 2^14 × 2^20 = 2^58 sequences.
// Bias-based balancing's update rate: Megatron-Core's 1e-3 unless set, written back only when set,
// and refused outside [0, 1] by its pointer.
TEST(Plan, TrainingExpertBiasUpdateRateRoundTripsAndIsChecked) {
  const Training d = training_from_json({{"global_batch", 8}, {"dtype", "bf16"}}, "t.json");
  EXPECT_EQ(d.moe_router_bias_update_rate, 1e-3);
  EXPECT_FALSE(to_json(d).contains("moe_router_bias_update_rate"));
  const Training set = training_from_json({{"global_batch", 8}, {"dtype", "bf16"}, {"moe_router_bias_update_rate", 0.01}}, "t.json");
  EXPECT_EQ(training_from_json(to_json(set), "back.json").moe_router_bias_update_rate, 0.01);
  expect_spec_error([] { training_from_json({{"global_batch", 8}, {"dtype", "bf16"}, {"moe_router_bias_update_rate", 2}}, "t.json"); },
                    "/moe_router_bias_update_rate", "from 0 to 1");
}

TEST(Plan, ProductsThatWouldOverflowAreRefused) {
  Plan p = plan_from_json({{"dp", int64_t{1} << 20}, {"micro_batch", int64_t{1} << 24}, {"micro_batches", int64_t{1} << 14}},
                          "p.json");
  expect_spec_error([&] { validate_plan(p, eight_layers(), batch(16), int64_t{1} << 20); }, "/micro_batches",
                    "to equal global_batch 16");
  // 2^24 sequences of 2^13 tokens = 2^37 tokens a step, above the 2^32 limit.
  Model long_seq = model_from_json({{"name", "long"}, {"layers", 8}, {"hidden", 64}, {"heads", 8}, {"vocab", 100},
                                    {"seq_len", 8192}},
                                   "long.json");
  Plan q = plan_from_json({{"micro_batch", 1024}, {"micro_batches", int64_t{1} << 14}}, "p.json");
  expect_spec_error([&] { validate_plan(q, long_seq, batch(int64_t{1} << 24), 1); }, "/global_batch",
                    "(16777216 × 8192) at most 4294967296 tokens per step");
  expect_spec_error([] { plan_from_json({{"micro_batches", 16385}}, "p.json"); }, "/micro_batches",
                    "an integer from 1 to 16384, got 16385");
  expect_spec_error([] { training_from_json({{"global_batch", 1e18}, {"dtype", "fp16"}}, "t.json"); }, "/global_batch",
                    "at most 16777216");
}

TEST(Plan, SummaryNamesEveryChoice) {
  Plan p = plan_from_json({{"tp", 8}, {"pp", 4}, {"dp", 2}, {"micro_batches", 8}, {"schedule", "interleaved"},
                           {"virtual_stages", 3}, {"sequence_parallel", true}, {"recompute", "full"},
                           {"zero", {{"stage", 1}}}},
                          "p.json");
  EXPECT_EQ(summary(p), "tp8 pp4 dp2 mb1x8 interleaved v3 zero1 sp recompute=full");
}

TEST(Plan, OffloadParamNeedsStage3AndTheOptimizerOffloaded) {
  const spec::Plan p = plan_from_json({{"dp", 8}, {"zero", {{"stage", 3}, {"offload_optimizer", "cpu"}, {"offload_param", "cpu"}}}},
                                      "p.json");
  EXPECT_EQ(p.zero.offload_param, Offload::kCpu);
  EXPECT_NE(summary(p).find("offload_param=cpu"), std::string::npos);
  EXPECT_EQ(plan_from_json(to_json(p), "again.json").zero.offload_param, Offload::kCpu);
  test::expect_spec_error([] { plan_from_json({{"zero", {{"stage", 2}, {"offload_optimizer", "cpu"}, {"offload_param", "cpu"}}}}, "p.json"); },
                          "/zero/offload_param", "stage is 3");
  test::expect_spec_error([] { plan_from_json({{"zero", {{"stage", 3}, {"offload_param", "cpu"}}}}, "p.json"); },
                          "/zero/offload_param", "offload_optimizer");
}

}  // namespace
}  // namespace stagecraft::spec
