// Memory model against the published formulas (REFERENCE.md), derived in the test.
#include "sim/models/memory.hpp"

#include <gtest/gtest.h>

namespace stagecraft::sim {
namespace {

TEST(Memory, ZeroModelStatesMatchTheZeroPaper) {
  // P = 7.5B, d = 64, mixed-precision Adam (K = 12): 120, 31.4, 16.6, 1.88 GB (Rajbhandari et al.).
  const int64_t P = 7'500'000'000, d = 64;
  const double published[] = {120e9, 31.4e9, 16.6e9, 1.88e9};
  for (int stage = 0; stage <= 3; ++stage) {
    spec::ZeroConfig z;
    z.stage = stage;
    const ModelStates s = model_states(P, 0, z, d, spec::Dtype::kFp16);
    EXPECT_NEAR(static_cast<double>(s.total()) / published[stage], 1.0, 0.01) << "stage " << stage;
  }
  // Exact forms: stage 1 = 2P + 2P + 12P/d, stage 2 = 2P + 14P/d (P divisible by d here).
  spec::ZeroConfig z1;
  z1.stage = 1;
  EXPECT_EQ(model_states(P, 0, z1, d, spec::Dtype::kBf16).total(), 4 * P + 12 * P / d);
  spec::ZeroConfig z2;
  z2.stage = 2;
  EXPECT_EQ(model_states(P, 0, z2, d, spec::Dtype::kBf16).total(), 2 * P + 14 * P / d);
}

TEST(Memory, OffloadAndFp32) {
  const int64_t P = 1'000'000, d = 4;
  spec::ZeroConfig z;
  z.stage = 2;
  z.offload_optimizer = spec::Offload::kCpu;
  EXPECT_EQ(model_states(P, 0, z, d, spec::Dtype::kBf16).optimizer, 0);
  spec::ZeroConfig z0;
  // fp32: weights 4, gradients 4, Adam momentum and variance 8 bytes per parameter.
  EXPECT_EQ(model_states(P, 0, z0, d, spec::Dtype::kFp32).total(), (4 + 4 + 8) * P);
  spec::ZeroConfig z3;
  z3.stage = 3;
  // ZeRO-3 keeps persistent (small) tensors whole on every rank.
  EXPECT_EQ(model_states(P, 1000, z3, d, spec::Dtype::kBf16).params, 2 * (P / d + 1000));
}

spec::Training training_of(spec::Dtype dtype, const char* attention = "unfused") {
  spec::Training t;
  t.global_batch = 8;
  t.dtype = dtype;
  t.attention = attention;
  return t;
}

struct Layer {
  spec::Model model;
  spec::Plan plan;
};

// Bytes of one transformer layer (attention + MLP units) for s b tokens.
double layer_bytes(const spec::Model& m, const spec::Plan& p, spec::Recompute mode) {
  const std::vector<program::Unit> units = program::model_units(m, p.tp);
  const double per_token = activation_bytes_per_token(units[1], m, p, training_of(spec::Dtype::kFp16), mode) +
                           activation_bytes_per_token(units[2], m, p, training_of(spec::Dtype::kFp16), mode);
  return per_token * static_cast<double>(m.seq_len * p.micro_batch);
}

TEST(Memory, ActivationsPerLayerMatchKorthikanti) {
  const spec::Model m = spec::model_from_json(
      {{"layers", 4}, {"hidden", 1024}, {"heads", 16}, {"vocab", 1000}, {"seq_len", 2048}}, "m.json");
  const double s = 2048, b = 2, h = 1024, a = 16;
  for (int64_t t : {1, 4}) {
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;
      spec::Plan p = spec::plan_from_json({{"tp", t}, {"micro_batch", 2}, {"sequence_parallel", sp}}, "p.json");
      SCOPED_TRACE("t=" + std::to_string(t) + (sp ? " sp" : ""));
      // Korthikanti et al. Table 2: no parallelism sbh(34 + 5as/h); TP sbh(10 + 24/t + 5as/(ht));
      // TP + SP sbh(34 + 5as/h)/t; selective drops the 5as term; full keeps 2sbh (/t with SP).
      double none = 0, selective = 0, full = 0;
      if (t == 1) {
        none = s * b * h * (34 + 5 * a * s / h);
        selective = s * b * h * 34;
        full = 2 * s * b * h;
      } else if (!sp) {
        none = s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t));
        selective = s * b * h * (10 + 24.0 / t);
        full = 2 * s * b * h;
      } else {
        none = s * b * h * (34 + 5 * a * s / h) / t;
        selective = s * b * h * 34 / t;
        full = 2 * s * b * h / t;
      }
      EXPECT_DOUBLE_EQ(layer_bytes(m, p, spec::Recompute::kNone), none);
      EXPECT_DOUBLE_EQ(layer_bytes(m, p, spec::Recompute::kSelective), selective);
      EXPECT_DOUBLE_EQ(layer_bytes(m, p, spec::Recompute::kFull), full);
    }
  }
}

// Two blocks of Llama-3-8B's shape: GQA (8 K/V heads of 32 query heads of 128), SwiGLU of 14336, s 8192.
spec::Model llama_block() {
  return spec::model_from_json({{"layers", 2}, {"hidden", 4096}, {"heads", 32}, {"kv_heads", 8}, {"ffn_hidden", 14336},
                                {"mlp", "swiglu"}, {"vocab", 1000}, {"seq_len", 8192}, {"position", "rope"},
                                {"norm", "rmsnorm"}, {"bias", false}},
                               "llama.json");
}

// The same accounting by tensor width for a LLaMA-style block: GQA (8 K/V heads of 32 query heads),
// a SwiGLU MLP of f = 14336 (not 4h), TP 4 without SP. Per token, 16-bit:
//   attention  5h replicated + Q 2q/t + K, V 2 (kv/t) d each + context 2q/t + scores 5as/t
//   MLP        5h replicated + gate, up and product 3 * 2f/t
TEST(Memory, ActivationsFollowGqaAndGatedWidths) {
  const spec::Model m = llama_block();
  const spec::Plan p = spec::plan_from_json({{"tp", 4}, {"micro_batch", 1}}, "p.json");
  const std::vector<program::Unit> units = program::model_units(m, 4);
  const double h = 4096, t = 4, q = 4096, kv = 8 * 128, f = 14336, a = 32, s = 8192;
  const double attn = 5 * h + 4 * q / t + 4 * kv / t;
  EXPECT_DOUBLE_EQ(activation_bytes_per_token(units[1], m, p, training_of(spec::Dtype::kBf16), spec::Recompute::kSelective), attn);
  EXPECT_DOUBLE_EQ(activation_bytes_per_token(units[1], m, p, training_of(spec::Dtype::kBf16), spec::Recompute::kNone),
                   attn + 5 * a * s / t);
  EXPECT_DOUBLE_EQ(activation_bytes_per_token(units[2], m, p, training_of(spec::Dtype::kBf16), spec::Recompute::kNone),
                   5 * h + 6 * f / t);
  // tp 16 > 8 K/V heads: each rank keeps one K/V head (replicated), d wide.
  const spec::Plan p16 = spec::plan_from_json({{"tp", 16}, {"micro_batch", 1}}, "p.json");
  EXPECT_DOUBLE_EQ(activation_bytes_per_token(program::model_units(m, 16)[1], m, p16, training_of(spec::Dtype::kBf16),
                                              spec::Recompute::kSelective),
                   5 * h + 4 * q / 16 + 4 * 128);
}

// Block variants: a one-norm parallel block (GPT-J) keeps no norm or first-linear input in its MLP;
// Gemma-2's post-norms keep theirs; q/k norms keep q and k again.
TEST(Memory, ActivationsOfBlockVariants) {
  spec::Model m = spec::model_from_json({{"layers", 2}, {"hidden", 1024}, {"heads", 16}, {"vocab", 1000}, {"seq_len", 512}},
                                        "m.json");
  const spec::Plan p = spec::plan_from_json({{"tp", 1}, {"micro_batch", 1}}, "p.json");
  const double h = 1024, f = 4096;
  auto mlp = [&](const spec::Model& mm) {
    return activation_bytes_per_token(program::model_units(mm, 1)[2], mm, p, training_of(spec::Dtype::kBf16), spec::Recompute::kSelective);
  };
  auto attn = [&](const spec::Model& mm) {
    return activation_bytes_per_token(program::model_units(mm, 1)[1], mm, p, training_of(spec::Dtype::kBf16), spec::Recompute::kSelective);
  };
  EXPECT_DOUBLE_EQ(mlp(m), 5 * h + 4 * f);  // 21h
  spec::Model gptj = m;
  gptj.parallel_attention = true;
  gptj.mlp_norms = 0;
  EXPECT_DOUBLE_EQ(mlp(gptj), h + 4 * f);
  spec::Model sandwich = m;
  sandwich.attn_norms = sandwich.mlp_norms = 2;
  EXPECT_DOUBLE_EQ(mlp(sandwich), 7 * h + 4 * f);
  EXPECT_DOUBLE_EQ(attn(sandwich), 7 * h + 8 * h);
  spec::Model qk = m;
  qk.qk_norm = true;
  EXPECT_DOUBLE_EQ(attn(qk), 5 * h + 8 * h + 2 * h + 2 * h);
}

// FlashAttention keeps no scores: in their place the fp32 logsumexp of each query row, 4 bytes per
// head and token (a/t heads per rank); selective recompute re-runs the kernel and keeps neither it
// nor the context (2q/t). Same LLaMA-style block, TP 4, bf16.
TEST(Memory, FlashAttentionKeepsTheLogsumexpNotTheScores) {
  const spec::Model m = llama_block();
  const spec::Plan p = spec::plan_from_json({{"tp", 4}, {"micro_batch", 1}}, "p.json");
  const program::Unit attn = program::model_units(m, 4)[1];
  const double h = 4096, t = 4, q = 4096, kv = 8 * 128, a = 32;
  const double kept = 5 * h + 4 * q / t + 4 * kv / t;
  const spec::Training flash = training_of(spec::Dtype::kBf16, "flash");
  EXPECT_DOUBLE_EQ(activation_bytes_per_token(attn, m, p, flash, spec::Recompute::kNone), kept + 4 * a / t);
  EXPECT_DOUBLE_EQ(activation_bytes_per_token(attn, m, p, flash, spec::Recompute::kSelective), kept - 2 * q / t);
  // fp32 training: the 16-bit tensors double, the fp32 logsumexp does not
  const spec::Training fp32 = training_of(spec::Dtype::kFp32, "flash");
  EXPECT_DOUBLE_EQ(activation_bytes_per_token(attn, m, p, fp32, spec::Recompute::kNone), 2 * kept + 4 * a / t);
}

// fp8 (Transformer Engine): the four GEMM operands are kept as 1-byte copies. LLaMA block, TP 4,
// no SP: attention -h (QKV input, whole) - q/t (context); MLP -h (fc1's input) - f/t (fc2's input);
// with SP the whole-width ones are /t. FP8 state per block: 2 bytes per linear weight element on
// the rank plus 20,520 bytes of scaling state per linear.
TEST(Memory, Fp8KeepsGemmOperandsInOneByteAndCachesFp8Weights) {
  const spec::Model m = llama_block();
  const spec::Plan p = spec::plan_from_json({{"tp", 4}, {"micro_batch", 1}}, "p.json");
  const std::vector<program::Unit> units = program::model_units(m, 4);
  const double h = 4096, t = 4, q = 4096, f = 14336;
  const spec::Training bf16 = training_of(spec::Dtype::kBf16), fp8 = training_of(spec::Dtype::kFp8);
  for (spec::Recompute r : {spec::Recompute::kNone, spec::Recompute::kSelective}) {
    EXPECT_DOUBLE_EQ(activation_bytes_per_token(units[1], m, p, bf16, r) - activation_bytes_per_token(units[1], m, p, fp8, r),
                     h + q / t);
    EXPECT_DOUBLE_EQ(activation_bytes_per_token(units[2], m, p, bf16, r) - activation_bytes_per_token(units[2], m, p, fp8, r),
                     h + f / t);
  }
  spec::Plan sp = p;
  sp.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(activation_bytes_per_token(units[2], m, sp, bf16, spec::Recompute::kNone) -
                       activation_bytes_per_token(units[2], m, sp, fp8, spec::Recompute::kNone),
                   h / t + f / t);
  // weights per rank: QKV 4096 x (4096 + 2·1024) / 4, out 4096·4096/4, gate and up 4096·14336/4 each,
  // down 14336·4096/4
  const double w = (4096.0 * 6144 + 4096.0 * 4096 + 3 * 4096.0 * 14336) / 4;
  EXPECT_EQ(kFp8ScalingStateBytes, 5 * 1026 * 4);
  EXPECT_EQ(fp8_state_bytes(m, 4, 3, spec::Dtype::kFp8), static_cast<int64_t>(3 * (2 * w + 5 * 20520)));
  EXPECT_EQ(fp8_state_bytes(m, 4, 3, spec::Dtype::kBf16), 0);
}

}  // namespace
}  // namespace stagecraft::sim
