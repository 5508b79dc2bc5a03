#include "sim/simulator.hpp"

#include <tuple>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/count/count.hpp"
#include "sim/costs.hpp"
#include "sim/error.hpp"
#include "sim/memory_accounting.hpp"
#include "sim/models/memory.hpp"
#include "sim/simulation.hpp"

namespace stagecraft::sim {

namespace {

// The step's metrics from what the simulated ranks did: the step ends with the last instruction;
// the time partition is the mean over ranks; the peak is the largest sample of any rank.
Metrics summarize(RunRecord& run, const program::Program& prog, const spec::Cluster& cluster, double peak_flops) {
  Metrics out;
  int64_t step_ns = 0;
  for (const RankRecord& r : run.ranks) step_ns = std::max(step_ns, r.last_end_ns);
  const double step = static_cast<double>(step_ns) * 1e-9;
  out.step_time_s = step;
  out.simulated_ranks = static_cast<int64_t>(run.ranks.size());
  out.events = run.instructions;
  double compute = 0, exposed = 0;
  std::array<double, program::kTrafficClasses> lane_busy{};
  const trace::MemorySample* peak = nullptr;   // the largest sample of any rank (the first of equal ones)
  for (RankRecord& r : run.ranks) {
    std::vector<Interval> comm_union;
    const std::vector<Interval> compute_union = union_of(std::move(r.compute));
    for (std::size_t c = 0; c < r.traffic.size(); ++c) {
      const std::vector<Interval> lane = union_of(std::move(r.traffic[c]));
      lane_busy[c] += static_cast<double>(length(lane));
      comm_union = unite(comm_union, lane);
    }
    // exposed = |comm| − |comm ∩ compute|: communication the compute lane does not hide
    exposed += static_cast<double>(length(comm_union) - overlap(comm_union, compute_union));
    compute += static_cast<double>(length(compute_union));
    if (!peak || r.peak.total() > peak->total()) peak = &r.peak;
  }
  if (peak && !run.ranks.empty()) {
    out.peak_memory_bytes = peak->total();
    out.peak_rank = peak->rank;
    out.memory = peak->bytes;
  }
  const double n = static_cast<double>(run.ranks.size());
  out.time.compute_s = compute / n * 1e-9;
  out.time.exposed_comm_s = exposed / n * 1e-9;
  out.time.bubble_s = std::max(0.0, step - out.time.compute_s - out.time.exposed_comm_s);
  out.time.tp_s = lane_busy[0] / n * 1e-9;
  out.time.pp_s = lane_busy[1] / n * 1e-9;
  out.time.dp_s = lane_busy[2] / n * 1e-9;
  out.time.cp_s = lane_busy[3] / n * 1e-9;
  out.time.ep_s = lane_busy[4] / n * 1e-9;
  out.bubble_fraction = step > 0 ? out.time.bubble_s / step : 0;

  const double tokens = static_cast<double>(prog.tokens_per_step());
  const double world = static_cast<double>(prog.placement.world());
  out.tokens_per_s = step > 0 ? tokens / step : 0;
  out.model_tflops_per_gpu = step > 0 ? tokens * count::model_flops_per_token_train(prog.model) / (world * step) / 1e12 : 0;
  out.hardware_tflops_per_gpu =
      step > 0 ? tokens * count::hardware_flops_per_token_train(prog.model, prog.plan.recompute) / (world * step) / 1e12 : 0;
  out.mfu = out.model_tflops_per_gpu * 1e12 / peak_flops;
  out.capacity_bytes = cluster.gpu.memory_bytes;
  out.dp_internode_bytes = dp_internode_bytes_per_micro_batch(prog, cluster.gpus_per_node);
  std::tie(out.ep_intranode_bytes, out.ep_internode_bytes) = ep_bytes_per_step(prog, cluster.gpus_per_node);
  out.fits = out.peak_memory_bytes <= out.capacity_bytes;
  return out;
}

void check_fits(const program::Program& prog, const spec::Cluster& cluster) {
  if (cluster.gpus() < prog.placement.world()) {
    throw SimError("cluster " + cluster.name + " has " + std::to_string(cluster.gpus()) + " GPUs; the plan needs " +
                   std::to_string(prog.placement.world()));
  }
}

}  // namespace

SimResult simulate(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options) {
  check_fits(prog, cluster);
  Simulation sim(prog, cluster, options);
  RunRecord run = sim.run();
  SimResult result;
  result.metrics = summarize(run, prog, cluster, sim.peak_flops());
  {
    const std::optional<spec::Straggler>& s = cluster.straggler;
    int64_t others = 0;
    for (const RankRecord& r : run.ranks) {
      if (s && spec::computes_slowly(*s, r.rank, cluster.gpus_per_node)) continue;
      ++others;
      for (int l = 0; l < program::kLaneCount; ++l) {
        result.others_wait_s[static_cast<std::size_t>(l)] += static_cast<double>(r.waited_ns[static_cast<std::size_t>(l)]) * 1e-9;
      }
    }
    for (double& w : result.others_wait_s) w = others > 0 ? w / static_cast<double>(others) : 0.0;
  }
  result.rank_peaks.reserve(run.ranks.size());
  for (const RankRecord& r : run.ranks) result.rank_peaks.push_back(r.peak);
  std::sort(result.rank_peaks.begin(), result.rank_peaks.end(),
            [](const trace::MemorySample& a, const trace::MemorySample& b) { return a.rank < b.rank; });
  if (options.record_trace) {
    trace::Trace& t = result.trace;
    t.events = std::move(run.events);
    for (RankRecord& r : run.ranks) t.memory.insert(t.memory.end(), r.memory.begin(), r.memory.end());
    t.source = "simulated";
    trace::name_program(t, prog);
    t.cluster = spec::to_json(cluster);
  }
  return result;
}

ReduceBucketBase reduce_bucket_base(const SimResult& result, const program::Program& prog) {
  ReduceBucketBase b;
  b.metrics = result.metrics;
  b.rank_peaks = result.rank_peaks;
  for (const trace::MemorySample& r : result.rank_peaks) b.peak_stage_params.push_back(stage_params(prog, prog.placement.stage_of(r.rank)));
  b.zero = prog.plan.zero;
  b.dp = prog.placement.dp;
  b.param_bytes = prog.param_bytes;
  return b;
}

Metrics with_reduce_bucket(const ReduceBucketBase& base, int64_t reduce_bucket) {
  Metrics out = base.metrics;
  spec::ZeroConfig to = base.zero;
  to.reduce_bucket = reduce_bucket;
  bool any = false;
  trace::MemorySample moved;
  for (std::size_t i = 0; i < base.rank_peaks.size(); ++i) {
    const int64_t p = base.peak_stage_params[i];
    trace::MemorySample m = base.rank_peaks[i];
    m.bytes[trace::MemoryKind::kBuffers] += grad_bucket_buffer_bytes(to, base.dp, p, base.param_bytes) -
                                            grad_bucket_buffer_bytes(base.zero, base.dp, p, base.param_bytes);
    if (!any || m.total() > moved.total()) moved = m;
    any = true;
  }
  if (any) {
    out.peak_memory_bytes = moved.total();
    out.peak_rank = moved.rank;
    out.memory = moved.bytes;
  }
  out.fits = out.peak_memory_bytes <= out.capacity_bytes;
  return out;
}

double contention_free_step_s(const program::Program& prog, const spec::Cluster& cluster) {
  return contention_free_step_s(prog, cluster, std::numeric_limits<double>::infinity());
}

namespace {

double contention_free_s(const program::Program& prog, const spec::Cluster& cluster, double above, bool alone) {
  check_fits(prog, cluster);
  constexpr double kScale = 1e-9 * (1 - 1e-6);   // ns to the bound's seconds
  SimOptions o;
  o.network = NetworkModel::kContentionFree;
  o.step_time_only = true;
  o.alone = alone;
  // the first end t (ns) with t·kScale > above: every later end is past `above` too
  if (std::isfinite(above) && above >= 0 && above / kScale < 9e18) {
    o.stop_after_ns = static_cast<int64_t>(std::floor(above / kScale));
    while (static_cast<double>(o.stop_after_ns) * kScale > above) --o.stop_after_ns;
  }
  const RunRecord run = Simulation(prog, cluster, o).run();
  int64_t step_ns = 0;
  for (const RankRecord& r : run.ranks) step_ns = std::max(step_ns, r.last_end_ns);
  return static_cast<double>(step_ns) * kScale;
}

}  // namespace

double contention_free_step_s(const program::Program& prog, const spec::Cluster& cluster, double above) {
  return contention_free_s(prog, cluster, above, false);
}

double contention_free_stage_s(const program::Program& prog, const spec::Cluster& cluster, double above) {
  if (cluster.straggler) throw SimError("a stage's contention-free bound with a straggler: every rank of the stage would run");
  return contention_free_s(prog, cluster, above, true);
}

}  // namespace stagecraft::sim
