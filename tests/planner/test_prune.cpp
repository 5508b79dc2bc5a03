// Pruning is only allowed to drop plans that could not win: every bound must hold against the
// simulator itself, on plans of every kind (each ZeRO stage, each schedule, tp with and without
// sequence parallelism, recompute, offload, and each ZeRO variant across nodes: hpZ, ZeRO++, shard groups).
#include "planner/prune.hpp"

#include <gtest/gtest.h>

#include <map>

#include "fixtures.hpp"
#include "planner/prune_detail.hpp"
#include "core/program/fingerprint.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::planner {
namespace {

std::string category(const Candidate& c) {
  return std::to_string(c.zero) + to_string(c.zero_variant) + spec::to_string(c.schedule) + (c.tp > 1 ? (c.sequence_parallel ? "sp" : "tp") : "") +
         spec::to_string(c.recompute) + (c.offload ? "off" : "") + (c.max_live_i == 0 ? "live-small" : "") +
         (c.cp > 1 ? std::string("cp-") + spec::to_string(c.cp_comm) : "") + (c.ep > 1 ? "ep" + std::to_string(c.ep) : "") +
         (c.etp > 1 ? "etp" + std::to_string(c.etp) : "") +
         (c.moe_dispatcher == spec::MoeDispatcher::kAllGather ? "allgather" : c.moe_dispatcher == spec::MoeDispatcher::kFlex ? "flex" : "");
}

// A Megatron-Core mixture of experts: 8 experts top-2, `layers` layers.
spec::Model moe_model(int64_t layers) {
  return spec::model_from_json(
      {{"name", "moe"}, {"layers", layers}, {"hidden", 1024}, {"heads", 8}, {"kv_heads", 8}, {"ffn_hidden", 2816}, {"vocab", 32000},
       {"seq_len", 2048}, {"mlp", "swiglu"}, {"norm", "rmsnorm"}, {"position", "rope"}, {"bias", false},
       {"tied_embeddings", false}, {"moe", {{"experts", 8}, {"experts_per_token", 2}, {"expert_ffn_hidden", 2816}}}},
      "moe.json");
}

// Up to `per` candidates of each category with the given verdict, spread over the enumeration.
std::vector<test::Scored> sample(const std::vector<test::Scored>& all, Verdict v, int per) {
  std::map<std::string, std::vector<const test::Scored*>> by;
  for (const auto& s : all) {
    if (s.verdict == v) by[category(s.candidate)].push_back(&s);
  }
  std::vector<test::Scored> out;
  for (const auto& [cat, list] : by) {
    for (int i = 0; i < per && i < static_cast<int>(list.size()); ++i) {
      out.push_back(*list[static_cast<std::size_t>(i) * list.size() / static_cast<std::size_t>(per)]);
    }
  }
  return out;
}

// Returns how many of the checked plans run ZeRO across nodes.
int expect_bounds_hold(const Space& space, int per_category) {
  const auto all = test::enumerate(space);
  const auto picked = sample(all, Verdict::kKeep, per_category);
  EXPECT_GT(picked.size(), 40u);
  int across = 0;
  for (const auto& s : picked) {
    const spec::Plan plan = space.plan(s.candidate);
    const program::Program prog = program::lower(space.model(), space.training(), plan);
    const sim::SimResult r = sim::simulate(prog, space.cluster());
    const double path = sim::contention_free_step_s(prog, space.cluster());
    EXPECT_LE(s.estimate.step_time_lb_s, r.metrics.step_time_s) << plan_key(plan);
    EXPECT_LE(path, r.metrics.step_time_s) << plan_key(plan);
    EXPECT_LE(s.estimate.step_time_lb_s, path * (1 + 1e-5)) << plan_key(plan) << ": the analytic bound is looser by design";
    EXPECT_LE(s.estimate.memory_lb_bytes, r.metrics.peak_memory_bytes) << plan_key(plan);
    across += s.candidate.zero_variant != ZeroVariant::kPlain;
  }
  return across;
}

TEST(Prune, StepTimeAndMemoryBoundsHoldAgainstTheSimulator) {
  expect_bounds_hold(test::medium_space(), 2);
  // two nodes: data-parallel and pipeline traffic over InfiniBand
  // (DeepSpeed, 8 data-parallel ranks a node at tp 1: hpZ, ZeRO++ and MiCS plans among them)
  EXPECT_GE(expect_bounds_hold(Space(test::bundled_model("gpt3-6.7b"), test::bundled_cluster("dgx-h100-ndr", 2), test::training(32), 16, {}), 1), 3);
  // FSDP2 (hybrid sharding at ZeRO-2/3, reshard_after_forward over a node) and Megatron-LM (optimizer
  // instances at ZeRO-1): their replicas' all-reduce on a stream of its own, or on the reduce lane
  for (spec::Framework f : {spec::Framework::kFsdp2, spec::Framework::kMegatron}) {
    spec::Training t = test::training(32);
    t.framework = f;
    EXPECT_GE(expect_bounds_hold(Space(test::bundled_model("gpt3-1.3b"), test::bundled_cluster("dgx-h100-ndr", 2), t, 16, {}), 1), 1)
        << spec::to_string(f);
  }
  // TP communication overlap shortens the sequence-parallel plans' collectives: the bounds take the
  // same shorter times (sim/models/tp_overlap.hpp)
  spec::Training overlap = test::training(64);
  overlap.tp_comm_overlap = true;
  expect_bounds_hold(Space(test::bundled_model("gpt3-1.3b"), test::bundled_cluster("dgx-h100-ndr", 1), overlap, 8, {}), 1);
  // context parallelism (Megatron-Core: p2p, all_gather, a2a) at 8K tokens over two nodes: the
  // rank's tokens in every term, the cp collectives left out of the bound
  spec::Training long_context = test::training(16);
  long_context.framework = spec::Framework::kMegatron;
  long_context.seq_len = 8192;
  SpaceLimits cp_limits;
  cp_limits.cp = {2, 4};
  expect_bounds_hold(Space(test::bundled_model("llama3-8b"), test::bundled_cluster("dgx-h100-ndr", 2), long_context, 16, cp_limits), 1);
  // experts (Megatron-Core, 8 experts top-2, 8 layers): ep 1 to 8, etp 1 to tp and the three token
  // dispatchers over two nodes, the experts' states over their own group in the memory bound, their
  // all-to-alls, gathers and scatters in the time bound at their cheapest placement
  const spec::Model moe = moe_model(8);
  spec::Training megatron = test::training(32);
  megatron.framework = spec::Framework::kMegatron;
  SpaceLimits moe_limits;
  moe_limits.pp = {1, 2};
  expect_bounds_hold(Space(moe, test::bundled_cluster("dgx-h100-ndr", 2), megatron, 16, moe_limits), 1);
}

// DeepSpeed ZeRO-3 with tp > 1 puts the gathers and the gradient reductions on one communicator,
// one collective at a time (framework.hpp, dp_communicator), so the step lasts at least both
// lanes' time together: the same candidates bound no lower than with a communicator each, higher
// where the lanes dominate (GPT-3 175B on 1024 A100s, tp 2: each pass gathers 175 GB over dp 512
// across HDR InfiniBand), and never above the shared Program's contention-free step time.
TEST(Prune, OneCommunicatorAddsTheGatherAndReductionLanes) {
  SpaceLimits l;
  l.tp = {2};
  l.pp = {1};
  l.zero = {3};
  l.zero_variants = {ZeroVariant::kPlain};
  l.offload = {spec::Offload::kNone};
  l.recompute = {spec::Recompute::kSelective};  // full recompute's compute outlasts both lanes here
  l.micro_batch = {1};
  spec::Training separate = test::training(1536);
  separate.shared_reduce_communicator = false;
  spec::Training shared = test::training(1536);
  ASSERT_TRUE(shared.framework_profile(2, 3).one_dp_communicator);
  ASSERT_FALSE(separate.framework_profile(2, 3).one_dp_communicator);
  const spec::Model m = test::bundled_model("gpt3-175b");
  const spec::Cluster c = test::bundled_cluster("dgx-a100-80g-hdr", 128);
  const Space one(m, c, shared, 1024, l), two(m, c, separate, 1024, l);
  const auto a = test::enumerate(one), b = test::enumerate(two);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GT(a.size(), 10u);
  int higher = 0, checked = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(plan_key(one.plan(a[i].candidate)), plan_key(two.plan(b[i].candidate)));
    EXPECT_GE(a[i].estimate.step_time_lb_s, b[i].estimate.step_time_lb_s) << plan_key(one.plan(a[i].candidate));
    higher += a[i].estimate.step_time_lb_s > 1.01 * b[i].estimate.step_time_lb_s;
    if (a[i].verdict != Verdict::kKeep || i % 8 != 0) continue;
    const program::Program prog = program::lower(m, shared, one.plan(a[i].candidate));
    EXPECT_LE(a[i].estimate.step_time_lb_s, sim::contention_free_step_s(prog, c) * (1 + 1e-5)) << plan_key(one.plan(a[i].candidate));
    ++checked;
  }
  EXPECT_GT(higher, 0);
  EXPECT_GT(checked, 2);
}

// The pipeline's critical path over whole passes (prune_detail.hpp pipeline_path), by hand on
// 1F1B with p = 2, m = 3: stage 0 runs F0 F1 B0 F2 B1 B2, stage 1 F0 B0 F1 B1 F2 B2. Every pass
// computes 1 s forward and 2 s backward; 0.1 s (forward) and 0.2 s (backward) of collectives
// follow its last compute; a send takes 0.5 s and holds the sender's next compute (blocking).
//   stage 0  F0 0-1, sent 1+0.1+0.5 = 1.6        F1 1.6-2.6 (waits for F0's send), sent 3.2
//   stage 1  F0 1.6-2.6   B0 2.6-4.6, sent 4.6+0.2+0.5 = 5.3   F1 5.3-6.3 (waits for B0's send)
//            B1 6.3-8.3, sent 9.0
//   stage 0  B0 5.3-7.3 (B0's gradient)   F2 7.3-8.3, sent 8.9   B1 9.0-11.0 (B1's gradient)
//   stage 1  F2 9.0-10.0 (its own B1's send)   B2 10.0-12.0, sent 12.7
//   stage 0  B2 12.7-14.7
// Stage 0 computes 9 s of the 14.7: the bubbles its order forces in the middle of the step count.
TEST(Prune, PipelinePathFollowsTheScheduleOrder) {
  std::vector<detail::ChunkTimes> times(2);
  for (detail::ChunkTimes& t : times) {
    t.fwd_serial = 1;
    t.bwd_serial = 2;
    t.fwd_out = 0.1;
    t.bwd_out = 0.2;
  }
  spec::Plan plan;
  plan.pp = 2;
  plan.micro_batches = 3;
  plan.schedule = spec::Schedule::k1F1B;
  const std::vector<double> end = detail::pipeline_path(program::schedule_steps(plan), 1, 3, times, {0.5, 0.5});
  ASSERT_EQ(end.size(), 2u);
  EXPECT_NEAR(end[0], 12.7 + 2, 1e-12);
  EXPECT_NEAR(end[1], 10.0 + 2, 1e-12);
  // a received message's all-gather (no sequence parallelism) delays the forward that needs it
  // (0.25 s on stage 1): stage 1 F0 1.85-2.85, B0 2.85-4.85 sent 5.55, F1 5.55-6.55, B1 6.55-8.55
  // sent 9.25; stage 0 B0 5.55-7.55, F2 7.55-8.55 sent 9.15, B1 9.25-11.25; stage 1 F2 now waits
  // for its message, 9.15 + 0.25 = 9.4-10.4, B2 10.4-12.4 sent 13.1; stage 0 B2 13.1-15.1
  times[1].recv_fwd = 0.25;
  const std::vector<double> later = detail::pipeline_path(program::schedule_steps(plan), 1, 3, times, {0.5, 0.5});
  EXPECT_NEAR(later[0], 13.1 + 2, 1e-12);
  EXPECT_NEAR(later[1], 10.4 + 2, 1e-12);
}

// GPT-3 175B on 1024 A100s (the 175B search's space), plans whose bound once exceeded their
// contention-free step time, each for a rule the bound had wrong:
//   * MiCS (shard2) at ZeRO-3 with 48 micro-batches: DeepSpeed all-reduces the replicas' shards
//     once a step, after the last reduce-scatter (spec::replica_sync), not every micro-batch;
//   * ZeRO-2 with a table tied over stages: its bucket is reduced once a step, after the table's
//     sum over the embedding group, and that sum once too (program/emit.cpp grads_ready);
//   * hpZ without look-ahead room (max_live below every bucket): the step's first forward gathers
//     over the whole group, the backward of the last micro-batch over the secondary partition.
// Each bound is at most the contention-free step time, and within 20% of it.
TEST(Prune, OnceAStepReductionsAndSecondaryGathersBoundTheirPlans) {
  const Space space(test::bundled_model("gpt3-175b"), test::bundled_cluster("dgx-a100-80g-hdr", 128),
                    spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, "gpt3-175b-1536")), 1024, {});
  Pruner pruner(space);
  const struct {
    Group group;
    std::string key;
  } plans[] = {
      {{4, 8, 1}, "tp4 pp8 dp32 mb1x48 zb-h1 zero3 shard2 rb=1e6 pf=1e9 live=1e9"},
      {{8, 8, 1}, "tp8 pp8 dp16 mb1x96 zb-h1 zero2 sp recompute=selective rb=1e9"},
      {{4, 8, 8}, "tp4 pp8 dp32 mb8x6 gpipe zero3 sp recompute=full hpz2 rb=1e6 pf=1e9 live=1e6"},
  };
  for (const auto& plan : plans) {
    const std::string& key = plan.key;   // a plain name: lambdas may not capture structured bindings (clang)
    std::optional<Estimate> found;
    Candidate candidate;
    pruner.enumerate(plan.group, [&](const Candidate& c, Verdict, const Estimate& e) {
      if (plan_key(space.plan(c)) != key) return;
      found = e;
      candidate = c;
    });
    ASSERT_TRUE(found.has_value()) << key;
    const program::Program prog = program::lower(space.model(), space.training(), space.plan(candidate));
    const double path = sim::contention_free_step_s(prog, space.cluster());
    EXPECT_LE(found->step_time_lb_s, path * (1 + 1e-5)) << key;
    EXPECT_GE(found->step_time_lb_s, 0.8 * path) << key;
  }
}

TEST(Prune, PlansPrunedForMemoryReallyDoNotFit) {
  const Space space = test::medium_space();
  const auto all = test::enumerate(space);
  const auto picked = sample(all, Verdict::kMemory, 1);
  ASSERT_GT(picked.size(), 10u);
  for (const auto& s : picked) {
    const sim::SimResult r = test::simulate(space, s.candidate);
    EXPECT_FALSE(r.metrics.fits) << plan_key(space.plan(s.candidate));
    EXPECT_GE(r.metrics.peak_memory_bytes, s.estimate.memory_lb_bytes);
    EXPECT_GT(s.estimate.memory_lb_bytes, space.cluster().gpu.memory_bytes);
  }
}

TEST(Prune, BucketValuesThatCutTheSameBucketsAreDominatedDuplicates) {
  // tiny's chunks hold ~0.2 M parameters: reduce buckets of 1e6 and 1e7 elements both hold a whole
  // chunk, so the second value lowers to the same Program and simulates identically.
  SpaceLimits l;
  l.tp = {1};
  l.pp = {1};
  l.zero = {1};
  l.recompute = {spec::Recompute::kNone};
  l.offload = {spec::Offload::kNone};
  l.micro_batch = {1};
  l.reduce_bucket = {1'000'000, 10'000'000};
  const Space space(test::bundled_model("tiny"), test::bundled_cluster("cpu-local", 1), test::training(4, spec::Dtype::kFp32), 2, l);
  const auto all = test::enumerate(space);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].verdict, Verdict::kKeep);
  EXPECT_EQ(all[1].verdict, Verdict::kDominated);
  const sim::SimResult a = test::simulate(space, all[0].candidate), b = test::simulate(space, all[1].candidate);
  EXPECT_EQ(a.metrics.step_time_s, b.metrics.step_time_s);
  EXPECT_EQ(a.metrics.peak_memory_bytes, b.metrics.peak_memory_bytes);
}

// The flex dispatcher at one expert a GPU inside one node (8 experts, ep 8, a node of 8): a token's
// 2 copies reach 2 distinct GPUs of the node either way, so DeepEP moves exactly the all-to-all's
// bytes and the plan simulates as the all-to-all one: a dominated duplicate. At ep 4 (2 experts a
// GPU) a token whose 2 experts share a GPU goes there once, so flex is a plan of its own.
TEST(Prune, AFlexDispatcherMovingTheAllToAllsBytesIsADominatedDuplicate) {
  const spec::Model moe = moe_model(4);
  spec::Training megatron = test::training(16);
  megatron.framework = spec::Framework::kMegatron;
  SpaceLimits l;
  l.tp = {1};
  l.pp = {1};
  l.zero = {1};
  l.micro_batch = {1};
  l.recompute = {spec::Recompute::kNone};
  l.ep = {4, 8};
  const Space space(moe, test::bundled_cluster("dgx-h100-ndr", 1), megatron, 8, l);
  const auto all = test::enumerate(space);
  int flex8 = 0, flex4 = 0;
  for (const auto& s : all) {
    if (s.candidate.moe_dispatcher != spec::MoeDispatcher::kFlex) continue;
    if (s.candidate.ep == 8) {
      ++flex8;
      EXPECT_EQ(s.verdict, Verdict::kDominated);
    } else {
      flex4 += s.verdict != Verdict::kDominated;   // (some are, as their all-to-all twins: bucket duplicates)
    }
  }
  EXPECT_GT(flex8, 0);
  EXPECT_GT(flex4, 0);
  for (const auto& s : all) {   // the duplicate's twin simulates identically
    if (s.candidate.moe_dispatcher != spec::MoeDispatcher::kFlex || s.candidate.ep != 8) continue;
    Candidate twin = s.candidate;
    twin.moe_dispatcher = spec::MoeDispatcher::kAllToAll;
    EXPECT_EQ(test::simulate(space, s.candidate).metrics.step_time_s, test::simulate(space, twin).metrics.step_time_s);
    break;
  }
}

// max_live_parameters acts only through `live + bucket > max_live` and `live < max_live`, with live
// 0 or at least one bucket (program/param_tracker.cpp): two positive values below GPT-2 124M's
// smallest ZeRO-3 bucket lower to one Program, and the second is a duplicate; a value above it is not.
TEST(Prune, MaxLiveValuesBelowEveryBucketAreDominatedDuplicates) {
  SpaceLimits l;
  l.tp = {1};
  l.pp = {1};
  l.zero = {3};
  l.recompute = {spec::Recompute::kNone};
  l.offload = {spec::Offload::kNone};
  l.overlap_comm = {true};
  l.micro_batch = {1};
  l.reduce_bucket = {1'000'000};
  l.prefetch_bucket = {1'000'000};
  l.max_live_parameters = {1'000, 2'000, 100'000'000};
  const Space space(test::bundled_model("gpt2-124m"), test::bundled_cluster("dgx-h100-ndr", 1), test::training(8), 8, l);
  const auto all = test::enumerate(space);
  ASSERT_EQ(all.size(), 3u);
  const program::Program a = program::lower(space.model(), space.training(), space.plan(all[0].candidate));
  int64_t smallest = INT64_MAX;
  for (const program::Bucket& b : a.param_buckets) {
    if (b.elems > 0) smallest = std::min(smallest, b.elems);
  }
  ASSERT_GT(smallest, 2'000);       // both small values below every bucket
  ASSERT_LT(smallest, 100'000'000);
  EXPECT_EQ(all[0].verdict, Verdict::kKeep);
  EXPECT_EQ(all[1].verdict, Verdict::kDominated);
  EXPECT_EQ(all[2].verdict, Verdict::kKeep);
  const program::Program b = program::lower(space.model(), space.training(), space.plan(all[1].candidate));
  const program::Program c = program::lower(space.model(), space.training(), space.plan(all[2].candidate));
  EXPECT_EQ(program::fingerprint(a), program::fingerprint(b));
  EXPECT_NE(program::fingerprint(a), program::fingerprint(c));
}

// Timing twins (Estimate::timing_reduce_i). GPT-2 124M's attention unit holds, in backward
// order, [proj bias 768, proj weight 589,824, qkv bias 2,304, qkv weight 1,769,472, LN 768, 768]:
//   * reduce buckets of 1e4 and 1e5 elements are both below every unit (2.36 M, 4.72 M), so each
//     unit is a bucket, and DeepSpeed's IPG rule flushes alike (768 + 589,824 > 1e5, ...,
//     768 + 768 ≤ 1e4): the same instructions, twins;
//   * 1e6 cuts the same buckets but flushes less (768 + 589,824 ≤ 1e6): other collectives, no twin;
//   * 1e9 holds a chunk's units in one bucket: no twin.
// A twin's simulation is its first plan's with the gradient bucket buffer moved:
// min(rb, P_s)·w, here (1e5 − 1e4)·2 bytes = 180,000 bytes more on every stage.
TEST(Prune, TimingTwinsRunTheSameInstructionsAndDifferByTheBucketBuffer) {
  SpaceLimits l;
  l.tp = {1};
  l.pp = {1, 2};
  l.zero = {2, 3};
  l.recompute = {spec::Recompute::kNone};
  l.offload = {spec::Offload::kNone};
  l.overlap_comm = {true};
  l.micro_batch = {1};
  l.reduce_bucket = {10'000, 100'000, 1'000'000, 1'000'000'000};
  l.prefetch_bucket = {1'000'000};
  l.max_live_parameters = {1'000'000'000};
  const Space space(test::bundled_model("gpt2-124m"), test::bundled_cluster("dgx-h100-ndr", 1), test::training(16), 8, l);
  int twins = 0, checked_apart = 0;
  for (const auto& s : test::enumerate(space)) {
    if (s.verdict == Verdict::kDominated || s.candidate.schedule != spec::Schedule::k1F1B) continue;
    const spec::Plan plan = space.plan(s.candidate);
    const program::Program prog = program::lower(space.model(), space.training(), plan);
    const int64_t rb = plan.zero.reduce_bucket;
    const int8_t first = s.estimate.timing_reduce_i;
    EXPECT_EQ(first, rb == 100'000 ? 0 : s.candidate.reduce_i) << plan_key(plan);
    if (rb == 1'000'000) {   // the 1e5 plan's buckets, other collectives
      Candidate other = s.candidate;
      other.reduce_i = 1;
      const program::Program o = program::lower(space.model(), space.training(), space.plan(other));
      ASSERT_EQ(prog.grad_buckets.size(), o.grad_buckets.size());
      for (std::size_t b = 0; b < o.grad_buckets.size(); ++b) EXPECT_EQ(prog.grad_buckets[b].elems, o.grad_buckets[b].elems);
      EXPECT_NE(program::fingerprint(prog), program::fingerprint(o)) << plan_key(plan);
      ++checked_apart;
    }
    if (first == s.candidate.reduce_i) continue;
    ++twins;
    Candidate rep = s.candidate;
    rep.reduce_i = first;
    const program::Program r = program::lower(space.model(), space.training(), space.plan(rep));
    EXPECT_EQ(program::fingerprint(prog), program::fingerprint(r)) << plan_key(plan);
    const sim::Metrics direct = sim::simulate(prog, space.cluster()).metrics;
    const sim::Metrics derived = sim::with_reduce_bucket(sim::reduce_bucket_base(sim::simulate(r, space.cluster()), r), rb);
    const sim::Metrics of_rep = sim::simulate(r, space.cluster()).metrics;
    EXPECT_EQ(derived.step_time_s, direct.step_time_s);
    EXPECT_EQ(derived.peak_memory_bytes, direct.peak_memory_bytes);
    EXPECT_EQ(derived.peak_rank, direct.peak_rank);
    EXPECT_EQ(derived.memory, direct.memory);
    EXPECT_EQ(derived.fits, direct.fits);
    EXPECT_EQ(direct.step_time_s, of_rep.step_time_s);
    EXPECT_EQ(direct.peak_memory_bytes - of_rep.peak_memory_bytes, (100'000 - 10'000) * 2) << plan_key(plan);
  }
  EXPECT_GE(twins, 4);           // zero 2 and 3, pp 1 and 2
  EXPECT_GE(checked_apart, 4);
}

TEST(Prune, OffloadOnlyWhereThePlanWithoutItCannotFit) {
  const Space space = test::medium_space();
  const auto all = test::enumerate(space);
  int kept = 0, dominated = 0;
  for (const auto& s : all) {
    if (!s.candidate.offload || s.verdict == Verdict::kMemory) continue;
    Candidate twin = s.candidate;
    twin.offload = false;
    Pruner pruner(space);
    const Estimate without = pruner.estimate(twin);
    if (s.verdict == Verdict::kDominated && without.memory_lb_bytes <= space.cluster().gpu.memory_bytes) ++dominated;
    if (s.verdict == Verdict::kKeep) {
      EXPECT_GT(without.memory_lb_bytes, space.cluster().gpu.memory_bytes) << plan_key(space.plan(s.candidate));
      ++kept;
    }
    if (kept + dominated > 200) break;
  }
  EXPECT_GT(dominated, 0);
}

TEST(Prune, EstimateOfOneCandidateMatchesTheEnumeration) {
  const Space space = test::medium_space();
  const auto all = test::enumerate(space);
  Pruner pruner(space);
  for (std::size_t i = 0; i < all.size(); i += all.size() / 50) {
    if (all[i].verdict == Verdict::kDominated) continue;
    const Estimate e = pruner.estimate(all[i].candidate);
    EXPECT_DOUBLE_EQ(e.step_time_lb_s, all[i].estimate.step_time_lb_s);
    EXPECT_EQ(e.memory_lb_bytes, all[i].estimate.memory_lb_bytes);
  }
}

}  // namespace
}  // namespace stagecraft::planner
