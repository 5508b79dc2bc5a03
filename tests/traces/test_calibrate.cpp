// Calibration recovers known parameters: traces synthesized by the simulator from a profile with
// known GEMM efficiencies, memory throughput, activation rate and link α/β, with ±3% seeded noise on every
// duration, calibrate back to within 2% of them, starting from a profile that is wrong in every
// one of them. Also: executor-style measured traces (several steps, members that issue a
// collective early), probe traces, too few points, and the written profile loads.
#include "traces/calibrate.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include <unistd.h>

#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "sim/cluster_fixture.hpp"
#include "sim/models/collectives.hpp"
#include "sim/models/compute.hpp"
#include "sim/network/topology.hpp"
#include "support.hpp"

namespace stagecraft::traces {
namespace {

using program::Op;

// The truth: 2 nodes × 4 GPUs, one NIC per GPU (with fewer NICs the GPUs' concurrent collectives
// contend on them, which the contention-free link features do not describe).
spec::Cluster true_cluster() {
  test::ClusterShape shape;
  shape.nics_per_node = 4;
  shape.nvlink_Bps = 100e9;
  shape.intra_latency_ns = 2000;
  shape.nic_Bps = 20e9;
  shape.inter_latency_ns = 8000;
  spec::Cluster c = test::make_cluster(shape);
  c.name = "truth";
  c.gpu.peak_flops = {{spec::Dtype::kFp32, 25e12}, {spec::Dtype::kBf16, 100e12}, {spec::Dtype::kFp16, 100e12}};
  c.gpu.hbm_Bps = 1e12;
  c.gpu.memory_efficiency = 0.75;
  c.gpu.matmul_efficiency = {{1e8, 0.30}, {1e9, 0.55}, {1e10, 0.72}, {1e11, 0.80}};
  // Twice the MLP's memory-bound time: 4096 elements per token at 5e10/s = 82 ns against
  // (11·1024 + 4·4096) bytes at 7.5e11 B/s = 37 ns (hidden 1024).
  c.gpu.activation_elems_per_s = 5e10;
  // Adam's arithmetic a little longer than its 26 bytes per parameter (bf16): 1 / 2e10 = 50 ps
  // against 26 / 7.5e11 = 35 ps.
  c.gpu.adam_params_per_s = 2e10;
  c.host.pcie_Bps = 25e9;
  c.host.memory_bytes = int64_t{1} << 40;
  c.host.adam_params_per_s = 1e9;
  return c;
}

// Where calibration starts: the same machine with every fitted value wrong.
spec::Cluster base_cluster() {
  spec::Cluster c = true_cluster();
  c.name = "guess";
  c.file = "guess.json";
  c.gpu.memory_efficiency = 1.0;
  c.gpu.activation_elems_per_s = 3e11;
  c.gpu.adam_params_per_s = 6e10;
  for (auto& [flops, fraction] : c.gpu.matmul_efficiency) fraction = 0.5;
  c.intra_node.latency_ns = 1000;
  c.intra_node.bandwidth_Bps = 50e9;
  c.inter_node.latency_ns = 3000;
  c.inter_node.nic_bandwidth_Bps = 40e9;
  return c;
}

spec::Model model(int64_t hidden = 1024, int64_t seq = 1024, int64_t ffn_ratio = 4) {
  spec::Model m;
  m.name = "calib-" + std::to_string(hidden);
  m.layers = 8;
  m.hidden = hidden;
  m.heads = hidden / 64;
  m.kv_heads = m.heads;
  m.ffn_hidden = ffn_ratio * hidden;
  m.vocab = 8192;
  m.seq_len = seq;
  return m;
}

spec::Plan plan(int64_t tp, int64_t pp, int64_t dp, int64_t mb, int64_t m, int zero, int64_t reduce_bucket) {
  spec::Plan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.micro_batch = mb;
  p.micro_batches = m;
  p.zero.stage = zero;
  p.zero.reduce_bucket = reduce_bucket;
  p.zero.allgather_bucket = reduce_bucket;
  return p;
}

// Plans of 8 GPUs whose instructions span GEMMs of 1e7..1e11 FLOPs, memory-bound passes, and
// messages inside nodes and across them, small (latency-bound) and large (bandwidth-bound).
std::vector<std::pair<spec::Model, spec::Plan>> workloads() {
  // The small model's MLP is half as wide (ffn 2h), so its activation's time relative to its
  // bytes' differs from the big model's (per token 1024 / 5e10 s against 9728 B / 7.5e11 B/s,
  // 1.6 : 1, where the big model has 2.2 : 1): that separates the activation rate from the memory
  // throughput.
  const spec::Model big = model(1024, 1024), small = model(512, 512, 2);
  return {{big, plan(4, 2, 1, 1, 4, 1, 500'000'000)},   // tp all-reduces in a node, p2p across nodes
          {big, plan(1, 1, 8, 2, 1, 2, 1'000'000)},     // ZeRO-2 buckets over 2 nodes (hierarchical)
          {big, plan(2, 2, 2, 4, 4, 1, 3'000'000)},     // dp inside a node, p2p across
          {big, plan(1, 8, 1, 8, 8, 0, 500'000'000)},   // large GEMMs, p2p chain inside and across nodes
          {big, plan(1, 1, 8, 1, 1, 1, 200'000)},       // small buckets: latency-bound all-gathers
          {small, plan(2, 2, 2, 1, 8, 1, 500'000)},     // GEMMs around 1e8 and below
          {small, plan(4, 2, 1, 2, 8, 0, 500'000'000)},
          // short sequences: 64 KiB sends along a 4-stage chain inside each node, where the
          // intra-node latency (2 µs) outweighs the transfer (0.66 µs). Collectives take their
          // latency from NCCL's table, so sends are what resolve intra_node.latency_ns.
          {model(512, 64, 2), plan(1, 4, 2, 1, 8, 0, 500'000'000)}};
}

// A duration d becomes d·(1 + u), u uniform in [−0.03, 0.03].
trace::Trace with_noise(trace::Trace t, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(-0.03, 0.03);
  for (trace::Event& e : t.events) {
    e.end_ns = e.start_ns + std::llround(static_cast<double>(e.end_ns - e.start_ns) * (1.0 + u(rng)));
  }
  return t;
}

std::vector<Trace> synthesized(const spec::Cluster& truth, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Trace> out;
  int i = 0;
  for (const auto& [m, p] : workloads()) {
    spec::Training t;
    t.attention = "unfused";  // the hand derivations time the score GEMMs
    t.dtype = spec::Dtype::kBf16;
    t.global_batch = p.micro_batch * p.micro_batches * p.dp;
    const test::Scenario s = test::lowered(m, t, p);
    // simulated, so its collectives carry the framework's work as the simulator timed them
    trace::Trace tr = test::simulate(s, truth).trace;
    out.push_back(test::as_trace(with_noise(tr, rng), "synthetic-" + std::to_string(i++) + ".json"));
  }
  return out;
}

double true_value(const spec::Cluster& c, const std::string& name) {
  if (name == "gpu.memory_Bps") return c.gpu.hbm_Bps * c.gpu.memory_efficiency;
  if (name == "gpu.activation_elems_per_s") return c.gpu.activation_elems_per_s;
  if (name == "gpu.adam_params_per_s") return c.gpu.adam_params_per_s;
  if (name == "intra_node.latency_ns") return static_cast<double>(c.intra_node.latency_ns);
  if (name == "intra_node.bandwidth_Bps") return c.intra_node.bandwidth_Bps;
  if (name == "inter_node.latency_ns") return static_cast<double>(c.inter_node.latency_ns);
  if (name == "inter_node.nic_bandwidth_Bps") return c.inter_node.nic_bandwidth_Bps;
  for (const auto& [flops, fraction] : c.gpu.matmul_efficiency) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "gpu.matmul_efficiency@%.3g", flops);
    if (name == buf) return fraction;
  }
  return NAN;
}

const std::vector<std::string> kFitted = {"gpu.matmul_efficiency@1e+08", "gpu.matmul_efficiency@1e+09",
                                          "gpu.matmul_efficiency@1e+10", "gpu.matmul_efficiency@1e+11",
                                          "gpu.memory_Bps",              "gpu.activation_elems_per_s",
                                          "gpu.adam_params_per_s",       "intra_node.latency_ns",
                                          "intra_node.bandwidth_Bps",    "inter_node.latency_ns",
                                          "inter_node.nic_bandwidth_Bps"};

TEST(Calibrate, RecoversKnownParametersFromNoisySimulatedTraces) {
  const spec::Cluster truth = true_cluster(), base = base_cluster();
  Samples samples;
  const char* seed_text = std::getenv("STAGECRAFT_CALIBRATION_SEED");  // to study other seeds by hand
  const uint64_t seed = seed_text ? std::stoull(seed_text) : 20240601;
  for (const Trace& t : synthesized(truth, seed)) add_trace_samples(t, base, std::nullopt, samples);
  const Calibration c = calibrate(samples, base);
  std::cout << to_text(c);
  std::printf("%-34s %14s %14s %9s\n", "parameter", "true", "recovered", "error");
  for (const std::string& name : kFitted) {
    const Parameter& p = c.parameter(name);
    const double truth_value = true_value(truth, name);
    std::printf("%-34s %14.6g %14.6g %+8.3f%%\n", name.c_str(), truth_value, p.value, 100 * (p.value / truth_value - 1));
    EXPECT_TRUE(p.fitted) << name << ": " << p.status;
    EXPECT_NEAR(p.value / truth_value, 1.0, 0.02) << name;
    EXPECT_NEAR(p.value / p.base, truth_value / p.base, 0.02 * truth_value / p.base) << name << " moved from the base";
  }
  // The residuals are the noise: uniform ±3% has an RMS of 3%/√3 ≈ 1.7%.
  for (const GroupReport& g : c.groups) {
    if (g.name == "compute" || g.name == "links") {
      EXPECT_NEAR(g.rms_residual, 0.03 / std::sqrt(3.0), 0.004) << g.name;
    }
  }
  EXPECT_FALSE(c.parameter("host.adam_params_per_s").fitted);  // no host optimizer in these plans
  EXPECT_EQ(c.cluster.name, "guess-calibrated");
}

TEST(Calibrate, WritesAProfileTheLoaderAcceptsAndItsReport) {
  const spec::Cluster truth = true_cluster(), base = base_cluster();
  Samples samples;
  for (const Trace& t : synthesized(truth, 7)) add_trace_samples(t, base, std::nullopt, samples);
  Calibration c = calibrate(samples, base);
  const std::string path = (std::filesystem::temp_directory_path() / ("stagecraft_calibrated_" + std::to_string(::getpid()) + ".json")).string();
  write_calibration(c, path);
  const spec::Cluster loaded = spec::load_cluster(path);
  EXPECT_EQ(loaded.name, "guess-calibrated");
  EXPECT_NEAR(loaded.gpu.hbm_Bps * loaded.gpu.memory_efficiency / 0.75e12, 1.0, 0.02);
  EXPECT_NEAR(loaded.gpu.activation_elems_per_s / 5e10, 1.0, 0.02);
  EXPECT_NEAR(loaded.gpu.adam_params_per_s / 2e10, 1.0, 0.02);
  EXPECT_NE(loaded.source.find("synthetic-0.json"), std::string::npos);  // the traces it came from
  EXPECT_NE(loaded.source.find("RMS relative residual"), std::string::npos);
  EXPECT_EQ(c.report_file, report_path_for(path));
  EXPECT_TRUE(c.report_file.ends_with(".calibration.json"));
  std::ifstream in(c.report_file);
  const nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_EQ(report["traces"].size(), workloads().size());
  EXPECT_EQ(report["parameters"].size(), c.parameters.size());
  EXPECT_TRUE(report["parameters"][0]["std_error"].is_number());
  EXPECT_TRUE(report["groups"][0]["rms_relative_residual"].is_number());
  std::remove(path.c_str());
  std::remove(c.report_file.c_str());
}

// A fit past the physical bounds a profile may hold (a memory rate of 1.5e33 B/s, as a trace far
// faster than its base once gave) is a failed fit: CalibrationError (exit 1) with the fit's table,
// and neither the profile nor its report is written (the profile was written, then found bad: exit 3).
TEST(Calibrate, AFitPastThePhysicalBoundsWritesNothing) {
  const spec::Cluster truth = true_cluster(), base = base_cluster();
  Samples samples;
  for (const Trace& t : synthesized(truth, 7)) add_trace_samples(t, base, std::nullopt, samples);
  Calibration c = calibrate(samples, base);
  c.cluster.gpu.hbm_Bps = 1.5e33;
  const std::string path = (std::filesystem::temp_directory_path() / ("stagecraft_unbounded_" + std::to_string(::getpid()) + ".json")).string();
  try {
    write_calibration(c, path);
    ADD_FAILURE() << "a memory rate of 1.5e33 B/s was written";
  } catch (const CalibrationError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("outside the physical bounds"), std::string::npos) << msg;
    EXPECT_NE(msg.find("hbm_Bps"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nothing written"), std::string::npos) << msg;
    EXPECT_NE(msg.find("RMS relative residual"), std::string::npos) << msg;  // the fit's residuals
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(report_path_for(path)));
}

// Traces of a machine 10x faster in everything than the base profile (a newer machine): the GEMMs
// run faster than the base's peak allows (an efficiency above 1) and the memory-bound kernels
// faster than its fixed terms. The fit stays inside its physical box (no value diverges, as an
// unbounded fit once gave hbm_Bps 1.5e33) and is refused as a failed fit: CalibrationError (exit 1)
// naming what ended on a bound, with the residuals.
TEST(Calibrate, ATraceFarFasterThanItsBaseFailsInsideTheBounds) {
  spec::Cluster fast = true_cluster();
  for (auto& [dtype, peak] : fast.gpu.peak_flops) peak *= 10;
  fast.gpu.hbm_Bps *= 10;
  fast.gpu.activation_elems_per_s *= 10;
  fast.gpu.adam_params_per_s *= 10;
  fast.intra_node.bandwidth_Bps *= 10;
  fast.inter_node.nic_bandwidth_Bps *= 10;
  Samples samples;
  for (const Trace& t : synthesized(fast, 7)) add_trace_samples(t, base_cluster(), std::nullopt, samples);
  try {
    const Calibration c = calibrate(samples, base_cluster());
    ADD_FAILURE() << "a fit of a machine 10x faster than its base profile was accepted:\n" << to_text(c);
  } catch (const CalibrationError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the fit failed"), std::string::npos) << msg;
    // the GEMMs: 10x the truth's efficiencies (0.30-0.80) against the base's peak is above 1
    EXPECT_NE(msg.find("gpu.matmul_efficiency@"), std::string::npos) << msg;
    EXPECT_NE(msg.find("raise the peak"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Nothing written"), std::string::npos) << msg;
    EXPECT_NE(msg.find("RMS relative residual"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("e+33"), std::string::npos) << msg;
  }
}

// What the executor writes (source measured, several steps, no cluster in the header) gives the
// same samples, and a member that issued a collective early (and waited for its peers) does not
// lengthen the collective: its time is last end − last start over the members.
TEST(Calibrate, ExecutorStyleTracesGiveTheSameSamples) {
  const spec::Cluster truth = true_cluster();
  spec::Training tr;
  tr.attention = "unfused";  // the hand derivations time the score GEMMs
  tr.dtype = spec::Dtype::kBf16;
  const spec::Plan p = plan(2, 2, 2, 2, 2, 1, 3'000'000);
  tr.global_batch = p.micro_batch * p.micro_batches * p.dp;
  const test::Scenario s = test::lowered(model(), tr, p);
  const trace::Trace clean = test::simulate(s, truth, /*full=*/true).trace;
  trace::Trace measured = clean;
  measured.source = "measured";
  measured.cluster = nlohmann::json::object();
  measured.events.clear();
  int64_t span = 0;
  for (const trace::Event& e : clean.events) span = std::max(span, e.end_ns);
  std::map<std::tuple<int32_t, int, int64_t>, int> seen;  // members of one collective seen so far
  for (int step = 0; step < 2; ++step) {
    for (trace::Event e : clean.events) {
      e.start_ns += step * (span + 1000);
      e.end_ns += step * (span + 1000);
      if (program::is_collective(e.op)) {
        const program::RoleProgram& role = s.program.role_of(e.rank);
        const program::Instr& in = role.instrs[static_cast<std::size_t>(e.instr - role.first_id)];
        const int64_t group = s.program.placement.group_members(in.group, e.rank).front();
        if (seen[{e.instr, step, group}]++ > 0) e.start_ns -= 50'000;  // issued early, waited for the first
      }
      measured.events.push_back(e);
    }
  }
  Samples a, b;
  add_trace_samples(test::as_trace(clean, "clean.json"), truth, tr, a);
  add_trace_samples(test::as_trace(measured, "measured.json"), truth, std::nullopt, b);
  ASSERT_EQ(b.links.size(), 2 * a.links.size());
  ASSERT_EQ(b.compute.size(), 2 * a.compute.size());
  auto seconds = [](const std::vector<LinkSample>& v) {
    std::vector<double> out;
    for (const LinkSample& l : v) out.push_back(l.seconds);
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<double> twice = seconds(a.links);
  twice.insert(twice.end(), twice.begin(), twice.end());
  std::sort(twice.begin(), twice.end());
  const std::vector<double> got = seconds(b.links);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], twice[i], 1e-12);
  EXPECT_EQ(b.traces[0].training, "trace header");   // named by the trace, not guessed from its message sizes
  // The simulated trace's ZeRO-2 reduce-scatters carry DeepSpeed's work: its IPG pieces and its
  // copies (4·S bytes at the memory rate, in fixed); the executor issues the same pieces
  // (Program::collectives_of) without copies, so the measured trace's samples have the pieces and
  // no copies, and fixed is larger by exactly 4·S / memory rate.
  const double memory_Bps = truth.gpu.hbm_Bps * truth.gpu.memory_efficiency;
  int checked = 0;
  for (const LinkSample& l : a.links) {
    if (!l.collective || l.collective->kind != sim::CollectiveKind::kReduceScatter) continue;
    EXPECT_DOUBLE_EQ(l.collective->copy_bytes, 4.0 * static_cast<double>(l.collective->bytes));
    for (const LinkSample& m : b.links) {
      if (!m.collective || m.collective->kind != l.collective->kind || m.collective->bytes != l.collective->bytes ||
          m.collective->gpus != l.collective->gpus) continue;
      EXPECT_EQ(m.collective->copy_bytes, 0.0);
      EXPECT_EQ(m.collective->pieces, l.collective->pieces);
      EXPECT_NEAR(l.features.fixed_s - m.features.fixed_s, l.collective->copy_bytes / memory_Bps, 1e-15);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// A probe trace (2 ranks on one host) with exact model times: GEMMs, memory passes, intra-node
// collectives and send/recv calibrate the GEMM knots, memory throughput and intra-node α/β; the
// inter-node ones have no samples and keep their base values.
// With TE's TP communication overlap a block's sequence-parallel collective lasts what its GEMM
// leaves exposed (sim/models/tp_overlap.hpp), not its link time: such events give no link samples.
// Per micro-batch and tp group the plan issues, with sequence parallelism, 2 (embedding: forward
// RS, backward AG) + 2 (head: forward AG, backward RS) + 8 layers x 2 units x 4 (forward AG and RS,
// backward AG and RS) = 68 TP all-gathers and reduce-scatters; 2 micro-batches x 2 tp groups:
// 272 samples without the overlap, and the embedding's and head's 4 x 2 x 2 = 16 with it. Under
// framework "megatron" (its asynchronous backward reduce-scatter beside the weight gradient) the
// 16 block units' and the head's backward reduce-scatters leave: (68 - 17) x 2 x 2 = 204.
TEST(Calibrate, TpCollectivesBesideTheirGemmsTimeNoLink) {
  const spec::Cluster truth = true_cluster();
  spec::Training tr;
  tr.attention = "unfused";
  tr.dtype = spec::Dtype::kBf16;
  spec::Plan p = plan(2, 1, 2, 2, 2, 1, 3'000'000);
  p.sequence_parallel = true;
  tr.global_batch = p.micro_batch * p.micro_batches * p.dp;
  auto tp_samples = [&](bool overlap, spec::Framework framework = spec::Framework::kDeepSpeed) {
    spec::Training t = tr;
    t.tp_comm_overlap = overlap;
    t.framework = framework;
    const test::Scenario s = test::lowered(model(), t, p);
    Samples out;
    add_trace_samples(test::as_trace(test::simulate(s, truth, /*full=*/true).trace, "tp.json"), truth, t, out);
    int n = 0;
    for (const LinkSample& l : out.links) {
      n += l.collective && (l.collective->kind == sim::CollectiveKind::kAllGather ||
                            l.collective->kind == sim::CollectiveKind::kReduceScatter) &&
           l.collective->gpus.size() == 2 && l.collective->gpus[1] == l.collective->gpus[0] + 1;
    }
    return n;
  };
  EXPECT_EQ(tp_samples(false), (2 + 2 + 8 * 2 * 4) * 2 * 2);
  EXPECT_EQ(tp_samples(true), (2 + 2) * 2 * 2);
  EXPECT_EQ(tp_samples(false, spec::Framework::kMegatron), (68 - 17) * 2 * 2);
}

TEST(Calibrate, ProbeTracesCalibrateComputeAndIntraNodeLinks) {
  const spec::Cluster truth = true_cluster(), base = base_cluster();
  const sim::Topology topo(truth, 8);
  trace::Trace t;
  t.source = "measured";
  int32_t id = 0;
  auto add = [&](Op op, double seconds, double flops, int64_t bytes) {
    for (int rank = 0; rank < 2; ++rank) {
      t.events.push_back({rank, program::Lane::kCompute, op, id, 0, std::llround(seconds * 1e9), -1, -1, -1, bytes, flops});
    }
    ++id;
  };
  const double peak = truth.gpu.peak_flops.at(spec::Dtype::kFp32);
  for (int64_t n : {256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144}) {
    const double f = 2.0 * n * n * n;
    add(Op::kForward, f / (peak * sim::matmul_efficiency(truth.gpu.matmul_efficiency, f)), f, 0);
  }
  for (int64_t bytes : {12'000'000, 48'000'000, 192'000'000}) add(Op::kForward, bytes / 0.75e12, 0, bytes);
  const std::vector<int64_t> pair = {0, 1};
  for (int64_t bytes = 64; bytes <= (64 << 20); bytes *= 4) {
    add(Op::kAllReduceGrads, sim::collective_time_ns(sim::CollectiveKind::kAllReduce, bytes, pair, topo) * 1e-9, 0, bytes);
    add(Op::kGatherParams, sim::collective_time_ns(sim::CollectiveKind::kAllGather, bytes, pair, topo) * 1e-9, 0, bytes);
    add(Op::kSendActivation, 2e-6 + bytes / 100e9, 0, bytes);
  }
  const nlohmann::json meta = {{"probe", {{"world", 2}, {"hosts", {"h", "h"}}, {"dtype", "fp32"}}}};
  Samples samples;
  add_trace_samples(from_core(t, "probe.json", meta), base, std::nullopt, samples);
  EXPECT_EQ(samples.traces[0].kind, "probe");
  const Calibration c = calibrate(samples, base);
  for (const char* name : {"gpu.matmul_efficiency@1e+08", "gpu.matmul_efficiency@1e+09", "gpu.matmul_efficiency@1e+10",
                                  "gpu.matmul_efficiency@1e+11", "gpu.memory_Bps", "intra_node.latency_ns",
                                  "intra_node.bandwidth_Bps"}) {
    EXPECT_TRUE(c.parameter(name).fitted) << name << ": " << c.parameter(name).status;
    EXPECT_NEAR(c.parameter(name).value / true_value(truth, name), 1.0, 0.005) << name;  // only ns rounding
  }
  for (const char* name : {"inter_node.latency_ns", "inter_node.nic_bandwidth_Bps"}) {
    EXPECT_FALSE(c.parameter(name).fitted) << name;
    EXPECT_EQ(c.parameter(name).value, c.parameter(name).base);
    EXPECT_TRUE(c.parameter(name).status.starts_with("held")) << c.parameter(name).status;
  }
}

// A probe of one rank (the CUDA probe on a one-GPU machine) still runs its collectives and its send
// to rank (0 + 1) mod 1 = 0: device copies that cross no link. They give no link sample, so the link
// parameters stay the base profile's; the GEMM and memory samples still count. (An H200's one-rank
// probe once fitted NVLink at 62 GB/s and 58 ns from its self-sends.)
TEST(Calibrate, AProbeOfOneRankTimesNoLink) {
  trace::Trace t;
  t.source = "measured";
  int32_t id = 0;
  auto add = [&](Op op, double seconds, double flops, int64_t bytes) {
    t.events.push_back({0, program::Lane::kCompute, op, id++, 0, std::llround(seconds * 1e9), -1, -1, -1, bytes, flops});
  };
  for (int64_t n : {256, 1024, 4096}) add(Op::kForward, 1e-3, 2.0 * n * n * n, 0);
  add(Op::kForward, 1e-3, 0, 1'000'000);
  for (int64_t bytes = 64; bytes <= (1 << 20); bytes *= 4) {
    add(Op::kAllReduceGrads, 1e-5, 0, bytes);
    add(Op::kGatherParams, 1e-5, 0, bytes);
    add(Op::kSendActivation, 1e-5, 0, bytes);
  }
  const nlohmann::json meta = {{"probe", {{"world", 1}, {"hosts", {"h"}}, {"dtype", "bf16"}}}};
  Samples samples;
  add_trace_samples(from_core(t, "probe.json", meta), base_cluster(), std::nullopt, samples);
  EXPECT_EQ(samples.compute.size(), 4u);  // 3 GEMMs + 1 memory pass
  EXPECT_TRUE(samples.links.empty()) << samples.links.size() << " link samples";
  EXPECT_EQ(samples.traces[0].skipped, 3 * 8);  // 8 sizes 64 B .. 1 MiB (x4), three tests each
}

// A profile without the activation and Adam terms (GPU profiles) keeps them absent, and the report
// says why; the other compute parameters still fit.
TEST(Calibrate, ArithmeticTermsTheBaseLacksStayAbsent) {
  spec::Cluster truth = true_cluster(), base = base_cluster();
  truth.gpu.activation_elems_per_s = base.gpu.activation_elems_per_s = 0;
  truth.gpu.adam_params_per_s = base.gpu.adam_params_per_s = 0;
  Samples samples;
  for (const Trace& t : synthesized(truth, 11)) add_trace_samples(t, base, std::nullopt, samples);
  const Calibration c = calibrate(samples, base);
  for (const char* field : {"activation_elems_per_s", "adam_params_per_s"}) {
    const Parameter& p = c.parameter(std::string("gpu.") + field);
    EXPECT_FALSE(p.fitted) << field;
    EXPECT_NE(p.status.find(std::string("no ") + field), std::string::npos) << p.status;
    EXPECT_FALSE(spec::to_json(c.cluster)["gpu"].contains(field)) << field;
  }
  EXPECT_EQ(c.cluster.gpu.activation_elems_per_s, 0.0);
  EXPECT_EQ(c.cluster.gpu.adam_params_per_s, 0.0);
  EXPECT_TRUE(c.parameter("gpu.memory_Bps").fitted);
  EXPECT_NEAR(c.parameter("gpu.memory_Bps").value / 0.75e12, 1.0, 0.02);
}

TEST(Calibrate, RefusesToFitFromTooFewPoints) {
  Samples s;
  for (double f : {1e9, 2e9, 4e9}) {
    sim::Work w;
    w.add_gemm(f, 1);
    s.compute.push_back({w, 100e12, f / 50e12, "hand"});
  }
  try {
    calibrate(s, base_cluster());
    ADD_FAILURE() << "calibrated from 3 samples";
  } catch (const CalibrationError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nothing to calibrate"), std::string::npos) << what;
    EXPECT_NE(what.find("need at least"), std::string::npos) << what;
  }
}

TEST(Calibrate, PyTorchTracesAreNotCalibrationInput) {
  const Trace k = read_trace_files({test::data_path("kineto/handwritten_rank0.json")});
  Samples s;
  test::expect_spec_error([&] { add_trace_samples(k, base_cluster(), std::nullopt, s); }, "", "no FLOPs or message sizes");
}

}  // namespace
}  // namespace stagecraft::traces
