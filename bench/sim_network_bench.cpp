// Benchmarks of the simulator's network layer: the max-min solver on its own (1k flows over 256
// links), the FlowNetwork's re-solve per event with 1k flows in flight, and the analytic
// collective model on a 1024-GPU group (from scratch, and per size once precomputed). Inputs come from fixed seeds, so runs are comparable.
//   build/bench/stagecraft_bench_sim_network [--benchmark_filter=...]   (main from benchmark_main)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/spec/cluster.hpp"
#include "sim/models/collective_flows.hpp"
#include "sim/models/collectives.hpp"
#include "sim/network/flows.hpp"
#include "sim/network/max_min.hpp"
#include "sim/network/topology.hpp"

namespace {

using namespace stagecraft;

struct RandomProblem {
  std::vector<double> capacity_Bps;
  std::vector<int32_t> offsets{0};
  std::vector<sim::LinkId> links;
  std::vector<double> caps;
};

// `flows` flows over `links` links, paths of 1-4 random links, every 8th flow capped.
RandomProblem random_problem(int links, int flows, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> capacity(10e9, 400e9);
  std::uniform_int_distribution<int> link(0, links - 1), length(1, 4);
  RandomProblem p;
  for (int l = 0; l < links; ++l) p.capacity_Bps.push_back(capacity(rng));
  for (int f = 0; f < flows; ++f) {
    const int n = length(rng);
    for (int i = 0; i < n; ++i) p.links.push_back(link(rng));
    p.offsets.push_back(static_cast<int32_t>(p.links.size()));
    p.caps.push_back(f % 8 == 0 ? capacity(rng) / 50 : sim::kNoRateCap);
  }
  return p;
}

void BM_MaxMinSolve(benchmark::State& state) {
  const auto flows = static_cast<int>(state.range(0));
  const auto links = static_cast<int>(state.range(1));
  const RandomProblem p = random_problem(links, flows, 7);
  std::vector<double> rates(static_cast<std::size_t>(flows));
  sim::MaxMinSolver solver;
  for (auto _ : state) {
    solver.solve({p.capacity_Bps, p.offsets, p.links, p.caps}, rates);
    benchmark::DoNotOptimize(rates.data());
  }
  state.counters["rounds"] = solver.last_rounds();
  state.counters["flows/s"] = benchmark::Counter(static_cast<double>(flows) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MaxMinSolve)->Args({1000, 256})->Args({100, 256})->Args({10000, 256})->Args({1000, 4096});

spec::Cluster bench_cluster(int64_t nodes) {
  spec::Cluster c;
  c.name = std::string("bench");
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.intra_node.bandwidth_Bps = 300e9;
  c.intra_node.latency_ns = 3000;
  c.inter_node.nics_per_node = 8;
  c.inter_node.nic_bandwidth_Bps = 25e9;
  c.inter_node.latency_ns = 6000;
  c.inter_node.oversubscription = 2.0;
  return c;
}

// One event of a FlowNetwork holding `flows` long flows on a 16-node topology (256 links of NIC
// and core, plus NVLink): a 1-byte flow starts (re-solve) and finishes (re-solve) per iteration.
void BM_FlowNetworkEvent(benchmark::State& state) {
  const auto flows = state.range(0);
  const sim::Topology topo(bench_cluster(16), 16 * 8);
  sim::FlowNetwork net(topo);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> gpu(0, topo.gpus() - 1);
  std::vector<sim::LinkId> path;
  for (int64_t f = 0; f < flows; ++f) {
    topo.route_into(gpu(rng), gpu(rng), path);
    net.start_flow(path, int64_t{1} << 50, 0);
  }
  topo.route_into(0, topo.gpus() - 1, path);
  int64_t events = 0;
  for (auto _ : state) {
    net.start_flow(path, 1, 0);
    const auto& done = net.advance_to(net.next_event_time_ns());
    benchmark::DoNotOptimize(done.data());
    events += 2;
  }
  state.counters["resolves/s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["rounds"] = net.last_solver_rounds();
}
BENCHMARK(BM_FlowNetworkEvent)->Arg(100)->Arg(1000);

// Analytic time of a hierarchical all-reduce over 1024 GPUs (128 nodes × 8).
void BM_CollectiveTime(benchmark::State& state) {
  const sim::Topology topo(bench_cluster(128), 1024);
  std::vector<int64_t> group;
  for (int64_t g = 0; g < topo.gpus(); ++g) group.push_back(g);
  for (auto _ : state) {
    benchmark::DoNotOptimize(sim::collective_time_ns(sim::CollectiveKind::kAllReduce, int64_t{1} << 30, group, topo));
  }
}
BENCHMARK(BM_CollectiveTime)->Unit(benchmark::kMicrosecond);

// The same group with its CollectiveCost computed once: one size per iteration.
void BM_CollectiveCostTime(benchmark::State& state) {
  const sim::Topology topo(bench_cluster(128), 1024);
  std::vector<int64_t> group;
  for (int64_t g = 0; g < topo.gpus(); ++g) group.push_back(g);
  const sim::CollectiveCost cost(sim::CollectiveKind::kAllReduce, group, topo);
  int64_t bytes = 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cost.time_ns(bytes));
    bytes = bytes * 3 % (int64_t{1} << 31);
  }
}
BENCHMARK(BM_CollectiveCostTime);

// A data-parallel all-reduce of 256 MiB over 16 GPUs on 2 nodes as the simulator puts it on the
// network (models/collective_flows.hpp): one capped ring flow per member, all at once, run to the end.
void BM_CollectiveFlows(benchmark::State& state) {
  const sim::Topology topo(bench_cluster(2), 16);
  std::vector<int64_t> group;
  for (int64_t g = 0; g < 16; ++g) group.push_back(g);
  const int64_t S = int64_t{1} << 28;
  const int64_t T = sim::CollectiveCost(sim::CollectiveKind::kAllReduce, group, topo).time_ns(S);
  std::vector<std::vector<sim::LinkId>> routes;
  std::vector<int64_t> bytes;
  for (int64_t g : group) {
    const sim::RingFlow f = sim::ring_flow(group, g, 8);
    routes.emplace_back();
    topo.route_into(g, f.successor, routes.back());
    bytes.push_back(sim::ring_flow_bytes(f, sim::CollectiveKind::kAllReduce, S));
  }
  for (auto _ : state) {
    sim::FlowNetwork net(topo);
    for (std::size_t i = 0; i < routes.size(); ++i) net.start_flow(routes[i], bytes[i], 0, sim::ring_flow_cap_Bps(bytes[i], T));
    while (net.flow_count() > 0) net.advance_to(net.next_event_time_ns());
    benchmark::DoNotOptimize(net.now_ns());
  }
}
BENCHMARK(BM_CollectiveFlows)->Unit(benchmark::kMicrosecond);

}  // namespace
