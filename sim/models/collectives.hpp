// Collective model: how long an all-gather, reduce-scatter, all-reduce or send/recv of S bytes
// takes over a group's actual placement on the topology, as ring stages (collective_stages) and
// their analytic time. How the simulator puts a collective on its FlowNetwork, so that it
// contends with other traffic, is collective_flows.hpp. It is not NCCL's protocol model (no
// LL/LL128/Simple protocols, channels or chunk pipelining); it is the bandwidth-and-latency
// ("α–β") ring model.
//
// Conventions (nccl-tests, doc/PERFORMANCE.md): S is the full buffer size in bytes (the gathered
// output of an all-gather, the input of a reduce-scatter, the buffer of an all-reduce), n the
// group size, t the time.
//     algbw = S / t          busbw = algbw · F,   F = 2(n−1)/n   all-reduce
//                                                   (n−1)/n     all-gather, reduce-scatter
//                                                   1           send/recv
//
// Ring steps (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
// workstations", JPDC 2009; NCCL's ring algorithm): a ring of n members runs n−1 steps for an
// all-gather or a reduce-scatter; in each step every member sends one chunk of ⌈S/n⌉ bytes to
// its ring successor, all members at once. An all-reduce is a reduce-scatter then an all-gather
// (2(n−1) steps). One step takes  α + chunk / β_step,  where
//     α       = the largest route latency among the step's transfers (intra_node.latency_ns when
//               all stay in a node, inter_node.latency_ns when any crosses nodes);
//     β_step  = min over links l of C_l / n_l, with n_l the number of the step's transfers that
//               cross l: the max-min rate of the slowest transfer when all carry equal bytes.
// So a ring inside one node (each GPU sends on its own NVLink egress, receives on its ingress) takes
//     all-gather, reduce-scatter:  (n−1)·α + (n−1)/n · S/β          all-reduce: twice that.
// Each step's transfer time is rounded up to whole ns, exactly as the FlowNetwork does.
//
// Hierarchical, for a group spanning N > 1 nodes with k > 1 members on every node (as NCCL's
// hierarchical tree / NVLS-tree and the 2D algorithms of Horovod or BlueConnect do: NVLink inside
// a node, one inter-node ring per rail). Members are grouped by node in order of first
// appearance in the placement and kept in placement order inside a node; the rail j is the j-th
// member of every node (rail-aligned, so it leaves through NIC j mod nics_per_node).
//     reduce-scatter = intra-node RS (k−1 steps of ⌈S/k⌉, all nodes at once)
//                    + inter-node RS among each rail (N−1 steps of ⌈S/(kN)⌉, all k rails at once)
//     all-gather     = inter-node AG among each rail (N−1 steps of ⌈S/(kN)⌉)
//                    + intra-node AG (k−1 steps of ⌈S/k⌉)
//     all-reduce     = intra RS + inter RS + inter AG + intra AG, so that
//     t_AR = 2(k−1)·(α_intra + ⌈S/k⌉/β_nvlink) + 2(N−1)·(α_inter + ⌈S/(kN)⌉/β_rail)
// where β_rail is the per-flow bottleneck of an inter-node step, min(NIC capacity / rails on that
// NIC, uplink capacity / k) when every node sends k flows at once. k = 1 or N = 1 gives the flat
// ring. A group whose nodes hold different numbers of members is timed as one flat ring over the
// members grouped by node (each node boundary crossed once per step).
// Send/recv (placement = {src, dst}): one transfer of S bytes, α = route latency, β = min link.
//
// Gradient-norm all-reduce (GradNormAllReduce, a few bytes over every rank of the world): a
// latency-bound tree, a reduce up and a broadcast down a binary tree inside each node and one
// across nodes (NCCL uses its tree algorithm for small all-reduces: Sanders, Speck and Träff,
// "Two-tree algorithms for full bandwidth broadcast, reduction and scan", Parallel Computing
// 2009; NCCL 2.4 release notes), bandwidth terms dropped:
//     t = 2⌈log2 local⌉·α_intra + 2⌈log2 nodes⌉·α_inter,  local = min(world, gpus_per_node),
//     nodes = ⌈world / gpus_per_node⌉.
// This keeps only the tree depth: NCCL's own latency model (src/graph/tuning.cc) charges the
// intra-node part of a tree as a chain, (local − 1)·α_intra per direction.
// Run step by step as flows on an otherwise idle FlowNetwork, the stages take exactly
// collective_time_ns (a test runs them so). Cost: collective_time_ns routes one step per stage,
// O(stages · n · path + links) per call; a CollectiveCost does that once per group and then
// answers each size in O(stages).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/program/instruction.hpp"
#include "sim/network/topology.hpp"

namespace stagecraft::sim {

enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce, kSendRecv };

std::string to_string(CollectiveKind kind);

// One ring stage: `steps` repetitions of the same transfer pattern, each pair moving chunk_bytes.
struct CollectiveStage {
  std::string name;                                 // "intra-node reduce-scatter", "ring all-gather", ...
  std::vector<std::pair<int64_t, int64_t>> pairs;   // (src GPU, dst GPU) of one step
  int64_t steps = 0;
  int64_t chunk_divisor = 1;                        // chunk_bytes = ⌈S / chunk_divisor⌉ (n, k or k·N)
  int64_t chunk_bytes = 0;
};

// The collective an instruction runs: all-gather for GatherParams, AllGatherParams and
// TpAllGather; reduce-scatter for ReduceScatterGrads and TpReduceScatter; all-reduce for
// AllReduceGrads, TpAllReduce and GradNormAllReduce; nullopt for any other instruction.
std::optional<CollectiveKind> collective_kind(program::Op op);

// The gradient-norm tree's latency-bound steps inside nodes and across them (see above).
struct TreeSteps {
  int64_t intra = 0;   // 2⌈log2 local⌉
  int64_t inter = 0;   // 2⌈log2 nodes⌉
};
TreeSteps gradnorm_tree_steps(int64_t world, int64_t gpus_per_node);
int64_t gradnorm_allreduce_ns(int64_t world, int64_t gpus_per_node, int64_t intra_latency_ns, int64_t inter_latency_ns);

// The nccl-tests bus bandwidth factor F for a group of n.
double bus_bandwidth_factor(CollectiveKind kind, int64_t n);
double algbw_Bps(int64_t bytes, int64_t time_ns);
double busbw_Bps(CollectiveKind kind, int64_t bytes, int64_t n, int64_t time_ns);

// The stages of a collective over `placement` (global GPU indices, distinct, in the topology;
// for kSendRecv exactly {src, dst}). A group of one has no stages. Throws std::invalid_argument
// naming the collective and the offending GPU or size.
std::vector<CollectiveStage> collective_stages(CollectiveKind kind, int64_t bytes, std::span<const int64_t> placement,
                                               const Topology& topology);

// Analytic time: Σ_stages steps · (α_step + ⌈chunk · 1e9 / β_step⌉).
int64_t collective_time_ns(CollectiveKind kind, int64_t bytes, std::span<const int64_t> placement,
                           const Topology& topology);

// The part of collective_time_ns that does not depend on S (stages, α and β of each step),
// computed once per group so that many sizes (buckets) cost O(stages) each.
class CollectiveCost {
 public:
  CollectiveCost(CollectiveKind kind, std::span<const int64_t> placement, const Topology& topology);
  int64_t time_ns(int64_t bytes) const;  // == collective_time_ns(kind, bytes, placement, topology)
  CollectiveKind kind() const { return kind_; }
  int64_t group_size() const { return group_size_; }

 private:
  struct StageCost {
    int64_t steps = 0;
    int64_t chunk_divisor = 1;
    int64_t latency_ns = 0;
    double rate_Bps = 0;
  };
  CollectiveKind kind_;
  int64_t group_size_ = 0;
  std::vector<StageCost> stages_;
};

}  // namespace stagecraft::sim
