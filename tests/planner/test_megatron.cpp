// A plan as Megatron-LM's arguments (planner/megatron.hpp): each value from the plan, the training
// and the model as the test reads them off, and a warning wherever Megatron-LM cannot run the plan
// as Stagecraft simulated it.
#include "planner/megatron.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "fixtures.hpp"

namespace stagecraft::planner {
namespace {

bool has(const MegatronExport& x, const std::string& arg) {
  return std::find(x.args.begin(), x.args.end(), arg) != x.args.end();
}

bool warns(const MegatronExport& x, const std::string& fragment) {
  return std::any_of(x.warnings.begin(), x.warnings.end(), [&](const std::string& w) { return w.find(fragment) != std::string::npos; });
}

// Megatron-Core's Mixtral benchmark plan: TP1 EP8 PP4 VP8, MBS 1, GBS 256, the distributed optimizer.
TEST(Megatron, TheMixtralBenchmarkPlanGivesItsArguments) {
  const spec::Model m = test::bundled_model("mixtral-8x7b");
  spec::Training t = test::training(256);
  t.framework = spec::Framework::kMegatron;
  spec::Plan p = spec::plan_from_json({{"pp", 4}, {"dp", 16}, {"ep", 8}, {"micro_batches", 16}, {"schedule", "interleaved"},
                                       {"virtual_stages", 8}, {"zero", {{"stage", 1}}}},
                                      "plan.json");
  const MegatronExport x = to_megatron(p, t, &m);
  EXPECT_TRUE(x.warnings.empty()) << x.warnings.front();
  for (const char* a : {"--tensor-model-parallel-size 1", "--pipeline-model-parallel-size 4", "--expert-model-parallel-size 8",
                        "--expert-tensor-parallel-size 1",
                        "--num-layers-per-virtual-pipeline-stage 1",   // 32 layers / (4 stages · 8 chunks)
                        "--micro-batch-size 1", "--global-batch-size 256",  // 1 · 16 micro-batches · dp 16
                        "--use-distributed-optimizer", "--bf16", "--num-layers 32", "--hidden-size 4096",
                        "--ffn-hidden-size 14336", "--num-attention-heads 32", "--group-query-attention",
                        "--num-query-groups 8", "--swiglu", "--normalization RMSNorm", "--untie-embeddings-and-output-weights",
                        "--disable-bias-linear", "--rotary-base 1000000", "--num-experts 8", "--moe-router-topk 2", "--moe-ffn-hidden-size 14336",
                        "--moe-layer-freq '([1]*32)'", "--moe-grouped-gemm", "--moe-token-dispatcher-type alltoall"}) {
    EXPECT_TRUE(has(x, a)) << a << "\n" << x.text();
  }
  EXPECT_FALSE(has(x, "--sequence-parallel"));
  EXPECT_NE(x.text().find("--tensor-model-parallel-size 1 \\\n--pipeline-model-parallel-size 4"), std::string::npos);
  // the same plan with expert tensor parallelism and the all-gather dispatcher
  p.etp = 2;
  p.moe_dispatcher = spec::MoeDispatcher::kAllGather;
  const MegatronExport y = to_megatron(p, t, &m);
  EXPECT_TRUE(has(y, "--expert-tensor-parallel-size 2")) << y.text();
  EXPECT_TRUE(has(y, "--moe-token-dispatcher-type allgather")) << y.text();
  EXPECT_FALSE(has(y, "--moe-flex-dispatcher-backend")) << y.text();
  // the flex dispatcher with DeepEP as its backend
  p.moe_dispatcher = spec::MoeDispatcher::kFlex;
  const MegatronExport z = to_megatron(p, t, &m);
  EXPECT_TRUE(has(z, "--moe-token-dispatcher-type flex")) << z.text();
  EXPECT_TRUE(has(z, "--moe-flex-dispatcher-backend deepep")) << z.text();
}

// DeepSeek-V3: three dense layers first, a sigmoid router with its score correction (and its update
// rate where not Megatron's default), group-limited and scaled, latent attention.
TEST(Megatron, ExpertPatternsAndLatentAttentionComeFromTheModel) {
  const spec::Model m = test::bundled_model("deepseek-v3");
  spec::Training t = test::training(64);
  t.framework = spec::Framework::kMegatron;
  const spec::Plan p = spec::plan_from_json({{"dp", 64}, {"ep", 64}, {"zero", {{"stage", 1}}}}, "plan.json");
  const MegatronExport x = to_megatron(p, t, &m);
  for (const char* a : {"--moe-layer-freq '([0]*3+[1]*58)'", "--moe-router-score-function sigmoid",
                        "--moe-router-enable-expert-bias", "--moe-shared-expert-intermediate-size 2048",
                        "--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512", "--qk-head-dim 128",
                        "--qk-pos-emb-head-dim 64", "--v-head-dim 128", "--expert-model-parallel-size 64",
                        "--moe-router-topk-scaling-factor 2.5", "--moe-router-num-groups 8", "--moe-router-group-topk 4"}) {
    EXPECT_TRUE(has(x, a)) << a << "\n" << x.text();
  }
  EXPECT_FALSE(has(x, "--moe-router-bias-update-rate")) << "Megatron's default 1e-3 needs no argument";
  t.moe_router_bias_update_rate = 0.01;
  EXPECT_TRUE(has(to_megatron(p, t, &m), "--moe-router-bias-update-rate 0.01"));
}

// The router's form and the balancing loss: Qwen2-MoE's softmax without renormalising the top k is
// Megatron's pre-softmax; the training's coefficient its aux loss; gpt-oss's sinks and logit bias
// and OLMoE's whole-projection q/k norms have no argument: warnings.
TEST(Megatron, RouterFormAndBalancingLossComeFromTheModelAndTraining) {
  spec::Model m = test::bundled_model("mixtral-8x7b");
  m.moe.normalize_top_k = false;
  spec::Training t = test::training(64);
  t.framework = spec::Framework::kMegatron;
  t.moe_aux_loss_coeff = 0.01;
  const spec::Plan p = spec::plan_from_json({{"dp", 64}, {"ep", 8}, {"zero", {{"stage", 1}}}}, "plan.json");
  const MegatronExport x = to_megatron(p, t, &m);
  for (const char* a : {"--moe-router-pre-softmax", "--moe-router-load-balancing-type aux_loss", "--moe-aux-loss-coeff 0.01"}) {
    EXPECT_TRUE(has(x, a)) << a << "\n" << x.text();
  }
  EXPECT_TRUE(x.warnings.empty());
  m.attention_sinks = true, m.moe.router_logit_bias = true, m.qk_norm = true, m.qk_norm_whole = true;
  const MegatronExport y = to_megatron(p, t, &m);
  EXPECT_TRUE(warns(y, "attention sinks"));
  EXPECT_TRUE(warns(y, "logit bias"));
  EXPECT_TRUE(warns(y, "whole projections"));
  spec::Model mixtral = test::bundled_model("mixtral-8x7b");
  t.moe_aux_loss_coeff = 0;
  EXPECT_FALSE(has(to_megatron(p, t, &mixtral), "--moe-router-pre-softmax"));   // Mixtral renormalises its top 2
  // dropless unless the training sets a capacity; padding only with it
  EXPECT_FALSE(has(to_megatron(p, t, &mixtral), "--moe-expert-capacity-factor 1.25"));
  t.moe_capacity_factor = 1.25;
  t.moe_pad_to_capacity = true;
  const MegatronExport capped = to_megatron(p, t, &mixtral);
  EXPECT_TRUE(has(capped, "--moe-expert-capacity-factor 1.25")) << capped.text();
  EXPECT_TRUE(has(capped, "--moe-pad-expert-input-to-capacity")) << capped.text();
}

// A dense plan Megatron-LM runs otherwise: ZeRO-3, a zero-bubble schedule, another framework.
TEST(Megatron, WhatMegatronCannotRunIsAWarning) {
  const spec::Model m = test::bundled_model("gpt3-1.3b");
  const spec::Training deepspeed = test::training(64);   // the default framework: DeepSpeed
  const spec::Plan p = spec::plan_from_json({{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 32}, {"schedule", "zb-h1"},
                                             {"sequence_parallel", true}, {"recompute", "full"}, {"zero", {{"stage", 3}}}},
                                            "plan.json");
  const MegatronExport x = to_megatron(p, deepspeed, &m);
  EXPECT_TRUE(warns(x, "framework is deepspeed"));
  EXPECT_TRUE(warns(x, "ZeRO-3"));
  EXPECT_TRUE(warns(x, "zero-bubble"));
  for (const char* a : {"--sequence-parallel", "--recompute-granularity full", "--recompute-method uniform",
                        "--recompute-num-layers 1", "--global-batch-size 64"}) {   // 1 · 32 · dp 2
    EXPECT_TRUE(has(x, a)) << a;
  }
  EXPECT_FALSE(has(x, "--expert-model-parallel-size 1"));   // a dense model has no expert arguments
  // without a model: the plan's arguments alone, and a comment saying what is left to add
  const MegatronExport bare = to_megatron(p, deepspeed, nullptr);
  EXPECT_FALSE(has(bare, "--num-layers 24"));
  EXPECT_NE(bare.text().find("# without --model"), std::string::npos);
}

}  // namespace
}  // namespace stagecraft::planner
