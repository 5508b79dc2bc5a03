// The compute model's arithmetic terms (sim/models/compute.hpp) on units small enough to derive by
// hand: GEMMs at peak, memory free, so a unit's time is its GEMM FLOPs / peak plus, when the
// profile sets activation_elems_per_s, its activation elements / that rate; the optimizer's is its
// bytes over the memory throughput plus, with gpu.adam_params_per_s, its parameters / that rate.
#include "sim/models/compute.hpp"

#include <gtest/gtest.h>

#include "cluster_fixture.hpp"

namespace stagecraft::sim {
namespace {

spec::Cluster peak_cluster() {
  spec::Cluster c = test::make_cluster();
  c.gpu.peak_flops[spec::Dtype::kFp32] = 1e12;
  c.gpu.matmul_efficiency = {{1.0, 1.0}};
  c.gpu.hbm_Bps = 1e30;
  return c;
}

// One block of hidden 64, ffn 256 (GELU), 4 heads, sequence 32, vocabulary 2; micro-batch 2.
spec::Model one_block(const char* mlp) {
  return spec::model_from_json({{"name", "one-block"}, {"layers", 1}, {"hidden", 64}, {"heads", 4}, {"ffn_hidden", 256},
                                {"vocab", 2}, {"seq_len", 32}, {"mlp", mlp}, {"tied_embeddings", false}},
                               "one-block.json");
}

struct Workload {
  spec::Model model;
  spec::Training training;
  spec::Plan plan;
};

Workload workload(const char* mlp, int64_t tp) {
  Workload s{one_block(mlp), spec::training_from_json({{"attention", "unfused"}, {"global_batch", 2}, {"dtype", "fp32"}}, "t.json"),
          spec::plan_from_json({{"tp", tp}, {"micro_batch", 2}, {"micro_batches", 1}}, "p.json")};
  return s;
}

TEST(ComputeModel, GeluActivationAddsElementsOverRateToForwardAndBackwardInput) {
  // T = 2·32 = 64 tokens, f = 256: the MLP's GELU runs on 64·256 = 16,384 elements.
  // GEMMs (up and down): 2 · 2·T·h·f = 2 · 2·64·64·256 = 4,194,304 FLOPs at 1e12 → 4.194304 µs.
  // Activation at 1e8 elements/s: 16,384 / 1e8 = 163.84 µs, in forward and in backward input.
  const Workload s = workload("gelu", 1);
  spec::Cluster c = peak_cluster();
  const ComputeModel without(s.model, c, s.training, s.plan);
  c.gpu.activation_elems_per_s = 1e8;
  const ComputeModel with(s.model, c, s.training, s.plan);
  const UnitTimes& mlp0 = without.units()[2];  // units: embedding, attention, MLP, head
  const UnitTimes& mlp1 = with.units()[2];
  const double gemm_s = 2 * (2.0 * 64 * 64 * 256) / 1e12, activation_s = 64.0 * 256 / 1e8;
  EXPECT_NEAR(mlp0.forward_s, gemm_s, 1e-15);
  EXPECT_NEAR(mlp1.forward_s, gemm_s + activation_s, 1e-15);
  EXPECT_NEAR(mlp1.backward_input_s - mlp0.backward_input_s, activation_s, 1e-15);
  EXPECT_DOUBLE_EQ(mlp1.backward_weight_s, mlp0.backward_weight_s);  // the weight gradient has none
  for (int u : {0, 1, 3}) {                                           // nor have the other units
    EXPECT_DOUBLE_EQ(with.units()[u].forward_s, without.units()[u].forward_s) << "unit " << u;
    EXPECT_DOUBLE_EQ(with.units()[u].backward_input_s, without.units()[u].backward_input_s) << "unit " << u;
  }
  // A Backward over the whole model is backward input + backward weight: the activation once.
  EXPECT_NEAR(with.compute_s(program::Op::kBackward, 0, 4) - without.compute_s(program::Op::kBackward, 0, 4), activation_s,
              1e-15);
}

TEST(ComputeModel, SwigluActivationRunsOnTheTensorParallelShare) {
  // tp = 2: f_r = 256 / 2 = 128 columns of the SwiGLU's sigmoid per token, T = 64:
  // 64·128 = 8,192 elements at 1e8/s = 81.92 µs.
  const Workload s = workload("swiglu", 2);
  spec::Cluster c = peak_cluster();
  const ComputeModel without(s.model, c, s.training, s.plan);
  c.gpu.activation_elems_per_s = 1e8;
  const ComputeModel with(s.model, c, s.training, s.plan);
  EXPECT_NEAR(with.units()[2].forward_s - without.units()[2].forward_s, 64.0 * 128 / 1e8, 1e-15);
}

TEST(ComputeModel, AdamOnTheGpuAddsParametersOverItsRate) {
  // fp32: 2·12 + 4 = 28 bytes per parameter at hbm_Bps 1e10 · memory_efficiency 0.5 = 5e9 B/s;
  // 1e6 parameters: 28e6 / 5e9 = 5.6 ms, plus 1e6 / 2.5e8 = 4 ms when gpu.adam_params_per_s is set.
  const Workload s = workload("gelu", 1);
  spec::Cluster c = peak_cluster();
  c.gpu.hbm_Bps = 1e10;
  c.gpu.memory_efficiency = 0.5;
  EXPECT_NEAR(ComputeModel(s.model, c, s.training, s.plan).optimizer_gpu_s(1'000'000), 28e6 / 5e9, 1e-15);
  c.gpu.adam_params_per_s = 2.5e8;
  EXPECT_NEAR(ComputeModel(s.model, c, s.training, s.plan).optimizer_gpu_s(1'000'000), 28e6 / 5e9 + 1e6 / 2.5e8, 1e-15);
}

TEST(ComputeModel, OptimizerStepIsTheFrameworksStep) {
  // 1e6 parameters updated at hbm_Bps 1e10 x memory_efficiency 0.5 = 5e9 B/s, bytes per parameter as
  // each framework's step moves them (core/spec/framework.hpp): the fused Adam reads the fp32
  // master, gradient, momentum and variance and writes three of them, 16 + 12 = 28.
  spec::Cluster c = peak_cluster();
  c.gpu.hbm_Bps = 1e10;
  c.gpu.memory_efficiency = 0.5;
  c.gpu.peak_flops[spec::Dtype::kBf16] = c.gpu.peak_flops[spec::Dtype::kFp16] = 1e15;
  const spec::Model m = spec::model_from_json({{"name", "blocks"}, {"layers", 1}, {"hidden", 64}, {"heads", 4},
                                               {"vocab", 2}, {"seq_len", 16}},
                                              "blocks.json");
  auto step_s = [&](const char* framework, const char* dtype, int zero, int64_t dp) {
    const nlohmann::json t = {{"attention", "unfused"}, {"global_batch", dp}, {"dtype", dtype}, {"framework", framework}};
    const spec::Plan p = spec::plan_from_json({{"dp", dp}, {"zero", {{"stage", zero}}}}, "p.json");
    return ComputeModel(m, c, spec::training_from_json(t, "t.json"), p).optimizer_gpu_s(1'000'000);
  };
  auto expect = [](double bytes_per_param) { return 1e6 * bytes_per_param / 5e9; };
  // Megatron-LM, bf16: the norm reads the fp32 main grads (4), Adam (28), the fp32 → bf16 copy (4 + 2),
  // the fp32 grad buffer cleared (4), over the whole buffer: with the distributed optimizer over
  // dp 4 the step updates a quarter of it, so 4 x 4 per updated parameter
  EXPECT_NEAR(step_s("megatron", "bf16", 0, 4), expect(4 + 28 + 6 + 4), 1e-15);
  EXPECT_NEAR(step_s("megatron", "bf16", 1, 4), expect(4 + 28 + 6 + 4 * 4), 1e-15);
  // fp16: main_grad (fp16) copied to fp32 (2 + 4), unscaled (4 + 4), and a 2-byte buffer cleared
  EXPECT_NEAR(step_s("megatron", "fp16", 0, 4), expect(6 + 8 + 4 + 28 + 6 + 2), 1e-15);
  // 2021, fp16: the same without a buffer to clear (gradients set to None)
  EXPECT_NEAR(step_s("megatron-2021", "fp16", 0, 4), expect(6 + 8 + 4 + 28 + 6), 1e-15);
  // DeepSpeed and FSDP: the fused Adam with the training's gradient bytes, 24 + 2 (their passes over
  // the shard are not charged)
  EXPECT_NEAR(step_s("deepspeed", "bf16", 3, 4), expect(24 + 2), 1e-15);
  EXPECT_NEAR(step_s("fsdp", "fp32", 3, 4), expect(24 + 4), 1e-15);
}

TEST(ComputeModel, WeightGradientTimeIsTheFrameworksGradientPass) {
  // Infinitely fast GEMMs: the MLP's weight-gradient time is the gradient pass alone, parameters x
  // G bytes at hbm_Bps x memory_efficiency = 0.5e12 B/s, G as each framework's code moves them
  // (core/spec/framework.hpp), for m = 4 micro-batches, so a = 3/4 of them add to an earlier gradient:
  spec::Cluster c = test::make_cluster();
  c.gpu.matmul_efficiency = {{1.0, 1.0}};
  c.gpu.peak_flops[spec::Dtype::kBf16] = 1e30;
  c.gpu.peak_flops[spec::Dtype::kFp16] = 1e30;
  c.gpu.hbm_Bps = 1e12;
  c.gpu.memory_efficiency = 0.5;
  const spec::Model m = spec::model_from_json({{"name", "blocks"}, {"layers", 1}, {"hidden", 512}, {"heads", 8},
                                               {"vocab", 2}, {"seq_len", 128}, {"tied_embeddings", false}},
                                              "blocks.json");
  const double h = 512, f = 4 * 512;
  const double mlp_params = (2 * h) + (h * f + f) + (f * h + h);  // norm, up, down (with biases)
  auto pass_s = [&](const char* framework, const char* dtype, int zero, int64_t dp, const char* reduce = nullptr) {
    nlohmann::json t = {{"attention", "unfused"}, {"global_batch", 4 * dp}, {"dtype", dtype}, {"framework", framework}};
    if (reduce) t["framework"] = {{"name", framework}, {"reduce_dtype", reduce}};
    const spec::Plan p = spec::plan_from_json({{"dp", dp}, {"micro_batches", 4}, {"zero", {{"stage", zero}}}}, "p.json");
    return ComputeModel(m, c, spec::training_from_json(t, "t.json"), p).units()[2].backward_weight_s;
  };
  auto expect = [&](double bytes_per_param) { return mlp_params * bytes_per_param / (1e12 * 0.5); };
  // Megatron-LM: the wgrad GEMM accumulates into main_grad, read and written: fp32 (bf16) 4 + 4, fp16 2 + 2
  EXPECT_NEAR(pass_s("megatron", "bf16", 1, 2), expect(8), 1e-15);
  EXPECT_NEAR(pass_s("megatron", "fp16", 1, 2), expect(4), 1e-15);
  // Megatron-LM of 2021: bf16 hooks into fp32 main_grad every micro-batch, 2 + 4 + 4; fp16 autograd
  // adds each later micro-batch in fp16, 3 x 2 x 3/4
  EXPECT_NEAR(pass_s("megatron-2021", "bf16", 0, 2), expect(10), 1e-15);
  EXPECT_NEAR(pass_s("megatron-2021", "fp16", 0, 2), expect(3 * 2 * 0.75), 1e-15);
  // DeepSpeed ZeRO-3 over dp 8: the bucket copy 2 + 2, and the shard's bf16 partition buffer, first
  // copied into (2 + 2, a quarter of the micro-batches) then added to (2 + 2 + 2, three quarters),
  // over 8 ranks: (4 x 1/4 + 6 x 3/4) / 8; ZeRO-1: autograd, 3 x 2 x 3/4
  EXPECT_NEAR(pass_s("deepspeed", "bf16", 3, 8), expect(4 + (4 * 0.25 + 6 * 0.75) / 8), 1e-15);
  EXPECT_NEAR(pass_s("deepspeed", "bf16", 1, 8), expect(3 * 2 * 0.75), 1e-15);
  // FSDP: the flat gradient (2 + 2), its cast to fp32 (2 + 4), the fp32 shard added from the second
  // micro-batch on, 3 x 4 x 3/4 over 8 ranks; with a bf16 reduction no cast: 3 x 2 x 3/4 / 8
  EXPECT_NEAR(pass_s("fsdp", "bf16", 3, 8, "fp32"), expect(4 + 6 + 3 * 4 * 0.75 / 8), 1e-15);
  EXPECT_NEAR(pass_s("fsdp", "bf16", 3, 8), expect(4 + 3 * 2 * 0.75 / 8), 1e-15);
  // FSDP2: each gradient copied into the fp32 reduce-scatter input once (2 read + 4 written), the
  // fp32 shard added from the second micro-batch on
  EXPECT_NEAR(pass_s("fsdp2", "bf16", 3, 8, "fp32"), expect(2 + 4 + 3 * 4 * 0.75 / 8), 1e-15);
}

}  // namespace
}  // namespace stagecraft::sim
