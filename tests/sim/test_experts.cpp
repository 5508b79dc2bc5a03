// Mixture of experts in the simulator: one MoE layer's all-to-all bytes and time derived by hand
// (collectives.hpp: each member sends S/n to every other; t = lat + S·(k − 1)/n / B_nvlink inside a
// node), the expert-parallel lane carrying exactly the lowering's all-to-alls, and the stated load
// imbalance stretching the experts' compute and their all-to-alls (compute.hpp).
#include <gtest/gtest.h>

#include <cmath>

#include "cluster_fixture.hpp"
#include "core/program/lower.hpp"
#include "core/spec/framework.hpp"
#include "core/program/units.hpp"
#include "sim/models/collectives.hpp"
#include "sim/models/memory.hpp"
#include "sim/simulator.hpp"
#include "sim/uncertainty.hpp"

namespace stagecraft::sim {
namespace experts_sim {

// One node of 2 GPUs joined by NVLink of 1e9 B/s, compute at 1e13 FLOP/s, every GEMM at peak.
spec::Cluster cluster() { return test::slow_link_node(2, 1e9, 1e13); }

// h = 256, 4 heads, 2 layers of 8 experts (top-2, width 512), seq 2048.
spec::Model model() {
  return spec::model_from_json({{"name", "moe"}, {"layers", 2}, {"hidden", 256}, {"heads", 4}, {"ffn_hidden", 512},
                                {"vocab", 64}, {"seq_len", 2048}, {"mlp", "swiglu"}, {"norm", "rmsnorm"},
                                {"position", "rope"}, {"tied_embeddings", false}, {"bias", false},
                                {"moe", {{"experts", 8}, {"experts_per_token", 2}, {"expert_ffn_hidden", 512}}}},
                               "moe.json");
}

SimResult run(int64_t ep, double imbalance = 1.0, int64_t etp = 1, const char* dispatcher = "alltoall") {
  const spec::Plan p = spec::plan_from_json(
      {{"dp", 2}, {"ep", ep}, {"etp", etp}, {"moe_dispatcher", dispatcher}, {"micro_batches", 2}}, "plan.json");
  nlohmann::json t = {{"global_batch", 4}, {"dtype", "bf16"}, {"framework", "megatron"}, {"attention", "unfused"}};
  if (imbalance != 1.0) t["moe_imbalance"] = imbalance;
  return simulate(program::lower(model(), spec::training_from_json(t, "training.json"), p), cluster());
}

TEST(ExpertsSim, OneLayersAllToAllIsItsBytesOverNvlink) {
  // S = T·k·h·w = 2048 tokens · 2 copies · 256 · 2 bytes = 2 MiB, the send buffer of a dispatch
  const int64_t S = 2048 * 2 * 256 * 2;
  const Topology topology(cluster(), 2);
  const std::vector<int64_t> group = {0, 1};
  const CollectiveCost a2a(CollectiveKind::kAllToAll, group, topology);
  // half of S leaves for the other GPU at 1e9 B/s: 1,048,576 ns, over a latency independent of S
  const int64_t t = a2a.time_ns(S), t_half = a2a.time_ns(S / 2);
  EXPECT_NEAR(static_cast<double>(t - t_half), (S / 2) / 2 / 1e9 * 1e9, 2.0);
  const double latency_ns = static_cast<double>(t) - S / 2 / 1e9 * 1e9;
  EXPECT_GT(latency_ns, 0);
  EXPECT_LT(latency_ns, 100e3);
  // the ep lane: 2 layers × 2 micro-batches × (dispatch and combine, forward and backward)
  const SimResult r = run(2);
  EXPECT_NEAR(r.metrics.time.ep_s, 2 * 2 * 4 * static_cast<double>(t) * 1e-9, 16e-9);
  // what a GPU sends of those 16 all-to-alls: half of each S to the other GPU, on its node
  EXPECT_DOUBLE_EQ(r.metrics.ep_intranode_bytes, 16.0 * S / 2);
  EXPECT_DOUBLE_EQ(r.metrics.ep_internode_bytes, 0.0);
  // without expert parallelism there is none
  EXPECT_EQ(run(1).metrics.time.ep_s, 0);
}

TEST(ExpertsSim, ImbalanceStretchesTheExpertsAndTheirAllToAlls) {
  const SimResult even = run(2), skewed = run(2, 1.5);
  // each all-to-all takes ⌈1.5·t⌉
  EXPECT_NEAR(skewed.metrics.time.ep_s, 1.5 * even.metrics.time.ep_s, 16e-9);
  // the experts' compute, 0.5 more of it: per micro-batch and layer, GEMMs forward
  // k·2·3·h·f_e·T and backward twice that at 1e13 FLOP/s; bytes (work.hpp) the activation's
  // 6·f_e per routed token forward, twice that backward, and the gradient pass over the rank's
  // 4 experts' 3·h·f_e parameters, at hbm_Bps · memory_efficiency
  const double routed = 2048.0 * 2;   // T·k
  const double gemm_s = 3 * (routed * 2 * 3 * 256 * 512) / 1e13;
  const spec::Cluster c = cluster();
  const double pass = spec::grad_pass_bytes(spec::Framework::kMegatron, spec::Dtype::kBf16, 2, 0, 2, 2);
  const double bytes = 3 * routed * 6 * 512 + pass * 4 * 3 * 256 * 512;
  const double bytes_s = bytes / (c.gpu.hbm_Bps * c.gpu.memory_efficiency);
  const double experts_s = 2 * 2 * (gemm_s + bytes_s);   // 2 layers × 2 micro-batches
  EXPECT_NEAR(skewed.metrics.time.compute_s - even.metrics.time.compute_s, 0.5 * experts_s, 1e-6 * experts_s);
  EXPECT_GT(skewed.metrics.step_time_s, even.metrics.step_time_s);
}

// The flex dispatcher (DeepEP, collectives.hpp "Dispatch"): a token goes once to each rank and once
// to each node holding one of its experts. expected_sets_hit by hand:
//   * 4 experts, top 2, sets {0,1} and {2,3}: a set is missed with C(2,2)/C(4,2) = 1/6, so 2·5/6 = 5/3;
//   * 8 experts in 4 groups of 2, top 2 of the best 2 groups (a pool of 4): the set {0,1} (group 0)
//     is in 3 of the C(4,2) = 6 group pairs, missed then with C(2,2)/C(4,2) = 1/6, else always:
//     (3/6 + 3)/6 = 7/12, hit 5/12; the set {1,2} straddles groups 0 and 1: the pair {0,1} holds 2
//     of it (missed 1/6), the 4 pairs with one of the two hold 1 (missed C(3,2)/C(4,2) = 1/2), the
//     pair {2,3} none: (1/6 + 2 + 1)/6 = 19/36, hit 17/36.
// dispatch_shares over 2 nodes of 2 GPUs, ep 4 (one expert a GPU), top 2 of 4: each GPU is hit
// with 1 − C(3,2)/C(4,2) = 1/2 (R = 2), each node with 5/6 (M = 5/3); per byte of S (2 copies a
// token): the network carries M·(N − 1)/N / 2 = 5/12, NVLink R·(1 − 1/l) / 2 = 1/2, where a plain
// all-to-all's shares are (n − l)/n = 1/2 and (l − 1)/n = 1/4.
TEST(ExpertsSim, TheDispatchCountsEachRankAndNodeATokenReachesOnce) {
  DispatchRouting r{4, 2, 0, 0, 4, 1};
  EXPECT_DOUBLE_EQ(expected_sets_hit(r, {{0, 1}, {2, 3}}), 5.0 / 3);
  const DispatchRouting grouped{8, 2, 4, 2, 4, 1};
  EXPECT_NEAR(expected_sets_hit(grouped, {{0, 1}}), 5.0 / 12, 1e-15);
  EXPECT_NEAR(expected_sets_hit(grouped, {{1, 2}}), 17.0 / 36, 1e-15);
  const std::vector<int64_t> group = {0, 1, 2, 3};
  const DispatchShares d = dispatch_shares(r, group, 2);
  EXPECT_EQ(d.nodes, 2);
  EXPECT_EQ(d.per_node, 2);
  EXPECT_NEAR(d.ranks_hit, 2.0, 1e-15);
  EXPECT_NEAR(d.nodes_hit, 5.0 / 3, 1e-15);
  EXPECT_NEAR(d.remote, 5.0 / 12, 1e-15);
  EXPECT_NEAR(d.local, 0.5, 1e-15);
  // the time over 2 nodes of 2 GPUs, a 25 GB/s NIC each, NVLink 100 GB/s: per byte of S the network
  // takes 5/12 / 25e9 against NVLink's 1/2 / 100e9, so it binds; t(S) − t(S/2) = (S/2)·(5/12)/25e9,
  // where the plain all-to-all's is (S/2)·(1/2)/25e9
  test::ClusterShape shape;
  shape.nodes = 2;
  shape.gpus_per_node = 2;
  shape.nics_per_node = 2;
  const Topology topology(test::make_cluster(shape), 4);
  const CollectiveCost flex(CollectiveKind::kAllToAll, group, topology, &r), plain(CollectiveKind::kAllToAll, group, topology);
  const int64_t S = 12'000'000;
  EXPECT_NEAR(static_cast<double>(flex.time_ns(S) - flex.time_ns(S / 2)), S / 2 * (5.0 / 12) / 25e9 * 1e9, 2.0);
  EXPECT_NEAR(static_cast<double>(plain.time_ns(S) - plain.time_ns(S / 2)), S / 2 * 0.5 / 25e9 * 1e9, 2.0);
  EXPECT_NEAR(flex.flow_scale(), 5.0 / 6, 1e-12);
  EXPECT_THROW(dispatch_shares(DispatchRouting{4, 2, 0, 0, 2, 1}, group, 2), std::invalid_argument);  // 2 places, 4 ranks
}

// The flex dispatcher in a step: each MoE pass's dispatch and combine are all-to-alls over the
// expert grid (Group::kExpertTpEp) of S = etp·T·k·h·w, no gather or scatter over kExpertTp, and
// the ep lane their time. On one node of 2 GPUs, ep 2, 8 experts top-2: a GPU (4 experts) is missed
// with C(4,2)/C(8,2) = 6/28, so R = 2·22/28 = 11/7 and NVLink carries R·(1 − 1/2)/2 = 11/28 of S
// against the plain all-to-all's 1/2 = 14/28.
TEST(ExpertsSim, TheFlexDispatcherMovesATokenOnceToEachGpuOfItsExperts) {
  const int64_t S = 2048 * 2 * 256 * 2;   // T·k·h·w, as OneLayersAllToAllIsItsBytesOverNvlink
  auto flex_prog = [](int64_t etp) {
    const spec::Plan p = spec::plan_from_json(
        {{"dp", 2}, {"ep", 2 / etp}, {"etp", etp}, {"moe_dispatcher", "flex"}, {"micro_batches", 2}}, "plan.json");
    const nlohmann::json t = {{"global_batch", 4}, {"dtype", "bf16"}, {"framework", "megatron"}, {"attention", "unfused"}};
    return program::lower(model(), spec::training_from_json(t, "training.json"), p);
  };
  for (int64_t etp : {1, 2}) {
    const program::Program prog = flex_prog(etp);
    int64_t dispatches = 0, others = 0;
    for (const program::Instr& in : prog.rank(0)) {
      if (in.lane != program::Lane::kEp) continue;
      if (in.op == program::Op::kAllToAll && in.group == program::Group::kExpertTpEp && in.bytes == etp * S) {
        ++dispatches;
      } else {
        ++others;
      }
    }
    EXPECT_EQ(dispatches, 2 * 2 * 4) << "etp " << etp;   // 2 layers × 2 micro-batches × 4 a layer's passes
    EXPECT_EQ(others, 0) << "etp " << etp;
  }
  const Topology topology(cluster(), 2);
  const std::vector<int64_t> group = {0, 1};
  const DispatchRouting routing{8, 2, 0, 0, 2, 1};
  const CollectiveCost flex(CollectiveKind::kAllToAll, group, topology, &routing);
  EXPECT_NEAR(static_cast<double>(flex.time_ns(S) - flex.time_ns(S / 2)), S / 2 * (11.0 / 28) / 1e9 * 1e9, 2.0);
  const SimResult r = simulate(flex_prog(1), cluster());
  EXPECT_NEAR(r.metrics.time.ep_s, 16 * static_cast<double>(flex.time_ns(S)) * 1e-9, 16e-9);
  EXPECT_NEAR(r.metrics.ep_intranode_bytes, 16.0 * S * 11 / 28, 1e-6 * S);
  EXPECT_LT(r.metrics.time.ep_s, run(2).metrics.time.ep_s);
  // the busiest GPU receives ρ times the balanced share: each dispatch takes ⌈1.5·t⌉
  const spec::Plan p = spec::plan_from_json({{"dp", 2}, {"ep", 2}, {"moe_dispatcher", "flex"}, {"micro_batches", 2}}, "plan.json");
  const nlohmann::json t = {{"global_batch", 4}, {"dtype", "bf16"}, {"framework", "megatron"}, {"attention", "unfused"},
                            {"moe_imbalance", 1.5}};
  const SimResult skewed = simulate(program::lower(model(), spec::training_from_json(t, "training.json"), p), cluster());
  EXPECT_NEAR(skewed.metrics.time.ep_s, 16 * std::ceil(1.5 * static_cast<double>(flex.time_ns(S))) * 1e-9, 16e-9);
}

// An expert capacity (training "moe_capacity_factor" c): copies beyond it are dropped, so the
// busiest rank computes and receives min(ρ, c) times the balanced share — ρ = 1.5 under c = 1.25
// is the dropless run at ρ = 1.25, step for step; padded to capacity every expert takes c times
// it whatever the routing (ρ = 1 padded to 1.25 is the dropless ρ = 1.25 again), and at ep 1 the
// rank's experts compute c times their balanced work.
TEST(ExpertsSim, ACapacityCapsTheBusiestRankAndPaddingFillsEveryExpertToIt) {
  auto run_capacity = [](int64_t ep, double imbalance, double capacity, bool pad) {
    const spec::Plan p = spec::plan_from_json({{"dp", 2}, {"ep", ep}, {"micro_batches", 2}}, "plan.json");
    nlohmann::json t = {{"global_batch", 4}, {"dtype", "bf16"}, {"framework", "megatron"}, {"attention", "unfused"},
                        {"moe_imbalance", imbalance}, {"moe_capacity_factor", capacity}, {"moe_pad_to_capacity", pad}};
    return simulate(program::lower(model(), spec::training_from_json(t, "training.json"), p), cluster());
  };
  const SimResult capped = run_capacity(2, 1.5, 1.25, false), at = run(2, 1.25);
  EXPECT_EQ(capped.metrics.step_time_s, at.metrics.step_time_s);
  EXPECT_EQ(capped.metrics.time.ep_s, at.metrics.time.ep_s);
  EXPECT_LT(capped.metrics.step_time_s, run(2, 1.5).metrics.step_time_s);
  EXPECT_EQ(run_capacity(2, 1.0, 1.25, true).metrics.step_time_s, at.metrics.step_time_s);
  // under capacity, nothing dropped: the dropless run
  EXPECT_EQ(run_capacity(2, 1.1, 1.25, false).metrics.step_time_s, run(2, 1.1).metrics.step_time_s);
  // ep 1 padded: the experts' compute c = 1.25 times the balanced one, 0.25 more of the experts'
  // time — as ImbalanceStretchesTheExpertsAndTheirAllToAlls derives it, with the rank's 8 experts'
  // parameters in the gradient pass
  const double routed = 2048.0 * 2;
  const double gemm_s = 3 * (routed * 2 * 3 * 256 * 512) / 1e13;
  const spec::Cluster c = cluster();
  const double pass = spec::grad_pass_bytes(spec::Framework::kMegatron, spec::Dtype::kBf16, 2, 0, 2, 2);
  const double bytes_s = (3 * routed * 6 * 512 + pass * 8 * 3 * 256 * 512) / (c.gpu.hbm_Bps * c.gpu.memory_efficiency);
  const double experts_s = 2 * 2 * (gemm_s + bytes_s);
  EXPECT_NEAR(run_capacity(1, 1.0, 1.25, true).metrics.time.compute_s - run(1).metrics.time.compute_s, 0.25 * experts_s,
              1e-6 * experts_s);
}

// A stated 1σ of the imbalance (training "moe_imbalance_sigma") enters the error bars as one more
// term: the plan simulated at ρ − σ and ρ + σ (the node's profile has no uncertainty of its own).
// Alone, it makes the 1σ interval exactly [T(ρ − σ), T(ρ + σ)]: 1.5 ± 0.25 spans the dropless
// runs at 1.25 and 1.75; ρ − σ stops at 1 (a busiest rank is never below the mean); at ep 1, or
// padded to a capacity, ρ moves nothing.
TEST(ExpertsSim, TheStatedImbalanceSigmaEntersTheErrorBars) {
  auto lowered = [](int64_t ep, double rho, double sigma, bool pad) {
    const spec::Plan p = spec::plan_from_json({{"dp", 2}, {"ep", ep}, {"micro_batches", 2}}, "plan.json");
    nlohmann::json t = {{"global_batch", 4}, {"dtype", "bf16"}, {"framework", "megatron"}, {"attention", "unfused"},
                        {"moe_imbalance", rho}, {"moe_imbalance_sigma", sigma}};
    if (pad) t["moe_capacity_factor"] = 2.0, t["moe_pad_to_capacity"] = true;
    return program::lower(model(), spec::training_from_json(t, "training.json"), p);
  };
  const program::Program prog = lowered(2, 1.5, 0.25, false);
  const Metrics central = simulate(prog, cluster()).metrics;
  const ErrorBars e = error_bars(prog, cluster(), {}, central);
  ASSERT_EQ(e.terms.size(), 1u);
  EXPECT_EQ(e.terms[0].parameter, "training.moe_imbalance");
  EXPECT_DOUBLE_EQ(e.terms[0].relative, 0.25 / 1.5);
  EXPECT_EQ(central.step_time_s, run(2, 1.5).metrics.step_time_s);
  const double low = run(2, 1.25).metrics.step_time_s, high = run(2, 1.75).metrics.step_time_s;
  EXPECT_NEAR(e.terms[0].step_minus_s, low, 1e-12);
  EXPECT_NEAR(e.terms[0].step_plus_s, high, 1e-12);
  EXPECT_NEAR(e.step_low_s, low, 1e-12);
  EXPECT_NEAR(e.step_high_s, high, 1e-12);
  EXPECT_NEAR(e.sigma_s, (high - low) / 2, 1e-12);
  // 1.1 ± 0.25: the low side at 1
  const program::Program near = lowered(2, 1.1, 0.25, false);
  const ErrorBars n = error_bars(near, cluster(), {}, simulate(near, cluster()).metrics);
  EXPECT_NEAR(n.terms[0].step_minus_s, run(2).metrics.step_time_s, 1e-12);
  // nothing to move
  for (const program::Program& still : {lowered(1, 1.5, 0.25, false), lowered(2, 1.5, 0.25, true)}) {
    const Metrics m = simulate(still, cluster()).metrics;
    const ErrorBars b = error_bars(still, cluster(), {}, m);
    ASSERT_EQ(b.terms.size(), 1u);
    EXPECT_EQ(b.step_low_s, m.step_time_s);
    EXPECT_EQ(b.step_high_s, m.step_time_s);
  }
}

// Expert tensor parallelism over the node's 2 GPUs (ep 1, etp 2): each MoE pass gathers the routed
// copies of both GPUs before the experts and reduce-scatters their partial outputs after, S =
// etp·T·k·h·w = 2 · 2048 · 2 · 256 · 2 bytes = 4 MiB each; a ring over 2 GPUs moves S/2 across
// the link (collectives.hpp). The experts' compute is ep 2's: the same FLOPs and bytes
// (twice the tokens over half the width), every GEMM here at peak.
TEST(ExpertsSim, ExpertTensorParallelismGathersAndScattersOverItsGroup) {
  const int64_t S = 2 * 2048 * 2 * 256 * 2;
  const Topology topology(cluster(), 2);
  const std::vector<int64_t> group = {0, 1};
  const CollectiveCost ag(CollectiveKind::kAllGather, group, topology), rs(CollectiveKind::kReduceScatter, group, topology);
  EXPECT_NEAR(static_cast<double>(ag.time_ns(S) - ag.time_ns(S / 2)), (S / 2) / 2 / 1e9 * 1e9, 2.0);
  const SimResult etp = run(1, 1.0, 2), ep = run(2);
  // 2 layers × 2 micro-batches × (forward: gather, scatter; backward: gather, scatter)
  EXPECT_NEAR(etp.metrics.time.ep_s, 2 * 2 * 2 * static_cast<double>(ag.time_ns(S) + rs.time_ns(S)) * 1e-9, 16e-9);
  EXPECT_DOUBLE_EQ(etp.metrics.ep_intranode_bytes, 0.0);   // no all-to-all
  EXPECT_NEAR(etp.metrics.time.compute_s, ep.metrics.time.compute_s, 1e-9 * ep.metrics.time.compute_s);
  // the stated imbalance stretches the gathers and scatters as it does the all-to-alls
  EXPECT_NEAR(run(1, 1.5, 2).metrics.time.ep_s, 1.5 * etp.metrics.time.ep_s, 16e-9);
}

// The balancing loss under tp 2 (sequence parallel, the node's 2 GPUs, dp 1): each MoE unit's
// forward all-reduces its E = 8 int64 counts, S = 64 bytes, over the tp pair before the dispatch
// — 2 layers × 4 micro-batches = 8 of them on the tp lane, on the compute's path (nothing else
// runs at dp 1 and pp 1): the lane and the step both grow by 8 all-reduces of 64 bytes.
TEST(ExpertsSim, TheBalancingLossesCountsAreAllReducedOverTheTpPair) {
  auto step = [](double alpha) {
    const spec::Plan p = spec::plan_from_json({{"tp", 2}, {"sequence_parallel", true}, {"micro_batches", 4}}, "plan.json");
    nlohmann::json t = {{"global_batch", 4}, {"dtype", "bf16"}, {"framework", "megatron"}, {"attention", "unfused"}};
    if (alpha > 0) t["moe_aux_loss_coeff"] = alpha;
    return simulate(program::lower(model(), spec::training_from_json(t, "training.json"), p), cluster());
  };
  const Topology topology(cluster(), 2);
  const std::vector<int64_t> pair = {0, 1};
  const CollectiveCost ar(CollectiveKind::kAllReduce, pair, topology);
  const double counts_s = 8 * static_cast<double>(ar.time_ns(8 * 8)) * 1e-9;
  ASSERT_GT(counts_s, 0);
  const SimResult without = step(0), with = step(0.01);
  EXPECT_NEAR(with.metrics.time.tp_s - without.metrics.time.tp_s, counts_s, 8e-9);
  EXPECT_NEAR(with.metrics.step_time_s - without.metrics.step_time_s, counts_s, 8e-9);
}

// A routed copy's saved expert input is the gathered one, 2h·etp bytes: etp 2 keeps k·2h = 1 KiB
// more a token in each MoE layer than etp 1 (bf16, tp 1); the activation itself is unchanged.
TEST(ExpertsSim, ExpertTensorParallelismKeepsTheGatheredInput) {
  const spec::Model m = model();
  const spec::Training t = spec::training_from_json({{"global_batch", 4}, {"dtype", "bf16"}, {"framework", "megatron"}}, "t.json");
  const auto units = program::model_units(m, 1, 1, 2);
  const spec::Plan one = spec::plan_from_json({{"dp", 2}, {"micro_batches", 2}}, "p.json");
  const spec::Plan two = spec::plan_from_json({{"dp", 2}, {"etp", 2}, {"micro_batches", 2}}, "p.json");
  const double a = activation_bytes_per_token(units[2], m, one, t, spec::Recompute::kNone);
  const double b = activation_bytes_per_token(units[2], m, two, t, spec::Recompute::kNone);
  EXPECT_DOUBLE_EQ(b - a, 2.0 * 2 * 256 * (2 - 1));
}

// The all-gather dispatcher over the node's 2 GPUs (ep 2): per MoE pass a gather of
// S_g = 2·T·(h·w + E·w + E) = 2·2048·(512 + 16 + 8) bytes and a reduce-scatter of
// S_s = 2·T·h·w forward; backward a gather of S_s and a reduce-scatter of 2·T·(h + E)·w. Every
// rank moves the group's tokens whatever the routing, so the stated imbalance stretches the
// experts' compute but none of these.
TEST(ExpertsSim, TheAllGatherDispatcherMovesTheGroupsTokensUnstretched) {
  const int64_t T = 2048, h = 256, E = 8;
  const int64_t gather = 2 * T * (h * 2 + E * 2 + E), scatter = 2 * T * h * 2, grad_scatter = 2 * T * (h + E) * 2;
  const Topology topology(cluster(), 2);
  const std::vector<int64_t> group = {0, 1};
  const CollectiveCost ag(CollectiveKind::kAllGather, group, topology), rs(CollectiveKind::kReduceScatter, group, topology);
  const double pass_ns = static_cast<double>(ag.time_ns(gather) + rs.time_ns(scatter) + ag.time_ns(scatter) + rs.time_ns(grad_scatter));
  const SimResult even = run(2, 1.0, 1, "allgather"), skewed = run(2, 1.5, 1, "allgather");
  // 2 layers × 2 micro-batches
  EXPECT_NEAR(even.metrics.time.ep_s, 2 * 2 * pass_ns * 1e-9, 16e-9);
  EXPECT_NEAR(skewed.metrics.time.ep_s, even.metrics.time.ep_s, 16e-9);
  EXPECT_GT(skewed.metrics.time.compute_s, even.metrics.time.compute_s);
  EXPECT_DOUBLE_EQ(even.metrics.ep_intranode_bytes, 0.0);   // no all-to-all
}

}  // namespace experts_sim
}  // namespace stagecraft::sim
