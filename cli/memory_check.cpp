#include "cli/memory_check.hpp"

#include <algorithm>
#include <iostream>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "core/program/lower.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/cluster.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::cli {

namespace {
spec::Cluster sized_cluster(const program::Program& prog, const std::string& cluster) {
  spec::Cluster c = spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, cluster));
  c.nodes = std::max<int64_t>(c.nodes, (prog.placement.world() + c.gpus_per_node - 1) / c.gpus_per_node);
  return c;
}
}  // namespace

double simulated_peak_bytes(const program::Program& prog, const std::string& cluster) {
  return static_cast<double>(sim::simulate(prog, sized_cluster(prog, cluster)).metrics.peak_memory_bytes);
}

double cuda_device_bytes(const program::Program& prog, const std::string& cluster) {
  if (prog.training.dtype == spec::Dtype::kFp32) return simulated_peak_bytes(prog, cluster);
  spec::Training fp32 = prog.training;
  fp32.dtype = spec::Dtype::kFp32;
  fp32.reduce_dtype.reset();
  const program::Program stored = program::lower(prog.model, fp32, prog.plan);
  return 1.25 * simulated_peak_bytes(stored, cluster);
}

std::string memory_shortfall(const program::Program& prog, const std::string& cluster, int64_t world,
                             const std::string& advice) {
  const spec::Cluster c = sized_cluster(prog, cluster);
  const double per_rank = static_cast<double>(sim::simulate(prog, c).metrics.peak_memory_bytes);
  const double available = host_available_bytes();
  const int64_t local = ranks_on_this_host(world);
  if (available < 0 || per_rank * static_cast<double>(local) <= available) return "";
  return "this " + std::string(prog.forward_only ? "evaluation" : "run") + " needs about " + short_bytes(per_rank) +
         " per rank (the simulator's memory model of this plan on " + c.name + "), " + std::to_string(local) +
         " rank(s) on this host need " + short_bytes(per_rank * static_cast<double>(local)) + ", and the host has " +
         short_bytes(available) + " available; " + advice;
}

bool memory_fits_everywhere(executor::Communicator& comm, const std::string& why) {
  const double anyone_short = comm.all_reduce_max(why.empty() ? 0.0 : 1.0);
  const double rank0_short = comm.all_reduce_max(comm.rank() == 0 && !why.empty() ? 1.0 : 0.0);
  if (!why.empty() && (comm.rank() == 0 || rank0_short == 0)) {
    std::cerr << "stagecraft: error: " << (comm.rank() == 0 ? "" : "rank " + std::to_string(comm.rank()) + ": ") << why
              << std::endl;
  }
  return anyone_short == 0;
}

}  // namespace stagecraft::cli
