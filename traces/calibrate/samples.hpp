// Calibration samples: a measured duration paired with what the cost model says it consists of
// (work.hpp for compute, links.hpp for communication). From a Stagecraft trace (simulated or
// measured, e.g. the executor's) through the Program rebuilt from its header
// (program_context.hpp):
//   Forward / Backward / BackwardInput / BackwardWeight / Recompute  -> compute (its units' sim::Work)
//   OptimizerStep on the GPU                                        -> compute (memory bytes only)
//   OptimizerStep on the host, OffloadCopy                          -> host Adam rate, PCIe rate
//   a collective: one sample per instance (instruction id, step, group), t = last end − last
//     start over the members the trace has (a member that issued early waited for the others;
//     that wait is not the collective's time)
//   GradNormAllReduce                                               -> latency-only tree
//   SendActivation / SendGrad: t = the send's duration (a receive's includes waiting for the data)
//   receives, ReleaseParams: not samples.
// From a probe trace (probe.hpp; header "probe" with the ranks' hosts): Forward events with FLOPs
// are single GEMMs, Forward events with bytes and no FLOPs are memory-bound passes; GatherParams,
// ReduceScatterGrads, AllReduceGrads are all-gather, reduce-scatter, all-reduce over all probe
// ranks; SendActivation is a send to rank (r+1) mod n. Rank r sits on GPU node·gpus_per_node +
// local index, nodes numbered by host in order of first appearance.
// Kernel-level (Kineto) traces carry no FLOPs or message sizes per kernel: not accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/spec/cluster.hpp"
#include "core/spec/training.hpp"
#include "traces/calibrate/links.hpp"
#include "sim/models/work.hpp"
#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {

struct ComputeSample {
  sim::Work work;
  double peak_flops = 0;
  double seconds = 0;
  std::string origin;
  // The part of the model time calibration does not fit: fused attention kernels at the profile's
  // measured efficiency (sim::attention_seconds), 0 for unfused attention.
  double fixed_seconds = 0;
};

struct LinkSample {
  LinkFeatures features;
  double seconds = 0;
  std::string origin;
  // A collective's features depend on the bandwidths through NCCL's protocol choice: what it was,
  // so that calibration can linearise again at the fitted values. Absent for sends.
  struct Collective {
    sim::CollectiveKind kind = sim::CollectiveKind::kAllGather;
    int64_t bytes = 0;
    std::vector<int64_t> gpus;
    int64_t topology_gpus = 0;   // the LinkModel's size
    // the framework's work around it (sim/costs.hpp framework_work): pieces of bytes/pieces each,
    // HBM bytes copied (timed at the calibrated memory rate) and host seconds
    int32_t pieces = 1;
    double copy_bytes = 0;
    double host_s = 0;
  };
  std::optional<Collective> collective;
};

struct RateSample {
  double amount = 0;      // parameters (host Adam) or bytes (PCIe)
  double seconds = 0;
  std::string origin;
};

struct TraceSummary {
  std::string file;
  std::string source;     // "simulated" | "measured"
  std::string kind;       // "program" | "probe"
  std::string training;   // where the training (dtype) came from
  int64_t compute = 0, links = 0, adam = 0, pcie = 0;
  int64_t skipped = 0;    // events that are no sample (receives, releases, zero durations)
};

struct Samples {
  std::vector<ComputeSample> compute;
  std::vector<LinkSample> links;
  std::vector<RateSample> adam;
  std::vector<RateSample> pcie;
  std::vector<TraceSummary> traces;
};

// Throws spec::SpecError for a trace calibration cannot use (kernel level, no plan, events that do
// not match the plan, a probe that does not fit the cluster's nodes).
// A collective sample's features: its pieces' NCCL features summed, plus the framework's host
// seconds and its copies at `memory_Bps` (fixed: no link parameter scales them).
LinkFeatures collective_features(const LinkModel& links, const LinkSample::Collective& c, double memory_Bps);

void add_trace_samples(const Trace& t, const spec::Cluster& base, const std::optional<spec::Training>& training,
                       Samples& out);
Samples samples_from_files(const std::vector<std::string>& files, const spec::Cluster& base,
                           const std::optional<spec::Training>& training);

}  // namespace stagecraft::traces
