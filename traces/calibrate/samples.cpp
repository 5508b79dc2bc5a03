#include "traces/calibrate/samples.hpp"

#include "sim/costs.hpp"
#include "sim/models/tp_overlap.hpp"

#include "core/program/comm_rules.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"
#include "traces/program_context.hpp"

namespace stagecraft::traces {

using program::Instr;
using program::Op;

namespace {

double seconds_of(const trace::Event& e) { return static_cast<double>(e.end_ns - e.start_ns) * 1e-9; }

std::string origin_of(const Trace& t, std::size_t i) {
  const trace::Event& e = t.data.events[i];
  return t.event_file(i) + ": " + t.event_pointer(i) + " (rank " + std::to_string(e.rank) + ", instr " +
         std::to_string(e.instr) + ", " + program::to_string(e.op) + ")";
}


double peak_for(const Trace& t, const spec::Cluster& c, spec::Dtype dtype) {
  const auto it = c.gpu.peak_flops.find(dtype);
  if (it == c.gpu.peak_flops.end()) {
    throw spec::SpecError(c.file, "/gpu/peak_flops",
                          std::string("no peak for ") + spec::to_string(dtype) + ", which " + t.files.at(0) + " trained in");
  }
  return it->second;
}

// A cluster with enough nodes for `gpus` GPUs (as `simulate --nodes` would size it).
spec::Cluster sized_for(const spec::Cluster& c, int64_t gpus) {
  spec::Cluster out = c;
  out.nodes = std::max(c.nodes, (gpus + c.gpus_per_node - 1) / c.gpus_per_node);
  return out;
}

// One collective across its members: the latest start and end over the members the trace holds.
struct Instance {
  sim::FrameworkWork framework;        // the framework's pieces, copies and host work
  double last_start = -std::numeric_limits<double>::infinity();
  double last_end = -std::numeric_limits<double>::infinity();
  std::size_t event = 0;               // the member that started last
  Op op = Op::kAllReduceGrads;
  int64_t bytes = 0;
  std::vector<int64_t> gpus;
};

void note_member(Instance& in, const trace::Event& e, std::size_t i) {
  const double start = static_cast<double>(e.start_ns) * 1e-9;
  if (start > in.last_start) {
    in.last_start = start;
    in.event = i;
  }
  in.last_end = std::max(in.last_end, static_cast<double>(e.end_ns) * 1e-9);
}

void add_instances(const Trace& t, const std::map<std::tuple<int32_t, int32_t, int64_t>, Instance>& instances,
                   const LinkModel& links, int64_t world, double memory_Bps, Samples& out, TraceSummary& sum) {
  for (const auto& [key, in] : instances) {
    const double seconds = in.last_end - in.last_start;
    const auto kind = sim::collective_kind(in.op);
    LinkFeatures f;
    std::optional<LinkSample::Collective> what;
    if (in.op == Op::kGradNormAllReduce) {
      f = links.gradnorm_allreduce(world);
      std::vector<int64_t> all(static_cast<std::size_t>(world));
      for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int64_t>(r);
      what = LinkSample::Collective{sim::CollectiveKind::kAllReduce, program::kGradNormBytes, all, links.topology().gpus()};
    } else if (kind && in.bytes > 0 && in.gpus.size() > 1) {
      what = LinkSample::Collective{*kind, in.bytes, in.gpus, links.topology().gpus(), in.framework.pieces,
                                    in.framework.copy_bytes, in.framework.host_s};
      f = collective_features(links, *what, memory_Bps);
    }
    if (!(seconds > 0) || f.seconds(1, 1, 1, 1) == 0) {
      ++sum.skipped;
      continue;
    }
    out.links.push_back({f, seconds, origin_of(t, in.event), std::move(what)});
    ++sum.links;
  }
}

void program_samples(const Trace& t, const spec::Cluster& base, const std::optional<spec::Training>& training,
                     Samples& out, TraceSummary& sum) {
  const ProgramContext pc = program_of(t, training);
  sum.kind = "program";
  sum.training = pc.training_origin;
  const program::Program& prog = pc.program;
  const program::Placement& pl = prog.placement;
  const double peak = peak_for(t, base, spec::storage_dtype(pc.training.dtype));
  const spec::Training run = sim::effective_training(pc.training, base);
  const sim::WorkModel work(prog.model, run, prog.plan);
  const spec::AttentionKernel* attention = sim::attention_kernel(base, run);
  const LinkModel links(sized_for(base, pl.world()), pl.world());
  const spec::FrameworkProfile framework = prog.training.framework_profile();
  const bool measured = t.data.source == "measured";
  // A simulated trace's TP collectives that an overlap shortens (sim/models/tp_overlap.hpp) last what
  // their GEMM leaves exposed, not their link time; the executor overlaps none.
  const sim::TpOverlap overlap = sim::tp_overlap_modes(prog.training, prog.plan);
  std::vector<program::UnitKind> unit_kinds;  // filled only when such collectives exist
  if (!measured && (overlap.on || overlap.async_grad)) {
    for (const program::Unit& u : program::model_units(prog.model, prog.plan.tp)) unit_kinds.push_back(u.kind);
  }
  std::map<std::tuple<int32_t, int32_t, int64_t>, Instance> instances;
  for (std::size_t i = 0; i < t.data.events.size(); ++i) {
    const trace::Event& e = t.data.events[i];
    const Instr& in = *pc.find(e.rank, e.instr);
    const double seconds = seconds_of(e);
    const int64_t bytes = e.bytes > 0 ? e.bytes : in.bytes;
    if (program::is_collective(in.op)) {
      if (!unit_kinds.empty() && in.group == program::Group::kTp && in.unit_begin >= 0 &&
          !(in.flags & program::kFlagNormGrads) &&
          sim::tp_overlapped(overlap, unit_kinds[static_cast<std::size_t>(in.unit_begin)], in.op,
                             (in.flags & program::kFlagGrad) != 0)) {
        ++sum.skipped;
        continue;
      }
      const std::vector<int64_t> members = pl.group_members(in.group, e.rank);
      Instance& inst = instances[{e.instr, t.event_step[i], members.front()}];
      inst.op = in.op;
      inst.bytes = bytes;
      inst.gpus = members;
      // A measured trace comes from Stagecraft's executor, which issues a bucket as the
      // framework's pieces (program::collective_piece_range) without the framework's copies or
      // host work; a simulated one has both.
      if (measured) {
        inst.framework.pieces = program::is_dp_group(in.group) ? std::max(prog.collectives_of(in), 1) : 1;
      } else {
        program::Instr sized = in;
        sized.bytes = bytes;
        inst.framework = sim::framework_work(prog, framework, sized, static_cast<int64_t>(members.size()));
        // an offloaded shard's PCIe copy is held fixed, like the framework's host work
        if (inst.framework.host_copy_bytes > 0) inst.framework.host_s += inst.framework.host_copy_bytes / base.host.pcie_Bps;
      }
      note_member(inst, e, i);
      continue;
    }
    if (!(seconds > 0)) {
      ++sum.skipped;
    } else if (program::is_compute(in.op)) {
      sim::Work w = work.compute(in.op, in.unit_begin, in.unit_end);
      // the framework's copy before it (a simulated trace's; the executor makes none)
      if (!measured) w.memory_bytes += static_cast<double>(in.bytes);
      const double fixed = sim::attention_seconds(w, attention, peak);
      out.compute.push_back({w, peak, seconds, origin_of(t, i), fixed});
      ++sum.compute;
    } else if (in.op == Op::kOptimizerStep && (in.flags & program::kFlagOnHost)) {
      out.adam.push_back({static_cast<double>(in.elems), seconds, origin_of(t, i)});
      ++sum.adam;
    } else if (in.op == Op::kOptimizerStep) {
      out.compute.push_back({work.optimizer_gpu(in.elems), peak, seconds, origin_of(t, i)});
      ++sum.compute;
    } else if (in.op == Op::kOffloadCopy) {
      out.pcie.push_back({static_cast<double>(bytes), seconds, origin_of(t, i)});
      ++sum.pcie;
    } else if (program::is_send(in.op)) {
      const int64_t dst = pl.rank(in.peer_stage, pl.dp_index_of(e.rank), pl.tp_index_of(e.rank));
      out.links.push_back({links.p2p(e.rank, dst, bytes), seconds, origin_of(t, i), std::nullopt});
      ++sum.links;
    } else {
      ++sum.skipped;
    }
  }
  add_instances(t, instances, links, pl.world(), base.gpu.hbm_Bps * base.gpu.memory_efficiency, out, sum);
}

// GPU of every probe rank: nodes by host in order of first appearance, local index within a host.
std::vector<int64_t> probe_gpus(const Trace& t, const spec::Cluster& base, const std::vector<std::string>& hosts,
                                int64_t& nodes) {
  std::map<std::string, std::pair<int64_t, int64_t>> seen;  // host -> (node, ranks so far)
  std::vector<int64_t> gpus;
  for (const std::string& h : hosts) {
    auto [it, fresh] = seen.try_emplace(h, static_cast<int64_t>(seen.size()), 0);
    const int64_t local = it->second.second++;
    if (local >= base.gpus_per_node) {
      throw spec::SpecError(t.files.at(0), "/stagecraft/probe/hosts",
                            "host " + h + " ran more probe ranks than the " + std::to_string(base.gpus_per_node) +
                                " GPUs per node of cluster " + base.name + " (" + base.file + ")");
    }
    gpus.push_back(it->second.first * base.gpus_per_node + local);
  }
  nodes = static_cast<int64_t>(seen.size());
  return gpus;
}

void probe_samples(const Trace& t, const spec::Cluster& base, Samples& out, TraceSummary& sum) {
  const std::string& file = t.files.at(0);
  spec::ObjectReader r(t.meta["probe"], file, "/stagecraft/probe");
  const int64_t world = r.integer("world");
  const nlohmann::json& hj = r.raw("hosts");
  if (!hj.is_array() || static_cast<int64_t>(hj.size()) != world) {
    r.fail_value("hosts", "an array of " + std::to_string(world) + " host names, one per rank");
  }
  std::vector<std::string> hosts;
  for (const auto& h : hj) hosts.push_back(h.is_string() ? h.get<std::string>() : h.dump());
  const std::string dtype_name = r.string("dtype");
  const auto dtype = spec::parse_dtype(dtype_name);
  if (!dtype) r.fail_value("dtype", "a dtype name (fp32, bf16, ...)");
  sum.kind = "probe";
  sum.training = std::string("probe, ") + spec::to_string(*dtype);
  int64_t nodes = 0;
  const std::vector<int64_t> gpus = probe_gpus(t, base, hosts, nodes);
  const double peak = peak_for(t, base, spec::storage_dtype(*dtype));
  const spec::Cluster sized = sized_for(base, nodes * base.gpus_per_node);
  const LinkModel links(sized, nodes * base.gpus_per_node);
  std::map<std::tuple<int32_t, int32_t, int64_t>, Instance> instances;
  for (std::size_t i = 0; i < t.data.events.size(); ++i) {
    const trace::Event& e = t.data.events[i];
    if (e.rank < 0 || e.rank >= world) {
      throw spec::SpecError(file, t.event_pointer(i) + "/pid", "rank outside the probe's world of " + std::to_string(world));
    }
    const double seconds = seconds_of(e);
    if (program::is_collective(e.op) && e.op != Op::kGradNormAllReduce && e.op != Op::kAllGatherParams &&
        e.op != Op::kTpAllGather) {
      Instance& inst = instances[{e.instr, t.event_step[i], 0}];
      inst.op = e.op;
      inst.bytes = e.bytes;
      inst.gpus = gpus;
      note_member(inst, e, i);
    } else if (!(seconds > 0)) {
      ++sum.skipped;
    } else if (e.op == Op::kForward && (e.flops > 0 || e.bytes > 0)) {
      sim::Work w;
      if (e.flops > 0) {
        w.add_gemm(e.flops, 1);
      } else {
        w.memory_bytes = static_cast<double>(e.bytes);
      }
      out.compute.push_back({w, peak, seconds, origin_of(t, i)});
      ++sum.compute;
    } else if (e.op == Op::kSendActivation) {
      const int64_t src = gpus[static_cast<std::size_t>(e.rank)];
      const int64_t dst = gpus[static_cast<std::size_t>((e.rank + 1) % world)];
      if (src == dst) {  // a world of one sends to itself: a device copy that crosses no link
        ++sum.skipped;
        continue;
      }
      out.links.push_back({links.p2p(src, dst, e.bytes), seconds, origin_of(t, i), std::nullopt});
      ++sum.links;
    } else {
      ++sum.skipped;
    }
  }
  add_instances(t, instances, links, world, base.gpu.hbm_Bps * base.gpu.memory_efficiency, out, sum);
}

}  // namespace

LinkFeatures collective_features(const LinkModel& links, const LinkSample::Collective& c, double memory_Bps) {
  const int32_t pieces = std::max<int32_t>(c.pieces, 1);
  LinkFeatures f = links.collective(c.kind, program::collective_piece(c.bytes, pieces), c.gpus);
  const double k = static_cast<double>(pieces);
  f.fixed_s = k * f.fixed_s + c.host_s + c.copy_bytes / memory_Bps;
  f.a_intra *= k;
  f.b_intra *= k;
  f.a_inter *= k;
  f.b_inter *= k;
  return f;
}

void add_trace_samples(const Trace& t, const spec::Cluster& base, const std::optional<spec::Training>& training,
                       Samples& out) {
  if (t.kernel_level()) {
    throw spec::SpecError(t.files.at(0), "", std::string("a ") + to_string(t.format) +
                                                 " trace gives no FLOPs or message sizes per kernel; calibrate needs "
                                                 "Stagecraft traces (simulated, measured or from stagecraft probe)");
  }
  // A trace measured on one cluster fits that cluster's profile: fitting another's from it gives
  // a profile of the wrong machine (a CPU trace made a DGX's GEMM curve non-monotonic). Simulated
  // traces may fit any profile (recovering a known truth from a guess is how calibration is tested).
  const nlohmann::json& ran_on = t.data.cluster;
  if (t.data.source == "measured" && ran_on.is_object() && ran_on.contains("name") && ran_on["name"].is_string() &&
      ran_on["name"].get<std::string>() != base.name) {
    throw spec::SpecError(t.files.at(0), "/stagecraft/cluster/name",
                          "the trace ran on cluster \"" + ran_on["name"].get<std::string>() + "\", not --cluster \"" +
                              base.name + "\" (" + base.file + "); calibrate the profile of the machine it ran on");
  }
  TraceSummary sum;
  sum.file = t.files.at(0);
  sum.source = t.data.source;
  if (t.is_probe()) {
    probe_samples(t, base, out, sum);
  } else {
    program_samples(t, base, training, out, sum);
  }
  out.traces.push_back(sum);
}

Samples samples_from_files(const std::vector<std::string>& files, const spec::Cluster& base,
                           const std::optional<spec::Training>& training) {
  Samples out;
  for (const std::string& f : files) add_trace_samples(read_trace_files({f}), base, training, out);
  return out;
}

}  // namespace stagecraft::traces
