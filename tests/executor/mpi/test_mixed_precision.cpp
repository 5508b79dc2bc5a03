// bf16 mixed precision across ranks (executor/precision.hpp) against the single-rank bf16 run: the
// tiny model for 5 steps. The trace says bf16 and moves 2 bytes an element.
//
// Tolerance, derived: one rank and a plan without tensor parallelism compute the same first step bit
// for bit — the same bf16 working parameters, the same micro-batches through the same units; the
// pipeline messages and ZeRO-3 gathers move values that are bf16 already, which a bf16 wire carries
// exactly. Only the step's loss, a double sum over micro-batches, adds in another order: step 0
// agrees to 1e-12. Tensor parallelism adds rounding points of its own: each row-parallel GEMM's
// partial output is stored in bf16 and the all-reduce rounds the sum, 2 more per sublayer, so its
// bound counts k + 2·2·layers points from step 0 on. From step 1 on, the runs differ where a gradient crosses a bf16
// reduction (DeepSpeed's reduce dtype is the model's): each rank's fp32 sum is rounded, and the
// partial sums, a relative perturbation of a few u = 2^-9 of the gradient, which moves the fp32
// masters by a few u·lr and flips a working parameter's rounding where a master sits near a bf16
// boundary; the loss sees them at the working-parameter rounding point. Every such perturbation is
// one of the k = 44 rounding points of the bf16-against-fp32 bound (tests/executor/runner/
// test_mixed_precision.cpp), so |ΔL| / L <= k·u = 8.6% holds a fortiori; the plans whose
// reductions run in fp32 (reduce_dtype fp32) perturb only by fp32 summation order, 1e-5 as the fp32
// equivalence tests allow — and their flips of a working parameter's rounding: asked to stay within
// the same k·u bound.
#include <cmath>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "executor/comm/local.hpp"
#include "executor/comm/mpi.hpp"
#include "executor/runner.hpp"
#include "harness.hpp"
#include "plans.hpp"

namespace stagecraft::executor {
namespace {

constexpr int kMixedSteps = 5;
constexpr double kBf16Roundoff = 1.0 / 512;

spec::Training bf16_training(spec::Framework framework, bool fp32_reduce) {
  spec::Training t = test::tiny_training(framework);
  t.dtype = spec::Dtype::kBf16;
  if (fp32_reduce) t.reduce_dtype = spec::Dtype::kFp32;
  return t;
}

std::vector<double> losses(Runner& runner, int steps) {
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) out.push_back(runner.step().loss);
  return out;
}

struct Case {
  test::PlanSpec plan;
  bool fp32_reduce = false;
};

TEST(MpiMixedPrecision, Bf16PlansMatchTheSingleRankBf16Run) {
  const spec::Model m = test::tiny_model();
  const double k = 1 + 1 + m.layers * 10 + 2;  // the bf16-against-fp32 bound's 44 rounding points
  std::vector<Case> cases;
  {
    test::PlanSpec s;
    s.pp = 2, s.dp = 2, s.micro_batches = 4, s.zero = 3;  // pp2 x dp2 ZeRO-3, DeepSpeed: bf16 reductions
    cases.push_back({s, false});
    s.zero = 1;  // ZeRO-1 with fp32 reductions (reduce_dtype fp32, as Megatron's main grads)
    cases.push_back({s, true});
    test::PlanSpec t;
    t.tp = 2, t.dp = 2, t.micro_batches = 4, t.zero = 2;  // tensor parallelism: bf16 all-reduces inside the units
    cases.push_back({t, false});
  }
  for (const Case& c : cases) {
    const spec::Training training = bf16_training(c.plan.framework, c.fp32_reduce);
    std::vector<double> ref;
    {
      const program::Program one = program::lower(m, training, test::make_plan(test::reference_plan()));
      const Corpus corpus = test::corpus_for(one);
      LocalCommunicator local;
      Runner runner(one, local, corpus, {});
      ref = losses(runner, kMixedSteps);
    }
    const program::Program prog = program::lower(m, training, test::make_plan(c.plan));
    const Corpus corpus = test::corpus_for(prog);
    MpiCommunicator comm(prog.placement);
    Runner runner(prog, comm, corpus, {});
    const std::vector<double> got = losses(runner, kMixedSteps);
    const bool tp = c.plan.tp > 1;
    const double bound = (tp ? k + 2 * 2 * m.layers : k) * kBf16Roundoff;
    double largest = 0;
    for (int s = 0; s < kMixedSteps; ++s) {
      const double rel = std::abs(got[s] - ref[s]) / ref[s];
      EXPECT_LE(rel, s == 0 && !tp ? 1e-12 : bound) << c.plan.name() << " step " << s;
      largest = std::max(largest, rel);
    }
    if (comm.rank() == 0) {
      std::printf("%s%s: largest relative loss difference from one bf16 rank %.3g\n", c.plan.name().c_str(),
                  c.fp32_reduce ? " (fp32 reductions)" : "", largest);
    }
  }
}

// The trace of a bf16 plan says bf16, and its ZeRO-3 gathers and pipeline messages move half the
// fp32 plan's bytes: 2 bytes an element where fp32 moves 4.
TEST(MpiMixedPrecision, TheTraceSaysBf16AndMovesHalfTheBytes) {
  test::PlanSpec s;
  s.pp = 2, s.dp = 2, s.micro_batches = 4, s.zero = 3;
  int64_t moved[2][2] = {{0, 0}, {0, 0}};  // [fp32, bf16][gathers, messages]
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    spec::Training t = bf16 ? bf16_training(s.framework, false) : test::tiny_training(s.framework);
    const program::Program prog = program::lower(test::tiny_model(), t, test::make_plan(s));
    MpiCommunicator comm(prog.placement);
    const trace::Trace tr = test::traced_two_steps(prog, comm);
    if (comm.rank() != 0) continue;
    EXPECT_EQ(tr.training.value("dtype", ""), bf16 ? "bf16" : "fp32");
    for (const trace::Event& e : tr.events) {
      if (e.op == program::Op::kGatherParams) moved[bf16][0] += e.bytes;
      if (e.op == program::Op::kSendActivation || e.op == program::Op::kSendGrad) moved[bf16][1] += e.bytes;
    }
  }
  if (moved[0][0] == 0) return;  // not rank 0
  EXPECT_GT(moved[1][0], 0);
  EXPECT_GT(moved[1][1], 0);
  EXPECT_EQ(2 * moved[1][0], moved[0][0]);
  EXPECT_EQ(2 * moved[1][1], moved[0][1]);
}

}  // namespace
}  // namespace stagecraft::executor
