// Collective model: how long an all-gather, reduce-scatter, all-reduce or send/recv of S bytes
// takes over a group's actual placement on the topology, contention-free. How the simulator puts a
// collective on its FlowNetwork, so that it contends with other traffic, is collective_flows.hpp.
//
// Conventions (nccl-tests, doc/PERFORMANCE.md): S is the full buffer size in bytes (the gathered
// output of an all-gather, the input of a reduce-scatter, the buffer of an all-reduce), n the
// group size, t the time.
//     algbw = S / t          busbw = algbw · F,   F = 2(n−1)/n   all-reduce
//                                                   (n−1)/n     all-gather, reduce-scatter
//                                                   1           send/recv
//
// All-gather, reduce-scatter, all-reduce: NCCL's own cost model for the cluster's NCCL version
// (nccl.hpp: ring, tree and PAT with LL / LL128 / Simple, the fastest chosen), over the group's
// n ranks on N nodes and its bus bandwidth B (group_bus below). E.g. a ring all-gather:
//     t = baseLat + (n − N)·intraLat + (N − 1)·interLat + S·(n − 1)/n / B
// Its latency is the version's table (the cluster's intra_node / inter_node latency_ns do not
// enter); its bandwidth is the topology's (intra_node.bandwidth_Bps, NIC and uplink capacities).
// The gradient-norm all-reduce (a few bytes over the whole world) is the same model at its size:
// NCCL picks the tree (⌊log2 N⌋ network steps) or a low-latency ring for it.
//
// All-to-all (ZeRO++ qgZ): NCCL runs it as point-to-point work — ncclAlltoAll (2.28+) is expanded
// into a send and a receive per peer (src/enqueue.cc taskAppend), as PyTorch's grouped
// ncclSend/ncclRecv were before — and has no time model for it (nccl_common.h: "Send/Recv not
// included"). Each member sends S/n to each other member (S its send buffer, nccl-tests' size; busbw
// factor (n − 1)/n as all-gather's). Its traffic to other nodes leaves through its own NIC — an
// all-to-all cannot spread one GPU's traffic over its node's NICs ("the performance you should see
// is the performance of a single NIC", nccl-tests #267; #321) — and its traffic to members on its
// node over NVLink, at once:
//     t = lat + max(S·(n − k)/n / B_nic, S·(k − 1)/n / B_nvlink)
// k the members on the fullest node, B_nic a member's share of its NIC (NIC egress over the members
// using it, at most the node's uplink over its members), B_nvlink a member's NVLink egress. lat is
// inferred from NCCL's tuning constants (tuning.cc, the cluster's version band; × latency_scale):
// baseLat[Ring][Simple] + one Simple hop, hwLat[Net] across nodes (network p2p has no LL buffers by
// default, transport/net.cc), else hwLat[NVLink] — each remote node's block of rounds runs on
// channels of its own (init.cc ncclP2pSchedule, channel.h), so the hops overlap rather than add.
// Check (nccl #1138): 2 nodes × 8 A100, 4 × 200 Gb/s NICs, 2 GPUs a NIC: B_nic = 23.5/2 GB/s (NCCL's
// 0.94 of the line rate), t ≈ S·8/16 / 11.75 GB/s, busbw = (S/t)·15/16 = 22.0 GB/s; measured 19.8.
//
// Dispatch (Megatron-Core's flex token dispatcher with DeepEP's normal kernels, an all-to-all with a
// DispatchRouting; deepseek-ai/DeepEP dd758caf csrc/kernels/internode.cu, docs/legacy.md): over
// the etp·ep ranks of the experts' grid, a token goes once to each rank holding one of its k
// experts (all etp ranks of that expert-parallel place), not once per expert; across nodes it goes
// once over the network to each node holding one (to the GPU of the sender's local index there),
// which forwards it over NVLink to the node's ranks that need it. Under uniform routing over the
// experts the token may reach (the model's router groups, see expected_blocks_hit), with the S of
// a plain all-to-all of the routed copies (S = etp·T·k·h·w, comm_rules.hpp), u = S/(etp·k) bytes a
// token of the rank, N nodes and l members a node:
//     ranks hit   R = etp · Σ_places P(place hit)       nodes hit  M = Σ_nodes P(node hit)
//     network     u·M·(N − 1)/N  (each other node hit, once)
//     NVLink      u·R·(1 − 1/l)  (every rank hit, less the forwarder's own copy)
//     t = lat + max(network / B_nic, NVLink / B_nvlink)
// with B_nic, B_nvlink and lat the all-to-all's (above). The combine moves the same bytes back
// (each rank sums its experts' outputs of a token before sending; the forwarder the node's). The
// uniform all-to-all's shares, per byte of S, are (n − k)/n and (k − 1)/n; with k = 8 of 256
// experts on 32 ranks over 4 nodes (no groups) the dispatch moves 0.34 of S over the network
// against 0.75. Check against DeepEP's published H800 runs: docs/validation.md.
//
// Send/recv (placement = {src, dst}): one transfer of S bytes, t = route latency (intra_node or
// inter_node latency_ns) + ⌈S·1e9 / narrowest link on the route⌉, exactly what a flow alone on its
// route takes on the FlowNetwork.
//
// Bus bandwidth of a group (group_bus): NVLink and network stages pipelined, the slower bounds:
//     B = min(B_nvlink, B_net)
//     B_nvlink = the NVLink egress of one member (intra_node.bandwidth_Bps), when some node holds
//                two or more members;
//     B_net    = min over the group's nodes of min(Σ egress of the distinct NICs its members leave
//                through, the node's uplink = R·nic / oversubscription), when the group spans nodes.
// Cost: a CollectiveCost computes B and NCCL's candidates once per group, then answers each size in
// O(candidates).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/program/instruction.hpp"
#include "sim/models/nccl.hpp"
#include "sim/network/topology.hpp"

namespace stagecraft::sim {

enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce, kSendRecv, kAllToAll };

std::string to_string(CollectiveKind kind);

// The collective an instruction runs: all-gather for GatherParams, AllGatherParams and
// TpAllGather; reduce-scatter for ReduceScatterGrads and TpReduceScatter; all-reduce for
// AllReduceGrads, TpAllReduce and GradNormAllReduce; nullopt for any other instruction.
std::optional<CollectiveKind> collective_kind(program::Op op);

// The nccl-tests bus bandwidth factor F for a group of n.
double bus_bandwidth_factor(CollectiveKind kind, int64_t n);
double algbw_Bps(int64_t bytes, int64_t time_ns);
double busbw_Bps(CollectiveKind kind, int64_t bytes, int64_t n, int64_t time_ns);

// The bus bandwidth of a group (see above) and what bounds it.
struct GroupBus {
  double Bps = 0;        // +inf for a group of one
  bool network = false;  // a NIC or uplink bounds it (else NVLink)
  double rho = 1;        // Bps = rho · (intra_node.bandwidth_Bps or inter_node.nic_bandwidth_Bps)
  int64_t nodes = 1;     // nodes the group spans
};
GroupBus group_bus(std::span<const int64_t> placement, const Topology& topology);

// A token's routing as the dispatch sees it: the model's experts, top-k and router groups (0: none),
// and the experts' grid (ep places of E/ep consecutive experts, etp ranks each).
struct DispatchRouting {
  int64_t experts = 0, top_k = 0, groups = 0, group_top_k = 0;
  int64_t ep = 1, etp = 1;
};
// Σ over the sets of experts `blocks` (each a list of expert ids) of the probability that a token's
// top k hits at least one of the set: k experts drawn uniformly without replacement from the
// router's allowed pool — all E, or with G groups of E/G consecutive experts, g groups drawn
// uniformly and k experts from their g·E/G. P(set A missed) = E_S[C(P − |A ∩ pool_S|, k) / C(P, k)].
double expected_sets_hit(const DispatchRouting& r, const std::vector<std::vector<int64_t>>& blocks);
// The dispatch's bytes per byte of S (above) for the group `placement` (etp fastest, ep places in
// order): what leaves a member over the network and over NVLink, and the tokens' expected ranks and
// nodes hit.
struct DispatchShares {
  double remote = 0, local = 0;
  double ranks_hit = 0, nodes_hit = 0;
  int64_t nodes = 1, per_node = 1;
};
DispatchShares dispatch_shares(const DispatchRouting& r, std::span<const int64_t> placement, int64_t gpus_per_node);

// Contention-free time (see above). Throws std::invalid_argument naming the collective and the
// offending GPU or size.
int64_t collective_time_ns(CollectiveKind kind, int64_t bytes, std::span<const int64_t> placement,
                           const Topology& topology);

// The part of collective_time_ns that does not depend on S (NCCL's candidates over the group's
// bus bandwidth, or a send's route), computed once per group.
class CollectiveCost {
 public:
  // `dispatch`: an all-to-all moved as the flex dispatcher moves it (above).
  CollectiveCost(CollectiveKind kind, std::span<const int64_t> placement, const Topology& topology,
                 const DispatchRouting* dispatch = nullptr);
  int64_t time_ns(int64_t bytes) const;  // == collective_time_ns(kind, bytes, placement, topology)
  CollectiveKind kind() const { return kind_; }
  int64_t group_size() const { return group_size_; }

  // NCCL's choice at this size (collectives only).
  NcclChoice choose(int64_t bytes) const;
  const GroupBus& bus() const { return bus_; }
  // The bytes a member's flow carries per byte of a plain all-to-all's: the dispatch's binding term
  // over the plain one's (1 for any other collective), so that sharing links it slows as its time does.
  double flow_scale() const { return flow_scale_; }

 private:
  void all_to_all(std::span<const int64_t> placement, const Topology& topology, const DispatchRouting* dispatch);

  CollectiveKind kind_;
  int64_t group_size_ = 0;
  GroupBus bus_;
  std::optional<NcclModel> nccl_;
  int64_t send_latency_ns_ = 0;   // send/recv: route latency and narrowest link
  double send_Bps_ = 0;
  // all-to-all: its latency, and the binding term's rate and share of S (bus_ holds its rate)
  double a2a_latency_s_ = 0;
  double a2a_share_ = 0;          // (n − k)/n or (k − 1)/n (a dispatch: its own shares)
  double flow_scale_ = 1;
};

}  // namespace stagecraft::sim
