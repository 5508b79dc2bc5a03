// The flex dispatcher's cost (sim/models/collectives.hpp, "Dispatch") against DeepEP's published
// normal-kernel runs on H800 (deepseek-ai/DeepEP dd758caf docs/legacy.md, "Normal kernels with
// NVLink and RDMA forwarding"; tests/legacy/test_internode.py and test_intranode.py: 4096 tokens a
// rank, hidden 7168, top 8 of 256 experts, the experts' groups the nodes and the top min(nodes, 4)
// of them, FP8 dispatch — 7168 bytes and a 4-byte scale per 128 values, 7392 bytes a token — and
// BF16 combine, 14336). DeepEP reports a "bottleneck bandwidth": the logical bytes over the time,
// the network's (RDMA) across nodes — a token counted once per node it reaches, its own node
// included — and NVLink's inside one node — a token once per rank it reaches, itself included.
// The simulator's time over the bundled `h800-ib-2048` profile (datasheet values, nothing fitted
// to these rows) gives the same quantity from its expected ranks and nodes hit. Prints the
// markdown table docs/validation.md quotes:
//   build/bench/stagecraft_dispatch_check
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "core/spec/bundled.hpp"
#include "sim/models/collectives.hpp"
#include "sim/network/topology.hpp"

namespace {

using namespace stagecraft;

struct Row {
  int64_t ep;
  double dispatch_GBps, combine_GBps;   // published
};
constexpr Row kRows[] = {{8, 153, 158}, {16, 43, 43}, {32, 58, 57}, {64, 51, 50}};

}  // namespace

int main() {
  const spec::Cluster cluster = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, "h800-ib-2048"));
  constexpr int64_t kTokens = 4096, kExperts = 256, kTopK = 8, kHidden = 7168;
  const double fp8_token = kHidden + kHidden / 128.0 * 4, bf16_token = 2.0 * kHidden;
  std::printf("| EP | nodes | ranks hit a token | nodes hit | dispatch: published / simulated GB/s | error | "
              "combine: published / simulated GB/s | error | binds |\n|---|---|---|---|---|---|---|---|---|\n");
  double error_sum = 0;
  int errors = 0;
  for (const Row& row : kRows) {
    const int64_t nodes = row.ep / cluster.gpus_per_node;
    const sim::DispatchRouting routing{kExperts, kTopK, nodes > 1 ? nodes : 0, nodes > 1 ? std::min<int64_t>(nodes, 4) : 0,
                                       row.ep, 1};
    std::vector<int64_t> group(static_cast<std::size_t>(row.ep));
    std::iota(group.begin(), group.end(), 0);
    const sim::Topology topology(cluster, row.ep);
    const sim::CollectiveCost cost(sim::CollectiveKind::kAllToAll, group, topology, &routing);
    const sim::DispatchShares d = sim::dispatch_shares(routing, group, cluster.gpus_per_node);
    // the logical bytes DeepEP counts: per node reached across nodes, per rank reached inside one
    const double per_token_hits = nodes > 1 ? d.nodes_hit : d.ranks_hit;
    auto simulated = [&](double token_bytes) {
      const auto S = static_cast<int64_t>(std::llround(static_cast<double>(kTokens * kTopK) * token_bytes));
      return static_cast<double>(kTokens) * per_token_hits * token_bytes / (static_cast<double>(cost.time_ns(S)) * 1e-9) / 1e9;
    };
    const double dispatch = simulated(fp8_token), combine = simulated(bf16_token);
    const double e1 = dispatch / row.dispatch_GBps - 1, e2 = combine / row.combine_GBps - 1;
    error_sum += std::fabs(e1) + std::fabs(e2);
    errors += 2;
    std::printf("| %lld | %lld | %.2f | %.2f | %.0f / %.1f | %+.1f%% | %.0f / %.1f | %+.1f%% | %s |\n",
                static_cast<long long>(row.ep), static_cast<long long>(std::max<int64_t>(nodes, 1)), d.ranks_hit, d.nodes_hit,
                row.dispatch_GBps, dispatch, 100 * e1, row.combine_GBps, combine, 100 * e2,
                cost.bus().network ? "network" : "NVLink");
  }
  std::printf("\nMean absolute error %.1f%% over %d figures.\n", 100 * error_sum / errors, errors);
  return 0;
}
