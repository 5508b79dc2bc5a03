// NCCL's cost model: how long NCCL takes for an all-gather, reduce-scatter or all-reduce of S
// bytes over a communicator of n ranks on N nodes, by NCCL version. This is the model NCCL itself
// uses to choose an algorithm and protocol (src/graph/tuning.cc, ncclTopoTuneModel and
// ncclTopoGetAlgoTime, NVIDIA/nccl tags v2.7.8-1 .. v2.30.7-1), fed with the bus bandwidth that
// Stagecraft's topology gives the group instead of NCCL's topology search.
//
// For algorithm a ∈ {Ring, Tree (all-reduce only), PAT (all-gather/reduce-scatter, 2.23+, one
// GPU per node)} and protocol p ∈ {LL, LL128, Simple}:
//     time(a, p, S) = lat(a, p) + S / bw(a, p)                (NCCL: lat·latCount + S/(1000·bw))
// and NCCL runs the (a, p) with the smallest time. With B the group's bus bandwidth (bytes/s;
// see "bus bandwidth" below) and the constants of the version's band (kNcclBands in nccl.cpp):
//   bandwidth (busBw, then algBw):
//     ≤ 2.17 on Ampere:  B ← min(B, 235 GB/s)
//     Ring LL:      min(llMaxBw, B·f),  f = 1/2 from 2.21, else 1/4 (N > 1 or all-reduce) or 1/3
//     Ring LL128:   min(B·g, channels·perChRingLL128),  g = 0.92 (≤ 2.22: 0.7 when n/N < 2)
//     Ring Simple:  B
//     Tree:         B' = min(0.92·B, channels·perChTree); LL: min(B'/3.8, llMaxBw);
//                   LL128: min(B'·(N = 1 ? 7/9 : 120/128), channels·perChTreeLL128); Simple: B'
//     PAT Simple:   0.75·B
//     algBw = busBw · n/nsteps (Ring; nsteps = n − 1, or 2(n − 1) for all-reduce), busBw/2 (Tree),
//             busBw (PAT)
//   latency (µs):
//     Ring:   baseLat + (nsteps − nInter)·intraLat + nInter·interLat,
//             nInter = N − 1 (2(N − 1) for all-reduce), intraLat = hwLat[NVLink][Ring][p]
//             (×1.8 for LL across nodes up to 2.17; from 2.18 at least netOverhead across nodes:
//             1 µs Intel, 2 µs AMD hosts, ×3 for Simple), interLat = hwLat[Net][Ring][p]
//             (from 2.23 hwLat[Net][Tree][p] when n/N = 1)
//     Tree:   baseLat + 2·((⌊n/N⌋ − 1)·intraLat + ⌊log2 N⌋·interLat)
//     PAT:    baseLat + ⌊log2 N⌋·interLat/3.5 + 2.8·n
//   size-dependent terms (ncclTopoGetAlgoTime): a Tree all-reduce's bw times the correction
//   factor of ⌊log2(S/64)⌋ (64 B .. 256 MiB); a multi-node Ring Simple all-reduce's lat times 1.9
//   (≤ 2.17: when S ≥ n/16·64 KiB; from 2.18: ×1.4 on Ampere and later, when S/(channels·n) ≥ 64).
// So a ring all-gather or reduce-scatter over n ranks on N nodes takes
//     baseLat + (n − N)·intraLat + (N − 1)·interLat + S·(n − 1)/n / B
// — its latency grows with the ranks, not the nodes (every one of the n − 1 ring steps is paid).
//
// Bus bandwidth B: what one ring channel set moves per rank, from the topology (topology.hpp)
// with the NVLink and network stages pipelined (the slower bounds), not added:
//     B = min(B_nvlink, B_net),   B_nvlink = the NVLink egress of a member (when a node holds ≥ 2
//     members), B_net = min over the group's nodes of min(Σ egress of the distinct NICs its
//     members use, the node's uplink) (when the group spans nodes).
// A node's ring crossing carries S·(n − 1)/n bytes spread over its NICs (NCCL runs channels on
// every NIC of the node), which gives the node's NIC total as the bus bandwidth. NCCL's tuner
// itself uses the intra-node graph bandwidth for N ≤ 2; we use the physical bottleneck for every N.
//
// Not modelled: NVLS and NVLS-Tree (NVLink SHARP, Hopper NVSwitch), CollNet (SHARP in-network
// reduction), PCIe-only nodes (the NVLink latencies are used), NCCL_ALGO/NCCL_PROTO overrides, and
// aggregated launches (latCount = 1 per collective).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/spec/cluster.hpp"

namespace stagecraft::sim {

enum class CollectiveKind;

enum class NcclAlgo { kRing, kTree, kPat };
enum class NcclProto { kLL, kLL128, kSimple };
std::string to_string(NcclAlgo a);
std::string to_string(NcclProto p);

// One version band's constants (tuning.cc), µs and GB/s as NCCL writes them.
struct NcclBand {
  int first_minor = 0, last_minor = 0;             // 2.first .. 2.last
  std::array<std::array<double, 3>, 2> base_lat;    // [Tree, Ring][LL, LL128, Simple]
  std::array<std::array<double, 3>, 2> nvlink_lat;  // hwLat[NVLink]
  std::array<std::array<double, 3>, 2> net_lat;     // hwLat[Net]
  bool ampere_cap_235 = false;       // Ampere busBw ≤ 235 GB/s
  bool ll_half = false;              // Ring LL busBw · 1/2 (else 1/4 or 1/3)
  bool ll128_low_ppn_penalty = true; // Ring LL128 · 0.7 when n/N < 2
  bool ll_intra_times_1_8 = true;    // LL intraLat · 1.8 across nodes
  bool net_overhead = false;         // intraLat ≥ netOverhead across nodes
  bool ppn1_tree_net_lat = false;    // interLat from Tree when one rank per node
  bool pat = false;                  // PAT all-gather/reduce-scatter with one GPU per node
  bool plateau_per_channel = false;  // the 2.18+ ring plateau rule
};
const NcclBand& nccl_band(int minor);   // throws std::invalid_argument outside 2.7 .. 2.30

// The communicator as NCCL's tuner sees it.
struct NcclGroup {
  int64_t ranks = 1;
  int64_t nodes = 1;
  double bus_Bps = 0;    // B above
};

struct NcclChoice {
  NcclAlgo algo = NcclAlgo::kRing;
  NcclProto proto = NcclProto::kSimple;
  double latency_s = 0;
  double alg_Bps = 0;        // the time's bandwidth term is S / alg_Bps
  double bus_fraction = 0;   // alg_Bps / B when the bandwidth scales with B, 0 when a constant cap bounds it
  double seconds = 0;
};

// The candidates (a, p) of one collective over one group, computed once; time_ns(S) picks the fastest.
class NcclModel {
 public:
  NcclModel(CollectiveKind kind, const NcclGroup& group, const spec::Nccl& nccl);
  NcclChoice choose(int64_t bytes) const;
  int64_t time_ns(int64_t bytes) const;   // ⌈choose(bytes).seconds · 1e9⌉, 0 for no bytes or one rank

 private:
  struct Candidate {
    NcclAlgo algo;
    NcclProto proto;
    double lat_us;
    double bw_GBps;          // algBw
    double bus_fraction;     // algBw / B, 0 when capped by a constant
    double plateau = 1.0;    // the ring plateau's latency factor, when its size condition holds
  };
  CollectiveKind kind_;
  int64_t ranks_ = 1;
  int64_t channels_ = 1;
  bool per_channel_plateau_ = false;
  std::array<Candidate, 7> candidates_{};
  int count_ = 0;
};

}  // namespace stagecraft::sim
