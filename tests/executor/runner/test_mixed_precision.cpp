// Mixed precision on the CPU executor (executor/precision.hpp): which format each tensor takes
// from the Program, the kernels' rounding at every store, the state's fp32 masters beside 16-bit
// working parameters, its memory, and a bf16 run against the fp32 one.
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/comm/local.hpp"
#include "executor/model/host_kernels.hpp"
#include "executor/model_params.hpp"
#include "executor/precision.hpp"
#include "executor/runner.hpp"
#include "plans.hpp"

namespace stagecraft::executor {
namespace {

using test::make_plan;
using test::PlanSpec;

// bf16 keeps 8 significant bits: unit roundoff u = 2^-9 of round-to-nearest.
constexpr double kBf16Roundoff = 1.0 / 512;

bool is_bf16(float x) { return round_to(Format::kBf16, x) == x; }

spec::Training bf16_training(spec::Framework framework = spec::Framework::kDeepSpeed) {
  spec::Training t = test::tiny_training(framework);
  t.dtype = spec::Dtype::kBf16;
  return t;
}

TEST(Precision, RoundingIsToNearestEven) {
  // 1 + 2^-8 lies halfway between the bf16 neighbours 1 and 1 + 2^-7: even mantissa (1) wins;
  // 1 + 3·2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6
  EXPECT_EQ(round_to(Format::kBf16, 1.0f + std::ldexp(1.0f, -8)), 1.0f);
  EXPECT_EQ(round_to(Format::kBf16, 1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(round_to(Format::kBf16, 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  // fp16 keeps 11 significant bits: 1 + 2^-11 is halfway, rounds to 1; 65520 overflows to infinity
  EXPECT_EQ(round_to(Format::kFp16, 1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_TRUE(std::isinf(round_to(Format::kFp16, 65520.0f)));
  EXPECT_TRUE(std::isnan(round_to(Format::kBf16, std::nanf(""))));
  // the wire's bits: 1.0 in bf16 is the top half of fp32's 0x3f800000
  EXPECT_EQ(pack16(Format::kBf16, 1.0f), 0x3f80);
  EXPECT_EQ(unpack16(Format::kBf16, 0x3f80), 1.0f);
  EXPECT_EQ(pack16(Format::kFp16, 1.0f), 0x3c00);
}

TEST(Precision, FormatsFollowTheProgram) {
  const spec::Model m = test::tiny_model();
  const spec::Plan plan = make_plan({});
  const Precision fp32 = precision_of(program::lower(m, test::tiny_training(), plan));
  EXPECT_EQ(fp32.store, Format::kFp32);
  EXPECT_EQ(fp32.reduce, Format::kFp32);
  EXPECT_FALSE(fp32.mixed());
  // bf16 training reduces in its storage dtype unless the training file names a reduce dtype
  const Precision bf16 = precision_of(program::lower(m, bf16_training(), plan));
  EXPECT_EQ(bf16.store, Format::kBf16);
  EXPECT_EQ(bf16.reduce, Format::kBf16);
  EXPECT_TRUE(bf16.mixed());
  spec::Training fp32_reduce = bf16_training(spec::Framework::kFsdp);
  fp32_reduce.reduce_dtype = spec::Dtype::kFp32;
  const Precision hsdp = precision_of(program::lower(m, fp32_reduce, plan));
  EXPECT_EQ(hsdp.store, Format::kBf16);
  EXPECT_EQ(hsdp.reduce, Format::kFp32);
}

TEST(Precision, ExecutesBf16AndFp16AndRunsTheRestInFp32) {
  spec::Training t = test::tiny_training();
  for (const auto& [asked, ran] : {std::pair{spec::Dtype::kBf16, spec::Dtype::kBf16}, std::pair{spec::Dtype::kFp16, spec::Dtype::kFp16},
                                    std::pair{spec::Dtype::kFp8, spec::Dtype::kFp32}, std::pair{spec::Dtype::kFp32, spec::Dtype::kFp32}}) {
    t.dtype = asked;
    EXPECT_EQ(executed_training(t).dtype, ran) << spec::to_string(asked);
  }
}

// Every store of a bf16 kernel is the fp32 result rounded once; weight gradients accumulate in fp32.
TEST(Precision, KernelsRoundWhatTheyStoreOnce) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 6, in = 5, out = 7;
  std::vector<float> x(n * in), w(in * out), b(out), dy(n * out);
  for (std::vector<float>* v : {&x, &w, &b, &dy}) {
    for (float& e : *v) e = round_to(Format::kBf16, normal(rng));  // 16-bit operands, as stored
  }
  HostKernels fp32, bf16;
  bf16.format = Format::kBf16;
  std::vector<float> y32(n * out), y16(n * out);
  fp32.linear_forward(x.data(), w.data(), b.data(), y32.data(), n, in, out);
  bf16.linear_forward(x.data(), w.data(), b.data(), y16.data(), n, in, out);
  int changed = 0;
  for (std::size_t i = 0; i < y32.size(); ++i) {
    EXPECT_EQ(y16[i], round_to(Format::kBf16, y32[i]));
    changed += y16[i] != y32[i];
  }
  EXPECT_GT(changed, 0);  // sums of 5 products of 8-bit mantissas need more than 8 bits
  std::vector<float> dw32(in * out, 0.25f), db32(out, 0.25f), dw16 = dw32, db16 = db32;
  fp32.linear_backward_weight(x.data(), dy.data(), dw32.data(), db32.data(), n, in, out);
  bf16.linear_backward_weight(x.data(), dy.data(), dw16.data(), db16.data(), n, in, out);
  EXPECT_EQ(dw16, dw32);  // fp32 accumulation (Megatron's main_grad), no rounding
  EXPECT_EQ(db16, db32);
  std::vector<float> dx32(n * in), dx16(n * in);
  fp32.linear_backward_input(dy.data(), w.data(), dx32.data(), n, in, out, false);
  bf16.linear_backward_input(dy.data(), w.data(), dx16.data(), n, in, out, false);
  for (std::size_t i = 0; i < dx32.size(); ++i) EXPECT_EQ(dx16[i], round_to(Format::kBf16, dx32[i]));
}

struct Trained {
  std::vector<double> losses;
  std::vector<float> params;
  trace::MemoryBytes at_start;
  int64_t padded = 0, opt = 0;
};

Trained train(const spec::Training& t, const PlanSpec& spec, int steps) {
  const program::Program prog = program::lower(test::tiny_model(), t, make_plan(spec));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  RunnerOptions o;
  o.trace = true;
  Runner runner(prog, comm, corpus, o);
  Trained r;
  r.at_start = runner.memory().samples().front().bytes;
  r.padded = runner.layout().padded_elems();
  r.opt = runner.layout().owned_elems();
  for (int s = 0; s < steps; ++s) r.losses.push_back(runner.step().loss);
  r.params = gather_model_params(runner).values;
  return r;
}

// One rank, the tiny model (4 layers of hidden 64, vocabulary 256) for 5 steps, bf16 against fp32.
// Tolerance: the bf16 run perturbs the fp32 one at k rounding points on the way from the tokens to
// the loss — the working parameters (1), the embedding's lookup (1), per layer the attention unit's
// norm, QKV, attention output, projection and residual sum (5) and the MLP's norm, up projection,
// GELU, down projection and residual sum (5), the head's norm and logits (2): k = 1 + 1 + 4·10 + 2
// = 44 — each a relative error of at most u = 2^-9. To first order the loss, a smooth function of
// them, moves by at most k·u of its value when the errors add up in the worst case: 44/512 = 8.6%.
// The bound is loose (the errors are of both signs); the test also asks that bf16 really ran: the
// losses differ, every working parameter is a bf16 value.
TEST(MixedPrecision, Bf16TrainsBesideFp32WithinTheRoundingBound) {
  const int steps = 5;
  const Trained f = train(test::tiny_training(), {}, steps);
  const Trained h = train(bf16_training(), {}, steps);
  const spec::Model m = test::tiny_model();
  const double k = 1 + 1 + m.layers * 10 + 2;
  double largest = 0;
  for (int s = 0; s < steps; ++s) {
    const double rel = std::abs(h.losses[s] - f.losses[s]) / f.losses[s];
    EXPECT_LE(rel, k * kBf16Roundoff) << "step " << s;
    largest = std::max(largest, rel);
  }
  EXPECT_GT(largest, 0.0) << "the bf16 run computed exactly what fp32 did";
  for (float p : h.params) ASSERT_TRUE(is_bf16(p)) << p;
  EXPECT_LT(h.losses.back(), h.losses.front());  // it learns
  std::printf("bf16 vs fp32 over %d steps: largest relative loss difference %.3g (bound %.3g)\n", steps, largest,
              k * kBf16Roundoff);
}

// ZeRO's K = 12 bytes of optimizer state per parameter the rank steps (fp32 master, m, v), 2 bytes
// a working parameter, 4 a gradient (fp32 accumulation); fp32 training: 4, 8 (m, v) and 4.
TEST(MixedPrecision, StateMemoryIsTheFormatsWidth) {
  const Trained f = train(test::tiny_training(), {}, 1);
  const Trained h = train(bf16_training(), {}, 1);
  ASSERT_EQ(f.padded, h.padded);
  EXPECT_EQ(f.at_start[MemoryKind::kParams], 4 * f.padded);
  EXPECT_EQ(h.at_start[MemoryKind::kParams], 2 * h.padded);
  EXPECT_EQ(f.at_start[MemoryKind::kOptimizer], 8 * f.opt);
  EXPECT_EQ(h.at_start[MemoryKind::kOptimizer], 12 * h.opt);
  EXPECT_EQ(h.at_start[MemoryKind::kGrads], f.at_start[MemoryKind::kGrads]);
}

// The masters carry what rounding would lose: after a step the working copy is the masters rounded,
// and a checkpoint (owned_state) holds the masters, not the working copy.
TEST(MixedPrecision, TheWorkingCopyIsTheMastersRounded) {
  const program::Program prog = program::lower(test::tiny_model(), bf16_training(), make_plan({}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  Runner runner(prog, comm, corpus, {});
  runner.step();
  const std::vector<float> state = runner.backend().owned_state();  // masters first (ZeRO-0: all of them)
  const std::vector<float> working = runner.backend().params_host();
  const int64_t n = runner.layout().owned_elems();
  int exact = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(working[static_cast<std::size_t>(i)], round_to(Format::kBf16, state[static_cast<std::size_t>(i)])) << i;
    exact += is_bf16(state[static_cast<std::size_t>(i)]);
  }
  EXPECT_LT(exact, n / 2) << "the masters are fp32 values, most of them not bf16 ones";
}


// ---- fp16: dynamic loss scaling ----------------------------------------------------------------

// The rules of precision.hpp step by step: Megatron (2^32, hysteresis 2 restored on growth),
// DeepSpeed (2^16, hysteresis never restored), torch's GradScaler (2^16, no hysteresis, window 2000).
TEST(LossScaler, MovesAsTheFrameworksScalersDo) {
  LossScaler meg(loss_scaling(spec::Framework::kMegatron));
  EXPECT_EQ(meg.scale(), std::ldexp(1.0, 32));
  meg.update(true);  // the hysteresis absorbs the first overflow
  EXPECT_EQ(meg.scale(), std::ldexp(1.0, 32));
  meg.update(true);  // the second backs off
  EXPECT_EQ(meg.scale(), std::ldexp(1.0, 31));
  meg.update(true);  // and every one after it, until a growth restores the hysteresis
  EXPECT_EQ(meg.scale(), std::ldexp(1.0, 30));
  for (int i = 0; i < 999; ++i) meg.update(false);
  EXPECT_EQ(meg.scale(), std::ldexp(1.0, 30));
  meg.update(false);  // the 1000th good step in a row grows S
  EXPECT_EQ(meg.scale(), std::ldexp(1.0, 31));
  meg.update(true);  // absorbed again: the growth restored the hysteresis
  EXPECT_EQ(meg.scale(), std::ldexp(1.0, 31));

  LossScaler ds(loss_scaling(spec::Framework::kDeepSpeed));
  EXPECT_EQ(ds.scale(), 65536.0);
  ds.update(true);
  ds.update(true);
  EXPECT_EQ(ds.scale(), 32768.0);
  for (int i = 0; i < 1000; ++i) ds.update(false);
  EXPECT_EQ(ds.scale(), 65536.0);
  ds.update(true);  // DeepSpeed's hysteresis is spent for good: this one backs off
  EXPECT_EQ(ds.scale(), 32768.0);

  LossScaler torch(loss_scaling(spec::Framework::kFsdp));
  torch.update(true);
  EXPECT_EQ(torch.scale(), 32768.0);
  for (int i = 0; i < 1999; ++i) torch.update(false);
  EXPECT_EQ(torch.scale(), 32768.0);
  torch.update(false);
  EXPECT_EQ(torch.scale(), 65536.0);
  // the floor: min_scale 1
  LossScaler low(loss_scaling(spec::Framework::kFsdp));
  for (int i = 0; i < 40; ++i) low.update(true);
  EXPECT_EQ(low.scale(), 1.0);
}

spec::Training fp16_training(spec::Framework framework) {
  spec::Training t = test::tiny_training(framework);
  t.dtype = spec::Dtype::kFp16;
  return t;
}

// fp16 under DeepSpeed's scaler (S = 2^16) against fp32: the bound of the bf16 test with fp16's
// unit roundoff 2^-11, k·u = 44/2048 = 2.1%; the working parameters are fp16 values.
TEST(MixedPrecision, Fp16TrainsBesideFp32WithinTheRoundingBound) {
  const int steps = 5;
  const Trained f = train(test::tiny_training(), {}, steps);
  const Trained h = train(fp16_training(spec::Framework::kDeepSpeed), {}, steps);
  const spec::Model m = test::tiny_model();
  const double bound = (1 + 1 + m.layers * 10 + 2) / 2048.0;
  double largest = 0;
  for (int s = 0; s < steps; ++s) {
    const double rel = std::abs(h.losses[s] - f.losses[s]) / f.losses[s];
    EXPECT_LE(rel, bound) << "step " << s;
    largest = std::max(largest, rel);
  }
  EXPECT_GT(largest, 0.0);
  for (float p : h.params) ASSERT_EQ(round_to(Format::kFp16, p), p);
  EXPECT_LT(h.losses.back(), h.losses.front());
  std::printf("fp16 vs fp32 over %d steps: largest relative loss difference %.3g (bound %.3g)\n", steps, largest, bound);
}

// Megatron's S = 2^32 overflows fp16 at once: the head's d(logits) of a micro-batch's target token
// is (p_t - 1) · dL/dloss / N with dL/dloss = S / m (m = 8 micro-batches, N = 64 tokens) and p_t
// about 1/256 at initialisation: |d| = (255/256) · 2^32 / 512 = 8.4e6 > 65504, so it is inf, and so
// is the gradient norm. Step 0 overflows (absorbed by the hysteresis: S stays 2^32), step 1 too
// (S -> 2^31), step 2 at 2^31 too (|d| = 4.2e6; S -> 2^30): three skipped steps leave the parameters
// exactly as they were, and the steps report the S they ran with.
TEST(MixedPrecision, Fp16SkipsTheStepsWhoseGradientsOverflow) {
  const program::Program prog = program::lower(test::tiny_model(), fp16_training(spec::Framework::kMegatron), make_plan({}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  Runner runner(prog, comm, corpus, {});
  const std::vector<float> before = gather_model_params(runner).values;
  const double expected_scale[3] = {std::ldexp(1.0, 32), std::ldexp(1.0, 32), std::ldexp(1.0, 31)};
  for (int s = 0; s < 3; ++s) {
    const StepStats st = runner.step();
    EXPECT_TRUE(st.skipped) << "step " << s;
    EXPECT_EQ(st.loss_scale, expected_scale[s]) << "step " << s;
    EXPECT_TRUE(std::isfinite(st.loss));
  }
  EXPECT_EQ(runner.loss_scale(), std::ldexp(1.0, 30));
  EXPECT_EQ(gather_model_params(runner).values, before);
}

}  // namespace
}  // namespace stagecraft::executor
