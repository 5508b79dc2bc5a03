// The simulator on systems small enough to reason about by hand.
#include "sim/simulator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "cluster_fixture.hpp"
#include "core/count/count.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "sim/costs.hpp"
#include "sim/models/collectives.hpp"
#include "sim/memory_accounting.hpp"
#include "sim/models/memory.hpp"
#include "sim/symmetry.hpp"

namespace stagecraft::sim {
namespace {

// A GPU whose GEMMs all run at exactly peak and whose memory-bound work is free, so compute time
// is FLOPs / peak and stages are equal when they hold equal blocks.
using test::ideal_cluster;

// Blocks dominate: vocabulary 2 makes the head's 2hV FLOPs per token 1/10^4 of a block's.
spec::Model blocks_model(int64_t layers) {
  return spec::model_from_json({{"name", "blocks"}, {"layers", layers}, {"hidden", 512}, {"heads", 8}, {"vocab", 2},
                                {"seq_len", 128}, {"tied_embeddings", false}},
                               "blocks.json");
}

program::Program lower(const spec::Model& m, const nlohmann::json& plan) {
  spec::Plan p = spec::plan_from_json(plan, "plan.json");
  spec::Training t = spec::training_from_json({{"attention", "unfused"}, {"global_batch", p.micro_batch * p.micro_batches * p.dp}, {"dtype", "bf16"}}, "training.json");
  return program::lower(m, t, p);
}

SimResult free_comm(const program::Program& prog, int64_t gpus) {
  SimOptions o;
  o.network = NetworkModel::kFree;
  return simulate(prog, ideal_cluster(1, gpus), o);
}

TEST(Simulator, BubbleOfGpipeAnd1F1BIsPMinusOneOverMPlusPMinusOne) {
  const int64_t p = 4;
  for (const char* schedule : {"gpipe", "1f1b"}) {
    for (int64_t m : {4, 8, 16}) {
      SCOPED_TRACE(std::string(schedule) + " m=" + std::to_string(m));
      const SimResult r = free_comm(lower(blocks_model(8), {{"pp", p}, {"micro_batches", m}, {"schedule", schedule}}), p);
      const double expected = static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
      EXPECT_NEAR(r.metrics.bubble_fraction, expected, 0.003);
      EXPECT_DOUBLE_EQ(r.metrics.time.exposed_comm_s, 0.0);
    }
  }
}

TEST(Simulator, InterleavingDividesTheBubbleByV) {
  const int64_t p = 4, m = 8, v = 2;
  const SimResult r = free_comm(
      lower(blocks_model(16), {{"pp", p}, {"micro_batches", m}, {"schedule", "interleaved"}, {"virtual_stages", v}}), p);
  // Chunk passes take 1/v of a stage pass: (p-1) idle chunk-pass pairs against m v busy ones.
  const double expected = static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
  EXPECT_NEAR(r.metrics.bubble_fraction, expected, 0.003);
}

TEST(Simulator, ZeroBubbleH1BeatsOneFOneB) {
  const int64_t p = 4, m = 8;
  const SimResult one = free_comm(lower(blocks_model(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "1f1b"}}), p);
  const SimResult zb = free_comm(lower(blocks_model(8), {{"pp", p}, {"micro_batches", m}, {"schedule", "zb-h1"}}), p);
  EXPECT_LT(zb.metrics.bubble_fraction, one.metrics.bubble_fraction);
  EXPECT_LT(zb.metrics.step_time_s, one.metrics.step_time_s);
  // Same work: only the idle time changes.
  EXPECT_NEAR(zb.metrics.time.compute_s, one.metrics.time.compute_s, 1e-9);
}

TEST(Simulator, ComputeTimeIsFlopsOverPeak) {
  // One GPU, one micro-batch: the step is forward + backward of every unit plus Adam.
  const spec::Model m = blocks_model(2);
  const program::Program prog = lower(m, {{"micro_batches", 1}});
  const SimResult r = free_comm(prog, 1);
  const double tokens = 128;
  const double flops = tokens * count::model_flops_per_token_train(m);
  // Adam over P parameters moves (2*12 + 2) bytes each at hbm 1e30 B/s: nothing.
  EXPECT_NEAR(r.metrics.step_time_s, flops / 1e14, 2e-9);
  EXPECT_NEAR(r.metrics.model_tflops_per_gpu, flops / r.metrics.step_time_s / 1e12, 1e-9);
  EXPECT_NEAR(r.metrics.mfu, r.metrics.model_tflops_per_gpu * 1e12 / 1e14, 1e-12);
}

// The same Program the executor scores with (`eval --plan`): a forward-only lowering is timed as
// its forward FLOPs over the peak, no backward and no optimizer.
TEST(Simulator, ForwardOnlyProgramIsItsForwardFlopsOverPeak) {
  const spec::Model m = blocks_model(2);
  spec::Plan p = spec::plan_from_json({{"micro_batches", 1}}, "plan.json");
  spec::Training t = spec::training_from_json({{"attention", "unfused"}, {"global_batch", 1}, {"dtype", "bf16"}}, "training.json");
  program::LowerOptions o;
  o.forward_only = true;
  const program::Program fwd = program::lower(m, t, p, o);
  const SimResult r = free_comm(fwd, 1);
  EXPECT_NEAR(r.metrics.step_time_s, 128 * count::flops_per_token_fwd(m) / 1e14, 2e-9);
  // No gradients and no optimizer state: bf16 ZeRO-0 keeps 2 bytes of gradient and 12 of Adam
  // state (fp32 master, m, v) per parameter that a training step holds and scoring does not.
  const SimResult train = free_comm(program::lower(m, t, p), 1);
  const ModelStates ms = model_states(fwd.chunk(0, 0).params, 0, p.zero, 1, t.dtype);
  EXPECT_EQ(ms.grads + ms.optimizer, 14 * fwd.chunk(0, 0).params);
  EXPECT_GE(train.metrics.peak_memory_bytes - r.metrics.peak_memory_bytes, ms.grads + ms.optimizer);
  EXPECT_GE(r.metrics.peak_memory_bytes, ms.params);
}

TEST(Simulator, PipelineSendTakesLatencyPlusBytesOverLink) {
  // pp = 2 on two GPUs of one node: each activation message crosses NVLink (100 GB/s, 1 us).
  const spec::Model m = blocks_model(2);
  const program::Program prog = lower(m, {{"pp", 2}, {"micro_batches", 1}});
  SimOptions o;
  o.record_trace = true;
  const SimResult r = simulate(prog, ideal_cluster(1, 2), o);
  const int64_t bytes = 128 * 512 * 2;  // s b h, bf16
  const int64_t expected_ns = 1000 + (bytes * 1'000'000'000 + 100'000'000'000 - 1) / 100'000'000'000;
  bool seen = false;
  for (const trace::Event& e : r.trace.events) {
    if (e.op == program::Op::kSendActivation) {
      EXPECT_EQ(e.end_ns - e.start_ns, expected_ns);
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

TEST(Simulator, FullAndReplicaAgreeOnSymmetricPlans) {
  const spec::Model m = blocks_model(4);
  for (int zero : {1, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const program::Program prog = lower(m, {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 4},
                                            {"zero", {{"stage", zero}, {"prefetch_bucket", 300000}}}});
    const spec::Cluster c = ideal_cluster(2, 4);
    SimOptions full;
    full.full = true;
    const SimResult a = simulate(prog, c), b = simulate(prog, c, full);
    EXPECT_EQ(a.metrics.simulated_ranks, 2);
    EXPECT_EQ(b.metrics.simulated_ranks, 8);
    EXPECT_NEAR(a.metrics.step_time_s, b.metrics.step_time_s, 1e-9 * b.metrics.step_time_s);
    EXPECT_EQ(a.metrics.peak_memory_bytes, b.metrics.peak_memory_bytes);
  }
}

// Fewer NICs than GPUs: in the one-replica mode the unsimulated replicas' flows would leave the
// simulated rank alone on a NIC it really shares, so its all-gathers and reduce-scatters (and
// sends) would never contend. Its flows across nodes stand for every replica on its NIC, so both
// modes agree. Here 4 GPUs per node on 2 NICs: ranks 0 and 2 of node 0 both leave through NIC 0.
TEST(Simulator, FullAndReplicaAgreeWhenGpusShareANic) {
  const spec::Model m = blocks_model(4);
  for (const nlohmann::json& plan :
       {nlohmann::json{{"dp", 8}, {"micro_batches", 2}, {"zero", {{"stage", 3}, {"prefetch_bucket", 300000}, {"reduce_bucket", 300000}}}},
        nlohmann::json{{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"zero", {{"stage", 1}}}}}) {
    SCOPED_TRACE(plan.dump());
    const program::Program prog = lower(m, plan);
    // 2 NICs for 4 GPUs; and 4 NICs behind an uplink tapered 2:1, where the ranks on the other
    // NICs meet the simulated one at the core link instead
    for (const auto& [nics, taper] : {std::pair{2, 1.0}, std::pair{4, 2.0}}) {
      SCOPED_TRACE(std::to_string(nics) + " NICs, oversubscription " + std::to_string(taper));
      spec::Cluster c = ideal_cluster(2, 4);
      c.inter_node.nics_per_node = nics;
      c.inter_node.oversubscription = taper;
      c.inter_node.nic_bandwidth_Bps = 2e9;   // slow enough that the network binds
      SimOptions full;
      full.full = true;
      const SimResult a = simulate(prog, c), b = simulate(prog, c, full);
      ASSERT_LT(a.metrics.simulated_ranks, b.metrics.simulated_ranks);
      EXPECT_NEAR(a.metrics.step_time_s, b.metrics.step_time_s, 1e-6 * b.metrics.step_time_s);
      EXPECT_NEAR(a.metrics.time.exposed_comm_s, b.metrics.time.exposed_comm_s, 1e-6 * b.metrics.step_time_s);
    }
  }
}

TEST(Simulator, ZeroTwoKeepsATableTiedOverStagesWholeForTheStep) {
  // h 64, vocab 128, seq 16, 4 layers on pp 2, dp 2, bf16; reduce_bucket 1: each unit a bucket.
  // Stage 0's embedding unit: wte 128·64 + wpe 16·64 = 9216; stage 1's head: the final norm 64 + 64
  // and the lm head 128·64 = 8192 (tied: the table's copy; untied: its own), 8320 either way.
  // Tied, ZeRO-2 sums and reduces that bucket once a step, so its gradient stays whole beside its
  // shard: 2 bytes · (9216 − 9216/2) = 9216 more on stage 0, 2 · (8320 − 8320/2) = 8320 on stage 1.
  // ZeRO-1 keeps every gradient whole anyway: no difference.
  auto model = [](bool tied) {
    return spec::model_from_json({{"name", "g"}, {"layers", 4}, {"hidden", 64}, {"heads", 4}, {"vocab", 128},
                                  {"seq_len", 16}, {"tied_embeddings", tied}},
                                 "g.json");
  };
  const spec::Cluster c = ideal_cluster(1, 4);
  for (int zero : {1, 2}) {
    const nlohmann::json plan = {{"pp", 2}, {"dp", 2}, {"micro_batches", 2}, {"zero", {{"stage", zero}, {"reduce_bucket", 1}}}};
    const program::Program tied = lower(model(true), plan), untied = lower(model(false), plan);
    const std::vector<int64_t> extra = zero == 2 ? std::vector<int64_t>{2 * (9216 - 4608), 2 * (8320 - 4160)}
                                                 : std::vector<int64_t>{0, 0};
    for (int64_t stage : {0, 1}) {
      EXPECT_EQ(stage_static_memory(tied, stage, c)[trace::MemoryKind::kGrads] -
                    stage_static_memory(untied, stage, c)[trace::MemoryKind::kGrads],
                extra[static_cast<std::size_t>(stage)])
          << "ZeRO-" << zero << " stage " << stage;
    }
  }
}

TEST(Simulator, SameInputGivesByteIdenticalTrace) {
  const program::Program prog = lower(blocks_model(4), {{"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"zero", {{"stage", 2}}}});
  SimOptions o;
  o.record_trace = true;
  const spec::Cluster c = ideal_cluster(2, 2);
  const std::string a = trace::to_chrome_json(simulate(prog, c, o).trace).dump();
  const std::string b = trace::to_chrome_json(simulate(prog, c, o).trace).dump();
  EXPECT_EQ(a, b);
  EXPECT_GT(a.size(), 1000u);
}

TEST(Simulator, PeakMemoryAddsStatesActivationsAndReserve) {
  // One GPU, one micro-batch, no recompute: peak = model states + one micro-batch's activations.
  const spec::Model m = blocks_model(2);
  const program::Program prog = lower(m, {{"micro_batches", 1}});
  spec::Cluster c = ideal_cluster(1, 1);
  c.gpu.reserved_bytes = 1 << 20;
  const SimResult r = simulate(prog, c);
  const int64_t P = count::parameters(m);
  EXPECT_EQ(r.metrics.memory[trace::MemoryKind::kParams], 2 * P);
  EXPECT_EQ(r.metrics.memory[trace::MemoryKind::kGrads], 2 * P);
  EXPECT_EQ(r.metrics.memory[trace::MemoryKind::kOptimizer], 12 * P);
  EXPECT_EQ(r.metrics.memory[trace::MemoryKind::kReserved], 1 << 20);
  // Activations: per layer s b h (34 + 5 a s / h), plus the head's 2h + 4V per token.
  const double s = 128, h = 512, a = 8, V = 2;
  const double expected = 2 * s * h * (34 + 5 * a * s / h) + s * (2 * h + 4 * V);
  EXPECT_NEAR(static_cast<double>(r.metrics.memory[trace::MemoryKind::kActivations]), expected, 2.0);
  EXPECT_EQ(r.metrics.peak_memory_bytes, r.metrics.memory.total());
  EXPECT_TRUE(r.metrics.fits);
}

TEST(Simulator, PlanThatDoesNotFitSaysWhy) {
  const program::Program prog = lower(blocks_model(2), {{"micro_batches", 1}});
  spec::Cluster c = ideal_cluster(1, 1);
  c.gpu.memory_bytes = 64 << 20;  // 64 MiB: the 6.3M parameters' 16 bytes each do not fit
  const SimResult r = simulate(prog, c);
  EXPECT_FALSE(r.metrics.fits);
  EXPECT_NE(fit_reason(r.metrics).find("optimizer"), std::string::npos) << fit_reason(r.metrics);
  EXPECT_NE(fit_reason(r.metrics).find("exceeds"), std::string::npos) << fit_reason(r.metrics);
}

TEST(Simulator, CommunicationOnTheCriticalPathIsExposed) {
  // dp = 2 across two nodes, ZeRO-0 without overlap: the all-reduce runs after the backward.
  const program::Program prog = lower(blocks_model(2), {{"dp", 2}, {"micro_batches", 1}});
  const SimResult r = simulate(prog, ideal_cluster(2, 1));
  EXPECT_GT(r.metrics.time.exposed_comm_s, 0.0);
  EXPECT_GT(r.metrics.time.dp_s, 0.0);
  EXPECT_NEAR(r.metrics.time.compute_s + r.metrics.time.exposed_comm_s + r.metrics.time.bubble_s, r.metrics.step_time_s, 1e-12);
}

TEST(Simulator, TooSmallClusterIsRejected) {
  const program::Program prog = lower(blocks_model(2), {{"dp", 4}, {"micro_batches", 1}});
  EXPECT_THROW(simulate(prog, ideal_cluster(1, 2)), std::invalid_argument);
}

TEST(Simulator, ContentionFreeEqualsSharedWhenNothingContends) {
  // One GPU: no communication at all, so nothing can contend and both networks give one time.
  const spec::Model m = spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, "gpt3-1.3b"));
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "dgx-h100-ndr"));
  c.nodes = 1;
  const spec::Training t = spec::training_from_json({{"attention", "unfused"}, {"global_batch", 8}, {"dtype", "bf16"}}, "t.json");
  const spec::Plan p = spec::plan_from_json({{"micro_batch", 2}, {"micro_batches", 4}, {"recompute", "full"}}, "plan.json");
  const program::Program prog = program::lower(m, t, p);
  const double simulated = simulate(prog, c).metrics.step_time_s;
  EXPECT_NEAR(contention_free_step_s(prog, c), simulated, 1e-6 * simulated + 1e-9);
}


// contention_free_step_s(prog, c, above): the step time where it is at most `above`; past it, a
// time past `above` and no later than the step time.
TEST(Simulator, TheContentionFreeTimeStopsOnlyPastWhatIsAsked) {
  const program::Program prog =
      lower(blocks_model(8), {{"pp", 4}, {"dp", 2}, {"micro_batches", 4}, {"schedule", "1f1b"}, {"zero", {{"stage", 3}}}});
  const spec::Cluster c = ideal_cluster(2, 4);
  const double exact = contention_free_step_s(prog, c);
  ASSERT_GT(exact, 0.0);
  EXPECT_DOUBLE_EQ(contention_free_step_s(prog, c, exact), exact);
  EXPECT_DOUBLE_EQ(contention_free_step_s(prog, c, 2 * exact), exact);
  EXPECT_DOUBLE_EQ(contention_free_step_s(prog, c, std::numeric_limits<double>::infinity()), exact);
  for (const double above : {0.0, exact / 4, exact / 2, 0.999 * exact}) {
    const double partial = contention_free_step_s(prog, c, above);
    EXPECT_GT(partial, above);
    EXPECT_LE(partial, exact);
  }
}

// contention_free_stage_s: a stage's list alone (LowerOptions::only_stage), its peers always ready.
// Every start of the contention-free run is the latest end among its predecessors and every
// duration is fixed, so without the waits for peers the stage ends no later: at most the whole
// step's time; and its compute lane runs one instruction at a time from 0, so at least the sum of
// the stage's compute durations (read off the whole Program's contention-free trace). With one
// stage and one simulated replica nothing waits for a peer either way: the two are equal.
TEST(Simulator, AStageAloneBoundsTheContentionFreeStepFromBelow) {
  const spec::Cluster c = ideal_cluster(4, 4);
  const auto alone = [&](const nlohmann::json& j, int32_t stage, double above) {
    spec::Plan p = spec::plan_from_json(j, "plan.json");
    spec::Training t = spec::training_from_json(
        {{"attention", "unfused"}, {"global_batch", p.micro_batch * p.micro_batches * p.dp}, {"dtype", "bf16"}}, "training.json");
    program::LowerOptions o;
    o.only_stage = stage;
    return contention_free_stage_s(program::lower(blocks_model(8), t, p, o), c, above);
  };
  const nlohmann::json flat = {{"dp", 2}, {"micro_batches", 4}, {"zero", {{"stage", 3}}}};
  EXPECT_DOUBLE_EQ(alone(flat, 0, std::numeric_limits<double>::infinity()), contention_free_step_s(lower(blocks_model(8), flat), c));
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
    for (int zero : {1, 3}) {
      for (int tp : {1, 2}) {
        nlohmann::json j = {{"pp", 4}, {"dp", 2}, {"tp", tp}, {"micro_batches", 8}, {"schedule", schedule},
                            {"zero", {{"stage", zero}}}};
        if (std::string(schedule) == "interleaved") j["virtual_stages"] = 2;
        SCOPED_TRACE(j.dump());
        const program::Program prog = lower(blocks_model(8), j);
        const double step = contention_free_step_s(prog, c);
        SimOptions o;
        o.network = NetworkModel::kContentionFree;
        o.record_trace = true;
        const SimResult traced = simulate(prog, c, o);
        for (int32_t s = 0; s < 4; ++s) {
          const double bound = alone(j, s, std::numeric_limits<double>::infinity());
          EXPECT_LE(bound, step) << "stage " << s;
          const int64_t rank = prog.placement.rank(s, 0, 0);
          int64_t busy_ns = 0;
          for (const trace::Event& e : traced.trace.events) {
            if (e.rank == rank && e.lane == program::Lane::kCompute) busy_ns += e.end_ns - e.start_ns;
          }
          ASSERT_GT(busy_ns, 0) << "stage " << s;
          EXPECT_GE(bound, static_cast<double>(busy_ns) * 1e-9 * (1 - 1e-6)) << "stage " << s;
          // the pipeline's ends: micro-batch 0's forward of chunk 0 on every stage before s comes
          // before s's first compute (F); with 1F1B and GPipe, s sends its last gradient after all
          // its forwards and backwards, and the stages before it then run that micro-batch's
          // backward of chunk 0 in turn (D) — each from the full run's trace, less 1 ns an event
          int64_t fill_ns = 0, drain_ns = 0, passes_ns = 0, events = 0;
          for (const trace::Event& e : traced.trace.events) {
            if (e.lane != program::Lane::kCompute) continue;
            const int64_t stage = prog.placement.stage_of(e.rank);
            if (e.rank == rank && (e.op == program::Op::kForward || e.op == program::Op::kBackward)) passes_ns += e.end_ns - e.start_ns;
            if (stage >= s || e.rank != prog.placement.rank(stage, 0, 0) || e.chunk != 0) continue;
            if (e.op == program::Op::kForward && e.mb == 0) fill_ns += e.end_ns - e.start_ns, ++events;
            if (e.op == program::Op::kBackward && e.mb == 7) drain_ns += e.end_ns - e.start_ns, ++events;
          }
          EXPECT_GE(bound, static_cast<double>(fill_ns + busy_ns - events) * 1e-9 * (1 - 1e-6)) << "stage " << s;
          if (std::string(schedule) == "1f1b" || std::string(schedule) == "gpipe") {
            EXPECT_GE(bound, static_cast<double>(fill_ns + passes_ns + drain_ns - events) * 1e-9 * (1 - 1e-6)) << "stage " << s;
          }
          // stopped past `above`: past it, no later than the whole bound
          const double partial = alone(j, s, bound / 2);
          EXPECT_GT(partial, bound / 2);
          EXPECT_LE(partial, bound);
        }
      }
    }
  }
}


// The pipeline's ends in the stage bound, where compute dominates (micro-batches of 64 sequences,
// no data parallelism): the last stage of a 1F1B pipeline alone computes without a gap, so its
// bound is at least F + its passes + D — F micro-batch 0's forward of the three stages before it,
// D the last micro-batch's backward on them, each summed from the full run's trace (less 1 ns an
// instruction for rounding) — the bubble of (p − 1)(t_f + t_b) the alone run leaves out without them.
TEST(Simulator, AStageAloneCountsThePipelineFillAndDrain) {
  const spec::Cluster c = ideal_cluster(1, 4);
  const nlohmann::json j = {{"pp", 4}, {"micro_batch", 64}, {"micro_batches", 8}, {"schedule", "1f1b"}};
  spec::Plan p = spec::plan_from_json(j, "plan.json");
  const spec::Training t = spec::training_from_json(
      {{"attention", "unfused"}, {"global_batch", 64 * 8}, {"dtype", "bf16"}}, "training.json");
  const program::Program prog = program::lower(blocks_model(8), t, p);
  program::LowerOptions only_last;
  only_last.only_stage = 3;
  const double bound = contention_free_stage_s(program::lower(blocks_model(8), t, p, only_last), c, std::numeric_limits<double>::infinity());
  SimOptions o;
  o.network = NetworkModel::kContentionFree;
  o.record_trace = true;
  const SimResult traced = simulate(prog, c, o);
  int64_t fill_ns = 0, drain_ns = 0, passes_ns = 0, events = 0;
  for (const trace::Event& e : traced.trace.events) {
    if (e.lane != program::Lane::kCompute) continue;
    const int64_t stage = prog.placement.stage_of(e.rank);
    if (stage == 3 && (e.op == program::Op::kForward || e.op == program::Op::kBackward)) passes_ns += e.end_ns - e.start_ns;
    if (stage < 3 && e.op == program::Op::kForward && e.mb == 0) fill_ns += e.end_ns - e.start_ns, ++events;
    if (stage < 3 && e.op == program::Op::kBackward && e.mb == 7) drain_ns += e.end_ns - e.start_ns, ++events;
  }
  const double ends = static_cast<double>(fill_ns + drain_ns) * 1e-9;
  ASSERT_GT(ends, 0.2 * static_cast<double>(passes_ns) * 1e-9);   // 3 of 8 micro-batches' worth: a bound without them misses it
  EXPECT_GE(bound, static_cast<double>(fill_ns + passes_ns + drain_ns - events) * 1e-9 * (1 - 1e-6));
  EXPECT_LE(bound, contention_free_step_s(prog, c));
}

// Events by (rank, start, instruction): the order in which a run processes them is not part of a
// trace's meaning.
std::vector<trace::Event> sorted_events(std::vector<trace::Event> v) {
  std::sort(v.begin(), v.end(), [](const trace::Event& a, const trace::Event& b) {
    return std::tie(a.rank, a.start_ns, a.instr, a.end_ns) < std::tie(b.rank, b.start_ns, b.instr, b.end_ns);
  });
  return v;
}

bool same_event(const trace::Event& a, const trace::Event& b) {
  return a.rank == b.rank && a.lane == b.lane && a.op == b.op && a.instr == b.instr && a.start_ns == b.start_ns &&
         a.end_ns == b.end_ns && a.mb == b.mb && a.stage == b.stage && a.chunk == b.chunk && a.bytes == b.bytes &&
         a.flops == b.flops;
}

// The fast paths (one replica per stage, folding, the flow network's in-place settling) change
// nothing: with them off every rank is simulated, each instruction goes through the event queue
// and every rate change through the general solver, and every rank's events are those of the
// rank that stands for it in the one-replica run, at the same times.
void expect_fast_paths_change_nothing(const program::Program& prog, const spec::Cluster& c, NetworkModel network) {
  SimOptions fast, slow;
  fast.record_trace = slow.record_trace = true;
  fast.network = slow.network = network;
  slow.fast_paths = false;
  const SimResult a = simulate(prog, c, fast), b = simulate(prog, c, slow);
  EXPECT_EQ(a.metrics.simulated_ranks, prog.placement.pp);
  EXPECT_EQ(b.metrics.simulated_ranks, prog.placement.world());
  EXPECT_EQ(a.metrics.step_time_s, b.metrics.step_time_s);
  EXPECT_EQ(a.metrics.peak_memory_bytes, b.metrics.peak_memory_bytes);
  EXPECT_EQ(a.metrics.memory, b.metrics.memory);
  EXPECT_EQ(a.metrics.time.compute_s, b.metrics.time.compute_s);
  EXPECT_EQ(a.metrics.time.exposed_comm_s, b.metrics.time.exposed_comm_s);
  std::map<int64_t, std::vector<trace::Event>> replica;
  for (const trace::Event& e : sorted_events(a.trace.events)) replica[e.rank].push_back(e);
  std::map<int64_t, std::vector<trace::Event>> every;
  for (const trace::Event& e : sorted_events(b.trace.events)) every[e.rank].push_back(e);
  ASSERT_EQ(static_cast<int64_t>(every.size()), prog.placement.world());
  for (const auto& [rank, events] : every) {
    const std::vector<trace::Event>& expected = replica.at(replica_rank(prog.placement, rank));
    ASSERT_EQ(events.size(), expected.size()) << "rank " << rank;
    for (std::size_t i = 0; i < events.size(); ++i) {
      trace::Event e = expected[i];
      e.rank = rank;
      ASSERT_TRUE(same_event(events[i], e)) << "rank " << rank << " event " << i << " (instr " << e.instr << ")";
    }
  }
  // memory over time: the same samples on every rank of a stage
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> mem_a, mem_b;
  for (const trace::MemorySample& m : a.trace.memory) mem_a[m.rank].emplace_back(m.time_ns, m.total());
  for (const trace::MemorySample& m : b.trace.memory) mem_b[m.rank].emplace_back(m.time_ns, m.total());
  for (const auto& [rank, samples] : mem_b) EXPECT_EQ(samples, mem_a.at(replica_rank(prog.placement, rank))) << "rank " << rank;
}

TEST(Simulator, FastPathsOffGiveTheSameTraceOnSymmetricPlans) {
  const spec::Model m = blocks_model(4);
  const spec::Cluster c = ideal_cluster(2, 4);
  for (int zero : {0, 1, 3}) {
    for (const char* schedule : {"1f1b", "zb-h1"}) {
      SCOPED_TRACE(std::string("zero ") + std::to_string(zero) + " " + schedule);
      // tp 2 (folded tp collectives), pp 2 (p2p flows), dp 2 across the two nodes (dp flows)
      const program::Program prog = lower(m, {{"tp", 2}, {"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"schedule", schedule},
                                              {"zero", {{"stage", zero}, {"prefetch_bucket", 300000}, {"overlap_comm", true}}}});
      for (NetworkModel network : {NetworkModel::kShared, NetworkModel::kContentionFree, NetworkModel::kFree}) {
        SCOPED_TRACE("network " + std::to_string(static_cast<int>(network)));
        expect_fast_paths_change_nothing(prog, c, network);
      }
    }
  }
}

TEST(Simulator, ContentionFreeIsALowerBoundAndSharedLinksSlowDown) {
  // One GPU per node, pp 2 × dp 2, ZeRO-2 with overlap: stage 0 reduce-scatters each
  // micro-batch's gradients with its data-parallel peer on another node while it still sends the
  // next micro-batches' activations to stage 1 on a third: both leave through its one NIC, so the
  // shared network is slower than every transfer alone.
  const spec::Model m = blocks_model(4);
  const spec::Cluster c = ideal_cluster(4, 1);
  const program::Program prog =
      lower(m, {{"pp", 2}, {"dp", 2}, {"micro_batches", 4}, {"zero", {{"stage", 2}, {"overlap_comm", true}}}});
  SimOptions free_of_contention;
  free_of_contention.network = NetworkModel::kContentionFree;
  const double shared = simulate(prog, c).metrics.step_time_s;
  const double alone = simulate(prog, c, free_of_contention).metrics.step_time_s;
  EXPECT_LT(alone, shared);
  EXPECT_DOUBLE_EQ(contention_free_step_s(prog, c), alone * (1 - 1e-6));
}
program::Program lower_with(const spec::Model& m, const nlohmann::json& plan, const nlohmann::json& framework) {
  spec::Plan p = spec::plan_from_json(plan, "plan.json");
  spec::Training t = spec::training_from_json({{"attention", "unfused"}, {"global_batch", p.micro_batch * p.micro_batches * p.dp}, {"dtype", "bf16"}, {"framework", framework}},
      "training.json");
  return program::lower(m, t, p);
}

// A framework's collective: k pieces of ⌈S/k⌉ through NCCL's model, plus its HBM copies at the
// memory rate and its host work (spec/framework.hpp, sim/costs.hpp):
//   deepspeed-0.5 gather:   T = k·T₁(⌈S/k⌉) + 4·S / hbm + k · (n · (1.5 + 5) µs + 0.8 ms) (memset S,
//                           list copy 2·S, the debug message's norm S; host work per rank and per tensor)
//   deepspeed reduce-scatter: T = T₁(S) + 4·S / hbm
TEST(Simulator, FrameworkCollectivesPayTheirPiecesCopiesAndHostWork) {
  const spec::Model m = blocks_model(2);
  spec::Cluster c = ideal_cluster(1, 2);
  c.gpu.hbm_Bps = 1e12;   // 1 TB/s, memory_efficiency 1
  SimOptions o;
  o.record_trace = true;
  o.network = NetworkModel::kContentionFree;
  const Topology topology(c, 2);
  const std::vector<int64_t> group{0, 1};
  const nlohmann::json plan = {{"dp", 2}, {"zero", {{"stage", 3}, {"prefetch_bucket", 1}, {"param_persistence_threshold", 0}}}};
  for (const std::string framework : {"deepspeed-0.5", "deepspeed"}) {
    SCOPED_TRACE(framework);
    const program::Program prog = lower_with(m, plan, framework);
    const SimResult r = simulate(prog, c, o);
    int checked = 0;
    for (const trace::Event& e : r.trace.events) {
      if (e.rank != 0 || (e.op != program::Op::kGatherParams && e.op != program::Op::kReduceScatterGrads)) continue;
      const program::Instr& in = prog.rank(0)[static_cast<std::size_t>(e.instr - prog.role_of(0).first_id)];
      const bool gather = e.op == program::Op::kGatherParams;
      const int64_t k = gather ? prog.param_buckets[in.bucket].collectives : prog.grad_buckets[in.bucket].collectives;
      const double S = static_cast<double>(in.bytes);
      const CollectiveKind kind = gather ? CollectiveKind::kAllGather : CollectiveKind::kReduceScatter;
      int64_t expected = k * collective_time_ns(kind, (in.bytes + k - 1) / k, group, topology);
      if (framework == "deepspeed-0.5") {
        // a unit's tensors each on their own (embedding: wte, wpe; attention: norm w, b, qkv w, b,
        // out w, b; head: norm w, b, lm head); the gradients' one bucket holds all 2 + 4·6 + 3
        EXPECT_EQ(k, !gather ? 29 : in.unit_begin == 0 ? 2 : (in.unit_begin == 5 ? 3 : 6));
        const double passes = gather ? 4 : 2;
        expected += std::llround((passes * S / 1e12 + static_cast<double>(k) * (2 * 6.5e-6 + (gather ? 0.8e-3 : 0.0))) * 1e9);
      } else {
        expected += std::llround((gather ? 0.0 : 4 * S / 1e12) * 1e9);
      }
      EXPECT_EQ(e.end_ns - e.start_ns, expected) << program::to_string(e.op) << " unit " << in.unit_begin;
      ++checked;
    }
    EXPECT_GT(checked, 4);
  }
}

// One NCCL communicator runs one collective at a time (spec/framework.hpp, Communicators): FSDP's
// backward issues the next unit's gather and then this unit's reduce-scatter, which with a
// communicator each run side by side and with one take turns, each starting once the one issued
// before it has ended.
TEST(Simulator, CollectivesOfOneCommunicatorTakeTurns) {
  const spec::Model m = blocks_model(4);
  const spec::Cluster c = ideal_cluster(2, 1);   // compute at 1e14 FLOP/s: the collectives dominate
  SimOptions o;
  o.record_trace = true;
  const nlohmann::json plan = {{"dp", 2}, {"zero", {{"stage", 3}, {"overlap_comm", true}}}};
  auto dp_events = [](const SimResult& r) {
    std::vector<trace::Event> out;
    for (const trace::Event& e : r.trace.events) {
      if (e.rank == 0 && (e.op == program::Op::kGatherParams || e.op == program::Op::kReduceScatterGrads)) out.push_back(e);
    }
    std::sort(out.begin(), out.end(), [](const trace::Event& a, const trace::Event& b) { return a.start_ns < b.start_ns; });
    return out;
  };
  const SimResult separate = simulate(lower_with(m, plan, {{"name", "fsdp"}, {"reduce_communicator", "separate"}}), c, o);
  const SimResult shared = simulate(lower_with(m, plan, "fsdp"), c, o);
  // the premise: apart, a gather and a reduce-scatter overlap
  const std::vector<trace::Event> apart = dp_events(separate);
  int64_t overlaps = 0;
  for (std::size_t i = 1; i < apart.size(); ++i) overlaps += apart[i].start_ns < apart[i - 1].end_ns;
  ASSERT_GT(overlaps, 0);
  // one communicator: back to back at most, so the step is longer
  const std::vector<trace::Event> turns = dp_events(shared);
  ASSERT_EQ(turns.size(), apart.size());
  for (std::size_t i = 1; i < turns.size(); ++i) EXPECT_GE(turns[i].start_ns, turns[i - 1].end_ns) << "collective " << i;
  EXPECT_GT(shared.metrics.step_time_s, separate.metrics.step_time_s);
}

// deepspeed-0.5 synchronises the device in every fetch: no gather runs while the GPU computes.
// Current DeepSpeed prefetches, so gathers hide behind compute.
TEST(Simulator, SynchronousFetchesNeverOverlapCompute) {
  const spec::Model m = blocks_model(4);
  spec::Cluster c = ideal_cluster(2, 1);
  c.inter_node.nic_bandwidth_Bps = 5e9;
  SimOptions o;
  o.record_trace = true;
  const nlohmann::json plan = {{"dp", 2}, {"micro_batches", 2}, {"zero", {{"stage", 3}, {"prefetch_bucket", 1}}}};
  std::map<std::string, double> step;
  for (const std::string framework : {"deepspeed-0.5", "deepspeed"}) {
    const SimResult r = simulate(lower_with(m, plan, framework), c, o);
    std::vector<std::pair<int64_t, int64_t>> compute, gathers;
    for (const trace::Event& e : r.trace.events) {
      if (e.rank != 0) continue;
      if (program::is_compute(e.op)) compute.emplace_back(e.start_ns, e.end_ns);
      if (e.op == program::Op::kGatherParams) gathers.emplace_back(e.start_ns, e.end_ns);
    }
    int64_t overlap = 0;
    for (const auto& [gs, ge] : gathers) {
      for (const auto& [cs, ce] : compute) overlap += std::max<int64_t>(0, std::min(ge, ce) - std::max(gs, cs));
    }
    if (framework == "deepspeed-0.5") {
      EXPECT_EQ(overlap, 0);
    } else {
      EXPECT_GT(overlap, 0);
    }
    step[framework] = r.metrics.step_time_s;
  }
  EXPECT_GT(step["deepspeed-0.5"], step["deepspeed"]);
}
// Megatron-LM of 2021 without contiguous gradient buffers (fp16, its default) flattens the
// gradients into one buffer (read and write S), scales it (S and S) and copies it back after the
// all-reduce (S and S): 6·S bytes around each all-reduce; bf16 forces the buffers, scaled in place:
// 2·S (core/spec/framework.hpp).
TEST(Simulator, Megatron2021FlattensScalesAndCopiesBackItsGradientsWithoutBuffers) {
  const spec::Model m = blocks_model(2);
  const spec::Plan p = spec::plan_from_json({{"dp", 2}}, "plan.json");
  for (const auto& [dtype, passes] : {std::pair{"fp16", 6.0}, std::pair{"bf16", 2.0}}) {
    SCOPED_TRACE(dtype);
    const spec::Training t = spec::training_from_json(
        {{"attention", "unfused"}, {"global_batch", 2}, {"dtype", dtype}, {"framework", "megatron-2021"}}, "training.json");
    const program::Program prog = program::lower(m, t, p);
    int reductions = 0;
    for (const program::Instr& in : prog.roles[0].instrs) {
      if (in.op != program::Op::kAllReduceGrads || in.group != program::Group::kDp) continue;
      ++reductions;
      EXPECT_DOUBLE_EQ(framework_work(prog, prog.training.framework_profile(), in, 2).copy_bytes,
                       passes * static_cast<double>(in.bytes));
    }
    EXPECT_GT(reductions, 0);
  }
}
// NCCL's kernels hold C = nccl.channels of the GPU's SMs while a data-parallel collective runs
// beside compute (sim/simulation.hpp): compute overlapping it for Δ takes Δ·f/(1 − f) longer,
// f = C/SMs. ZeRO-2 with overlap_comm on 2 nodes, one gradient bucket per unit, micro-batch 1,
// full recompute (a compute segment per block): backward runs head, [recompute, backward] of
// block 1, the same of block 0, the embedding. The head's reduce-scatter runs beside block 1's
// recompute; MLP 1's and attention 1's, one after the other, beside block 0's recompute and
// backward; MLP 0's beside the embedding's short backward, for that backward's length; the rest
// beside nothing. With f = 20/100 (f/(1 − f) = 0.25) the step grows by
// 0.25·(T_head + T_mlp1 + T_attn1 + d_emb), each read from the run without SM sharing.
TEST(Simulator, NcclKernelsBesideComputeSlowItByTheirShareOfTheSms) {
  const spec::Model m = blocks_model(2);
  spec::Cluster c = ideal_cluster(2, 1);
  c.inter_node.nic_bandwidth_Bps = 50e9;
  c.gpu.peak_flops[spec::Dtype::kBf16] = 5e12;   // long computes: the collectives hide
  c.nccl.channels = 20;
  const program::Program prog = lower(
      m, {{"dp", 2}, {"recompute", "full"}, {"zero", {{"stage", 2}, {"reduce_bucket", 1}, {"overlap_comm", true}}}});
  SimOptions o;
  o.record_trace = true;
  const SimResult base = simulate(prog, c, o);
  c.gpu.sm_count = 100;
  const SimResult shared = simulate(prog, c, o);
  std::map<int32_t, int64_t> rs;   // unit -> reduce-scatter duration
  int64_t emb_backward = 0, recompute1 = 0, block0 = 0;
  for (const trace::Event& e : base.trace.events) {
    if (e.rank != 0) continue;
    const program::Instr& in = prog.rank(0)[static_cast<std::size_t>(e.instr - prog.role_of(0).first_id)];
    const int64_t d = e.end_ns - e.start_ns;
    if (e.op == program::Op::kReduceScatterGrads) rs[in.unit_begin] = d;
    if (e.op == program::Op::kBackward && in.unit_begin == 0) emb_backward = d;
    if (e.op == program::Op::kRecompute && in.unit_begin == 3) recompute1 = d;
    if ((e.op == program::Op::kRecompute || e.op == program::Op::kBackward) && in.unit_begin == 1) block0 += d;
  }
  ASSERT_EQ(rs.size(), 6u);
  // the premises: what should hide does
  ASSERT_LT(rs[5], recompute1);
  ASSERT_LT(rs[4] + rs[3], block0);
  ASSERT_LT(emb_backward, rs[2]);
  const double extra_ns = 0.25 * static_cast<double>(rs[5] + rs[4] + rs[3] + emb_backward);
  EXPECT_GT(extra_ns, 0);
  EXPECT_NEAR((shared.metrics.step_time_s - base.metrics.step_time_s) * 1e9, extra_ns, 4.0);
  // the contention-free network keeps no SM sharing: still a lower bound of the shared step
  EXPECT_LE(contention_free_step_s(prog, c), shared.metrics.step_time_s);
}
// NCCL's data crosses HBM three times per bus byte (FIFO written, read, output written;
// sim/simulation.hpp), an HBM demand h = 3·S·F/(T·hbm_Bps) while a collective of S bytes runs for T;
// compute kernels streaming at memory_efficiency e then get e − h of the rate (at least e/2): they
// take g = e/(e − h) − 1 longer. The SM test's plan with free GEMMs, so that every compute
// instruction is streaming (c = 1: the SM share does not enter), micro-batch 32 so that the
// reduce-scatters hide, hbm_Bps 1e11 at e = 0.5 and 5 GB/s NICs: h = 3·S·(1/2)/(T·1e11) for
// each reduce-scatter (dp 2: F = 1/2), read from its size and its time in the run without NCCL
// beside compute. The head's reduce-scatter runs beside block 1's recompute, MLP 1's and
// attention 1's beside block 0's recompute (the second's start owed to block 0's backward), and
// the step ends with the chain of reduce-scatters after block 0, which the embedding's backward,
// slowed beside MLP 0's, still ends within: the step grows by
// g(h_head)·T_head + g(h_mlp1)·T_mlp1 + g(h_attn1)·T_attn1.
TEST(Simulator, NcclTrafficThroughHbmSlowsTheStreamingComputeBesideIt) {
  const spec::Model m = blocks_model(2);
  spec::Cluster c = ideal_cluster(2, 1);
  c.inter_node.nic_bandwidth_Bps = 5e9;
  c.gpu.peak_flops[spec::Dtype::kBf16] = 1e30;   // GEMMs free: the compute is its memory-bound kernels
  c.gpu.hbm_Bps = 1e11;
  c.gpu.memory_efficiency = 0.5;
  c.nccl.channels = 20;
  const program::Program prog = lower(m, {{"dp", 2}, {"micro_batch", 32}, {"recompute", "full"},
                                          {"zero", {{"stage", 2}, {"reduce_bucket", 1}, {"overlap_comm", true}}}});
  SimOptions o;
  o.record_trace = true;
  const SimResult base = simulate(prog, c, o);
  c.gpu.sm_count = 100;
  const SimResult shared = simulate(prog, c, o);
  std::map<int32_t, std::pair<int64_t, int64_t>> rs;   // unit -> (bytes, duration)
  int64_t emb_backward = 0, recompute1 = 0, recompute0 = 0;
  for (const trace::Event& e : base.trace.events) {
    if (e.rank != 0) continue;
    const program::Instr& in = prog.rank(0)[static_cast<std::size_t>(e.instr - prog.role_of(0).first_id)];
    const int64_t d = e.end_ns - e.start_ns;
    if (e.op == program::Op::kReduceScatterGrads) rs[in.unit_begin] = {in.bytes, d};
    if (e.op == program::Op::kBackward && in.unit_begin == 0) emb_backward = d;
    if (e.op == program::Op::kRecompute && in.unit_begin == 3) recompute1 = d;
    if (e.op == program::Op::kRecompute && in.unit_begin == 1) recompute0 = d;
  }
  ASSERT_EQ(rs.size(), 6u);
  auto g = [](const std::pair<int64_t, int64_t>& r) {
    const double h = 3.0 * static_cast<double>(r.first) * 0.5 / (static_cast<double>(r.second) * 1e-9 * 1e11);
    EXPECT_LT(h, 0.25);   // below e/2: not the floor
    return 0.5 / (0.5 - h) - 1;
  };
  // the premises: what should hide does, and the slowed embedding backward ends within the chain
  ASSERT_LT(rs[5].second, recompute1);
  ASSERT_LT(rs[4].second + rs[3].second, recompute0);
  ASSERT_LT(static_cast<double>(emb_backward) * (1 + g(rs[2])), static_cast<double>(rs[2].second + rs[1].second));
  const double extra_ns = g(rs[5]) * static_cast<double>(rs[5].second) + g(rs[4]) * static_cast<double>(rs[4].second) +
                          g(rs[3]) * static_cast<double>(rs[3].second);
  EXPECT_GT(g(rs[4]), 0.1);   // a visible effect: 3 bytes per bus byte against a slow HBM
  EXPECT_NEAR((shared.metrics.step_time_s - base.metrics.step_time_s) * 1e9, extra_ns, 4.0);
}
// offload_param (ZeRO-Infinity's CPU offload): the shard leaves the GPU, and each gather first
// copies the rank's S/n bytes over PCIe (sim/costs.hpp). dp 4, ZeRO-3, optimizer offloaded.
TEST(Simulator, OffloadedParametersLeaveTheGpuAndCrossPcieBeforeEachGather) {
  const spec::Model m = blocks_model(4);
  const nlohmann::json base = {{"dp", 4}, {"micro_batches", 2},
                               {"zero", {{"stage", 3}, {"offload_optimizer", "cpu"}, {"offload_param", "none"}}}};
  nlohmann::json offload = base;
  offload["zero"]["offload_param"] = "cpu";
  const program::Program off = lower(m, base), on = lower(m, offload);
  const spec::Cluster c = ideal_cluster(1, 4);
  const SimResult r_off = simulate(off, c), r_on = simulate(on, c);
  // the rank's 2-byte shard of the stage's P parameters, ⌈P/4⌉ elements, is no longer on the GPU;
  // the persistent tensors (norms, below the 1e5 threshold) stay
  const int64_t P = off.chunk(0, 0).params;
  EXPECT_EQ(r_off.metrics.memory[trace::MemoryKind::kParams] - r_on.metrics.memory[trace::MemoryKind::kParams],
            2 * ((P + 3) / 4));
  EXPECT_GE(r_on.metrics.step_time_s, r_off.metrics.step_time_s);
  int gathers = 0;
  for (const program::Instr& in : on.roles[0].instrs) {
    if (in.op != program::Op::kGatherParams) continue;
    ++gathers;
    EXPECT_EQ(framework_work(on, on.training.framework_profile(), in, 4).host_copy_bytes, static_cast<double>(in.bytes) / 4);
    EXPECT_EQ(framework_work(off, off.training.framework_profile(), in, 4).host_copy_bytes, 0.0);
  }
  EXPECT_GT(gathers, 0);
}

}  // namespace
}  // namespace stagecraft::sim
