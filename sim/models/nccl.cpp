#include "sim/models/nccl.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "sim/models/collectives.hpp"

namespace stagecraft::sim {

namespace {

using Lat = std::array<std::array<double, 3>, 2>;   // [Tree, Ring][LL, LL128, Simple]

// NVIDIA/nccl src/graph/tuning.cc at the tags named; values as NCCL writes them (µs).
const NcclBand kNcclBands[] = {
    // v2.7.8-1 .. v2.11.4-1: baseLat, hwLat; Ampere busBw cap 235 GB/s; LL ring 1/4 or 1/3;
    // LL intraLat ×1.8 across nodes; ring plateau ×1.9 for S ≥ n/16·64 KiB.
    {7, 11, Lat{{{4.4, 4.4, 0}, {3.6, 10.0, 8.4}}}, Lat{{{.52, 1.25, 28}, {.47, 1.9, 3.4}}},
     Lat{{{5.0, 8.5, 28}, {2.7, 4.0, 9.6}}}, true, false, true, true, false, false, false, false},
    // v2.12.7-1 .. v2.13.4-1: hwLat[Net][Ring][Simple] 28.
    {12, 13, Lat{{{4.4, 4.4, 0}, {3.6, 10.0, 8.4}}}, Lat{{{.52, 1.25, 28}, {.47, 1.9, 3.4}}},
     Lat{{{5.0, 8.5, 28}, {2.7, 4.0, 28}}}, true, false, true, true, false, false, false, false},
    // v2.14.3-1 .. v2.17.1-1: back to 9.6.
    {14, 17, Lat{{{4.4, 4.4, 0}, {3.6, 10.0, 8.4}}}, Lat{{{.52, 1.25, 28}, {.47, 1.9, 3.4}}},
     Lat{{{5.0, 8.5, 28}, {2.7, 4.0, 9.6}}}, true, false, true, true, false, false, false, false},
    // v2.18.1-1 .. v2.20.5-1: new baseLat, NVLink LL 0.6, Net Simple 14; netOverhead replaces the
    // LL ×1.8; no 235 GB/s cap; plateau per channel.
    {18, 20, Lat{{{6.8, 14.0, 0}, {6.6, 14.0, 8.4}}}, Lat{{{.6, 1.25, 28}, {.6, 1.9, 3.4}}},
     Lat{{{5.0, 8.5, 28}, {2.7, 4.0, 14.0}}}, false, false, true, false, true, false, false, true},
    // v2.21.5-1 .. v2.22.3-1: Ring LL busBw × 0.5.
    {21, 22, Lat{{{6.8, 14.0, 0}, {6.6, 14.0, 8.4}}}, Lat{{{.6, 1.25, 28}, {.6, 1.9, 3.4}}},
     Lat{{{5.0, 8.5, 28}, {2.7, 4.0, 14.0}}}, false, true, true, false, true, false, false, true},
    // v2.23.4-1 .. v2.30.7-1: Tree Simple 8.4 / 4.0 / 14; LL128 0.92 at any ppn; Tree Net latency
    // when one rank per node; PAT.
    {23, 30, Lat{{{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}}}, Lat{{{.6, 1.25, 4.0}, {.6, 1.9, 3.4}}},
     Lat{{{5.0, 8.5, 14}, {2.7, 4.0, 14.0}}}, false, true, false, false, true, true, true, true},
};

// [arch][N = 1, 2, > 2] (tuning.cc, v2.30.7-1; the Volta and Ampere rows are those of every band).
constexpr double kPerChRingLL128[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
constexpr double kPerChTreeLL128[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChTree[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
// llMaxBws[row][N]: row = the GPU's arch on one node; across nodes 0 for Intel hosts, 1 for AMD.
// Before 2.23 Hopper and Blackwell used the Ampere row.
constexpr double kLlMaxBw[4][3] = {{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}};
// treeCorrectionFactor[protocol][⌊log2(S/64)⌋], 64 B .. 256 MiB.
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

int64_t log2_floor(int64_t n) {
  int64_t l = 0;
  while (n >>= 1) ++l;
  return l;
}

}  // namespace

std::string to_string(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::kRing: return "ring";
    case NcclAlgo::kTree: return "tree";
    case NcclAlgo::kPat: return "pat";
  }
  return "ring";
}

std::string to_string(NcclProto p) {
  switch (p) {
    case NcclProto::kLL: return "LL";
    case NcclProto::kLL128: return "LL128";
    case NcclProto::kSimple: return "Simple";
  }
  return "Simple";
}

const NcclBand& nccl_band(int minor) {
  for (const NcclBand& b : kNcclBands) {
    if (minor >= b.first_minor && minor <= b.last_minor) return b;
  }
  throw std::invalid_argument("NCCL 2." + std::to_string(minor) + ": the cost model knows NCCL 2.7 to 2.30");
}

NcclModel::NcclModel(CollectiveKind kind, const NcclGroup& group, const spec::Nccl& nccl)
    : kind_(kind), ranks_(group.ranks), channels_(nccl.channels) {
  if (kind == CollectiveKind::kSendRecv) throw std::invalid_argument("NcclModel: send/recv is not a collective");
  if (group.ranks < 1 || group.nodes < 1 || group.nodes > group.ranks) {
    throw std::invalid_argument("NcclModel: " + std::to_string(group.ranks) + " ranks on " + std::to_string(group.nodes) +
                                " nodes");
  }
  if (group.ranks < 2) return;
  if (!(group.bus_Bps > 0)) throw std::invalid_argument("NcclModel: the group's bus bandwidth must be > 0");
  const NcclBand& band = nccl_band(nccl.minor);
  per_channel_plateau_ = band.plateau_per_channel;
  const int64_t n = group.ranks, N = group.nodes;
  const bool all_reduce = kind == CollectiveKind::kAllReduce;
  const double ppn = static_cast<double>(n) / static_cast<double>(N);
  const int arch = static_cast<int>(nccl.gpu_arch);
  const int index2 = N <= 2 ? static_cast<int>(N - 1) : 2;
  int ll_row = N == 1 ? arch : (nccl.host_cpu == spec::HostCpu::kAmd ? 1 : 0);
  if (N == 1 && band.first_minor < 23 && arch > 1) ll_row = 1;
  const double ll_max = kLlMaxBw[ll_row][index2];
  const double channels = static_cast<double>(nccl.channels);
  double B = group.bus_Bps / 1e9;   // GB/s
  bool capped = false;
  if (band.ampere_cap_235 && nccl.gpu_arch == spec::GpuArch::kAmpere && B > 235.0) {
    B = 235.0;
    capped = true;
  }
  const int64_t nsteps = all_reduce ? 2 * (n - 1) : n - 1;
  const int64_t n_inter = N == 1 ? 0 : all_reduce ? 2 * (N - 1) : N - 1;

  // min(x·B, cap): the value and its fraction of B (0 when the constant bounds it)
  struct Bw {
    double GBps, fraction;
  };
  const auto scaled = [&](double factor, double cap) {
    const double v = factor * B;
    if (capped || v > cap) return Bw{std::min(v, cap), 0.0};
    return Bw{v, factor};
  };
  const auto add = [&](NcclAlgo a, NcclProto p, double lat_us, Bw bus, double alg_ratio) {
    Candidate& c = candidates_[static_cast<std::size_t>(count_++)];
    c.algo = a;
    c.proto = p;
    c.lat_us = lat_us;
    c.bw_GBps = bus.GBps * alg_ratio;
    c.bus_fraction = bus.fraction * alg_ratio;
    c.plateau = 1.0;
    if (a == NcclAlgo::kRing && p == NcclProto::kSimple && N > 1 && all_reduce) {
      c.plateau = band.plateau_per_channel ? (nccl.gpu_arch == spec::GpuArch::kVolta ? 1.9 : 1.4) : 1.9;
    }
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();

  // Ring
  for (int pi = 0; pi < 3; ++pi) {
    const auto p = static_cast<NcclProto>(pi);
    Bw bus{};
    if (p == NcclProto::kLL) {
      bus = scaled(band.ll_half ? 0.5 : (N > 1 || all_reduce) ? 0.25 : 1.0 / 3.0, ll_max);
    } else if (p == NcclProto::kLL128) {
      bus = scaled(band.ll128_low_ppn_penalty && ppn < 2 ? 0.7 : 0.92, channels * kPerChRingLL128[arch][index2]);
    } else {
      bus = scaled(1.0, kInf);
    }
    double intra = band.nvlink_lat[1][pi];
    const double inter = band.ppn1_tree_net_lat && ppn == 1 ? band.net_lat[0][pi] : band.net_lat[1][pi];
    if (N > 1 && p == NcclProto::kLL && band.ll_intra_times_1_8) intra *= 1.8;
    if (N > 1 && band.net_overhead) {
      const double overhead = (nccl.host_cpu == spec::HostCpu::kAmd ? 2.0 : 1.0) * (p == NcclProto::kSimple ? 3.0 : 1.0);
      intra = std::max(intra, overhead);
    }
    const double lat = band.base_lat[1][pi] + static_cast<double>(nsteps - n_inter) * intra + static_cast<double>(n_inter) * inter;
    add(NcclAlgo::kRing, p, lat, bus, static_cast<double>(n) / static_cast<double>(nsteps));
  }
  // Tree: all-reduce only
  if (all_reduce) {
    const Bw tree = scaled(0.92, channels * kPerChTree[arch][index2]);
    for (int pi = 0; pi < 3; ++pi) {
      const auto p = static_cast<NcclProto>(pi);
      Bw bus = tree;
      if (p == NcclProto::kLL) {
        const double v = tree.GBps / 3.8;
        bus = v > ll_max ? Bw{ll_max, 0.0} : Bw{v, tree.fraction / 3.8};
      } else if (p == NcclProto::kLL128) {
        const double f = N == 1 ? 7.0 / 9.0 : 120.0 / 128.0, cap = channels * kPerChTreeLL128[arch][index2];
        const double v = tree.GBps * f;
        bus = v > cap ? Bw{cap, 0.0} : Bw{v, tree.fraction * f};
      }
      const double intra = band.nvlink_lat[0][pi];
      const double inter = band.net_lat[0][pi];
      const double lat = band.base_lat[0][pi] + 2.0 * (static_cast<double>(n / N - 1) * intra +
                                                       static_cast<double>(log2_floor(N)) * inter);
      add(NcclAlgo::kTree, p, lat, bus, 0.5);
    }
  }
  // PAT: all-gather / reduce-scatter with one rank per node, Simple only
  if (!all_reduce && band.pat && N == n) {
    const double inter = band.net_lat[0][2];   // PAT's Net latency (14 µs), Tree's when ppn = 1
    const double lat = 8.0 + static_cast<double>(log2_floor(N)) * (inter / 3.5) + static_cast<double>(n) * 2.8;
    add(NcclAlgo::kPat, NcclProto::kSimple, lat, scaled(0.75, kInf), 1.0);
  }
  // the profile's scale on the table's latencies (1: as NCCL states them; what "nccl.latency"
  // uncertainty moves)
  for (int i = 0; i < count_; ++i) candidates_[static_cast<std::size_t>(i)].lat_us *= nccl.latency_scale;
}

NcclChoice NcclModel::choose(int64_t bytes) const {
  NcclChoice best;
  if (bytes < 0) {
    throw std::invalid_argument("NcclModel: " + to_string(kind_) + " of " + std::to_string(bytes) + " bytes; expected >= 0");
  }
  if (bytes == 0 || count_ == 0) return best;
  const double S = static_cast<double>(bytes);
  const int64_t log_size = (bytes >> 6) == 0 ? -1 : log2_floor(bytes >> 6);
  best.seconds = std::numeric_limits<double>::infinity();
  for (int i = 0; i < count_; ++i) {
    const Candidate& c = candidates_[static_cast<std::size_t>(i)];
    double bw = c.bw_GBps, fraction = c.bus_fraction, lat = c.lat_us;
    if (c.algo == NcclAlgo::kTree && log_size >= 0 && log_size < 23) {
      const double k = kTreeCorrection[static_cast<int>(c.proto)][log_size];
      bw *= k;
      fraction *= k;
    }
    if (c.plateau != 1.0) {
      const bool holds = per_channel_plateau_
                             ? S / static_cast<double>(channels_ * ranks_) >= 64.0
                             : S >= static_cast<double>(ranks_) / 16.0 * 65536.0;
      if (holds) lat *= c.plateau;
    }
    const double seconds = lat * 1e-6 + S / (bw * 1e9);
    if (seconds < best.seconds) {
      best.algo = c.algo;
      best.proto = c.proto;
      best.latency_s = lat * 1e-6;
      best.alg_Bps = bw * 1e9;
      best.bus_fraction = fraction;
      best.seconds = seconds;
    }
  }
  return best;
}

int64_t NcclModel::time_ns(int64_t bytes) const {
  const NcclChoice c = choose(bytes);
  if (!(c.seconds > 0)) return 0;
  return static_cast<int64_t>(std::ceil(c.seconds * 1e9));
}

}  // namespace stagecraft::sim
