// The Program interpreter on one rank, without MPI (LocalCommunicator): its step must equal a
// hand-written training loop over the same units (the oracle: model math + AdamW + clipping),
// every single-rank schedule / ZeRO stage / recompute / offload must train identically, and it
// must trace every instruction and account memory.
#include <cmath>

#include <gtest/gtest.h>

#include "core/program/fingerprint.hpp"

#include "core/program/lower.hpp"
#include "executor/comm/local.hpp"
#include "executor/errors.hpp"
#include "executor/model_params.hpp"
#include "executor/runner.hpp"
#include "plans.hpp"

namespace stagecraft::executor {
namespace {

using test::make_plan;
using test::PlanSpec;

struct Training {
  std::vector<double> losses;
  std::vector<float> params;
};

Training run_plan(const PlanSpec& spec, int steps, RunnerOptions options = {}) {
  const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), make_plan(spec));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  Runner runner(prog, comm, corpus, options);
  Training out;
  for (int s = 0; s < steps; ++s) out.losses.push_back(runner.step().loss);
  out.params = gather_model_params(runner).values;
  return out;
}

// The same training written out directly: all units of the model in one layout, micro-batches
// of one sequence in order, dL/dloss = 1/8, global-norm clipping to 1, AdamW.
Training run_oracle(int steps, const RunnerOptions& o) {
  const spec::Model m = test::tiny_model();
  const ParamLayout layout(m);
  const Corpus corpus = Corpus::synthetic(m.vocab, m.seq_len, 7);
  std::vector<Layer<float>> layers;
  for (int64_t u = 0; u < layout.end(); ++u) layers.emplace_back(layout, u);
  std::vector<float> p(static_cast<std::size_t>(layout.size())), g(p.size()), mom(p.size()), var(p.size());
  layout.init<float>(p, o.init_seed);
  const std::vector<Range> decayed = layout.decayed_ranges();
  Training out;
  for (int step = 0; step < steps; ++step) {
    std::fill(g.begin(), g.end(), 0.0f);
    double loss = 0;
    for (int mb = 0; mb < 8; ++mb) {
      const Batch b = corpus.sample(step, mb, 1);
      std::vector<UnitCache<float>> caches(layers.size());
      std::vector<float> x;
      for (std::size_t u = 0; u < layers.size(); ++u) {
        std::vector<float> y(static_cast<std::size_t>(layers[u].output_size(b.view().dims)));
        layers[u].forward(b.view(), p, x, y, caches[u]);
        x = std::move(y);
      }
      loss += x[0] / 8.0f;
      std::vector<float> dy = {1.0f / 8.0f};
      for (std::size_t u = layers.size(); u-- > 0;) {
        std::vector<float> dx(static_cast<std::size_t>(layers[u].input_size(caches[u].dims)));
        layers[u].backward(p, dy, dx, g, caches[u]);
        dy = std::move(dx);
      }
    }
    const float scale = clip_scale(std::sqrt(global_norm_sq(g)), o.max_grad_norm);
    adamw_step(o.adam, step + 1, {0, p, g, mom, var}, decayed, scale);
    out.losses.push_back(loss);
  }
  out.params = p;
  return out;
}

TEST(RunnerLocal, SingleRankStepEqualsHandWrittenTraining) {
  const RunnerOptions options;
  const Training got = run_plan(test::reference_plan(), 4, options);
  const Training want = run_oracle(4, options);
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < want.losses.size(); ++i) EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * want.losses[i]);
  ASSERT_EQ(got.params.size(), want.params.size());
  for (std::size_t i = 0; i < want.params.size(); ++i) ASSERT_EQ(got.params[i], want.params[i]) << "parameter " << i;
  EXPECT_LT(want.losses.back(), want.losses.front());
}

// Losses within `tol` relative, parameters within `tol` in relative norm ||a - b|| / ||b||
// (element-wise relative errors are ill-conditioned after Adam: an element whose gradient
// nearly cancels may move by up to lr either way when the summation order changes).
void expect_same_training(const Training& a, const Training& b, double tol, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (std::size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_NEAR(a.losses[i], b.losses[i], tol * std::abs(b.losses[i])) << what << " step " << i;
  }
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  double diff = 0, norm = 0, worst = 0;
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_FALSE(std::isnan(a.params[i])) << what << " parameter " << i;
    const double d = double(a.params[i]) - b.params[i];
    diff += d * d;
    norm += double(b.params[i]) * b.params[i];
    worst = std::max(worst, std::abs(d));
  }
  EXPECT_LT(std::sqrt(diff / norm), tol) << what << " (largest element difference " << worst << ")";
}

TEST(RunnerLocal, EverySingleRankVariantTrainsTheSame) {
  const Training ref = run_plan(test::reference_plan(), 3);
  const std::vector<PlanSpec> variants = {
      {.micro_batch = 2, .micro_batches = 4},
      {.micro_batches = 8, .schedule = "gpipe"},
      {.micro_batches = 8, .schedule = "zb-h1"},
      {.zero = 1}, {.zero = 2}, {.zero = 3}, {.zero = 1, .offload = true},
      {.recompute = "full"}, {.recompute = "selective"},
      {.micro_batch = 4, .micro_batches = 2, .schedule = "zb-h1", .zero = 3, .recompute = "full"},
  };
  for (const PlanSpec& v : variants) expect_same_training(run_plan(v, 3), ref, 1e-5, v.name());
}

TEST(RunnerLocal, TracesEveryInstructionAndAccountsMemory) {
  const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), make_plan({}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  RunnerOptions o;
  o.trace = true;
  Runner runner(prog, comm, corpus, o);
  runner.step();
  runner.step();
  const std::vector<trace::Event>& events = runner.tracer().events();
  ASSERT_EQ(events.size(), 2 * prog.rank(0).size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].instr, static_cast<int32_t>(i % prog.rank(0).size()));
    EXPECT_LE(events[i].start_ns, events[i].end_ns);
    if (i > 0) {
      EXPECT_GE(events[i].start_ns, events[i - 1].end_ns) << "one rank: issued in order";
    }
  }
  const MemoryTracker& mem = runner.memory();
  const int64_t params = ParamLayout(prog.model).size() * 4;
  EXPECT_EQ(mem.bytes(MemoryKind::kParams), params);
  EXPECT_EQ(mem.bytes(MemoryKind::kOptimizer), 2 * params);
  EXPECT_GT(mem.peak(), 4 * params) << "params + grads + m + v + activations";
  EXPECT_EQ(mem.bytes(MemoryKind::kActivations), 0) << "every micro-batch released after the step";
  EXPECT_GT(mem.samples().size(), 4u);
  const trace::Trace t = runner.tracer().gather(comm, mem.samples(), prog, "cpu-local");
  EXPECT_EQ(t.source, "measured");
  EXPECT_EQ(t.events.size(), events.size());
  // The trace names the Program that ran, and where.
  EXPECT_EQ(t.program.fingerprint, program::fingerprint(prog));
  EXPECT_EQ(t.training.at("dtype"), "fp32");
  EXPECT_EQ(t.cluster.at("name"), "cpu-local");
  EXPECT_EQ(t.cluster.at("hosts").size(), 1u);
  // Every memory sample says what it holds by kind, and the peak is one of them.
  int64_t peak = 0;
  for (const trace::MemorySample& m : t.memory) peak = std::max(peak, m.total());
  EXPECT_EQ(peak, mem.peak());
}

TEST(RunnerLocal, RunsOnlyTheProgramOfTheDtypeItComputesIn) {
  // The CPU executor computes in fp32, bf16 or fp16: a Program lowered for fp8 (Transformer Engine's
  // scaled GEMMs) would describe a run it does not make.
  spec::Training fp8 = test::tiny_training();
  fp8.dtype = spec::Dtype::kFp8;
  const program::Program wrong = program::lower(test::tiny_model(), fp8, make_plan({}));
  const Corpus corpus = Corpus::synthetic(wrong.model.vocab, wrong.model.seq_len, 7);
  LocalCommunicator comm;
  try {
    Runner runner(wrong, comm, corpus, {});
    ADD_FAILURE() << "an fp8 Program ran on the CPU executor";
  } catch (const ExecutorError& e) {
    EXPECT_NE(std::string(e.what()).find("executed_training"), std::string::npos) << e.what();
  }
  const spec::Training ran = executed_training(fp8);
  EXPECT_EQ(ran.dtype, spec::Dtype::kFp32);
  EXPECT_EQ(ran.global_batch, fp8.global_batch);
  EXPECT_NO_THROW(Runner(program::lower(test::tiny_model(), ran, make_plan({})), comm, corpus, {}));
}

TEST(RunnerLocal, RefusesAnExpertCapacityByItsField) {
  // The executor routes dropless: a capacity that drops or pads copies is simulated, not run.
  spec::Model moe = test::tiny_llama_model();
  moe.moe.experts = 4, moe.moe.top_k = 2, moe.moe.ffn_hidden = 64;
  spec::Training capped = test::tiny_training();
  capped.moe_capacity_factor = 1.0;
  const program::Program prog = program::lower(moe, capped, make_plan({}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  try {
    Runner runner(prog, comm, corpus, {});
    ADD_FAILURE() << "a capacity factor ran";
  } catch (const ExecutorError& e) {
    EXPECT_NE(std::string(e.what()).find("the training: /moe_capacity_factor"), std::string::npos) << e.what();
  }
  EXPECT_EQ(training_unsupported(moe, test::tiny_training()), "");
  // the flex dispatcher runs as the all-to-all at etp 1; with etp > 1 it is simulated, not run
  spec::Plan flex;
  flex.ep = 2;
  flex.moe_dispatcher = spec::MoeDispatcher::kFlex;
  EXPECT_EQ(plan_unsupported(moe, flex), "");
  flex.ep = 1;
  flex.etp = 2;
  EXPECT_EQ(plan_unsupported(moe, flex).rfind("/moe_dispatcher: ", 0), 0u) << plan_unsupported(moe, flex);
}

TEST(RunnerLocal, InjectedFaultThrowsOnItsRankAndStep) {
  RunnerOptions o;
  o.fault_rank = 0;
  o.fault_step = 1;
  const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), make_plan({}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  Runner runner(prog, comm, corpus, o);
  EXPECT_NO_THROW(runner.step());
  try {
    runner.step();
    FAIL() << "no fault";
  } catch (const InjectedFault& e) {
    EXPECT_NE(std::string(e.what()).find("injected fault in step 2 at #"), std::string::npos) << e.what();
  }
}

TEST(RunnerLocal, RejectsAWorldOfTheWrongSize) {
  const program::Program prog =
      program::lower(test::tiny_model(), test::tiny_training(), make_plan({.pp = 2, .dp = 2, .micro_batches = 4}));
  const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
  LocalCommunicator comm;
  try {
    Runner runner(prog, comm, corpus, {});
    FAIL() << "accepted a world of 1 for 4 ranks";
  } catch (const ExecutorError& e) {
    EXPECT_NE(std::string(e.what()).find("the plan needs 4 ranks (tp 1 x pp 2 x dp 2), the communicator has 1"),
              std::string::npos)
        << e.what();
  }
}

TEST(LocalCommunicator, DeliversMessagesToSelfInOrderByTag) {
  LocalCommunicator comm;
  std::vector<float> a = {1, 2}, b = {3, 4}, got(2);
  Request s1 = comm.isend(a, 0, 5), s2 = comm.isend(b, 0, 5);
  Request r = comm.irecv(got, 0, 5);
  EXPECT_TRUE(comm.test(s1));
  EXPECT_TRUE(comm.test(s2));
  EXPECT_TRUE(comm.test(r));
  EXPECT_EQ(got, a);
  Request r2 = comm.irecv(got, 0, 6);
  EXPECT_FALSE(comm.test(r2));
  Request s3 = comm.isend(b, 0, 6);
  EXPECT_TRUE(comm.test(s3));
  EXPECT_TRUE(comm.test(r2));
  EXPECT_EQ(got, b);
  EXPECT_THROW(comm.isend(a, 1, 0), CommError);
}

}  // namespace
}  // namespace stagecraft::executor
