// stagecraft probe [--min-bytes B] [--max-bytes B] [--factor F] [--tests ...] [--gemm N,...]
//                  [--backend cpu|cuda] [--trace probe.json]: nccl-tests-style microbenchmarks
// under mpirun (traces/probe.hpp). Rank 0 prints the table and writes the trace; every rank exits 1
// when any element came out wrong. --backend cuda runs the GEMM and memory rows on the GPU
// (cli/cuda_link.hpp), with sizes for a GPU unless --gemm / --stream are given.
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>

#include "cli/checks.hpp"
#include "cli/common.hpp"
#include "cli/probe_comm.hpp"
#include "cli/cuda_link.hpp"
#include "core/spec/json_reader.hpp"
#include "traces/probe.hpp"

namespace stagecraft::cli {

namespace {

struct ProbeArgs {
  std::string min_bytes = "8", max_bytes = "64MiB", trace, backend = "cpu";
  std::vector<std::string> stream = {"1MiB", "4MiB", "16MiB", "64MiB"};
  traces::ProbeOptions options;
  bool gemm_given = false, stream_given = false;
};

// GPU sizes: GEMMs from where launch cost still shows to the 8192^3 reference, passes well past
// an H100/H200's 50-60 MB L2.
const std::vector<int64_t> kGpuGemmSizes = {1024, 2048, 4096, 6144, 8192};
const std::vector<std::string> kGpuStream = {"256MiB", "1GiB", "4GiB"};

int64_t bytes_of(const std::string& option, const std::string& text) {
  const std::optional<double> v = spec::parse_quantity(text, spec::Quantity::kBytes);
  if (!v || *v < 1) throw std::invalid_argument(option + " " + text + ": expected a byte size such as 8, 4096, 1MiB or 64MB");
  return static_cast<int64_t>(*v);
}

int run_probe(ProbeArgs a) {
  std::unique_ptr<traces::ProbeCompute> compute;
  if (a.backend == "cuda") {
    std::string why;
    compute = make_cuda_probe_compute(why);
    if (!compute) {
      std::cerr << "stagecraft: error: --backend cuda: " << why << "\n";
      return kBadInput;
    }
    if (!a.gemm_given) a.options.gemm_sizes = kGpuGemmSizes;
    if (!a.stream_given) a.stream = kGpuStream;
  } else {
    compute = traces::make_cpu_compute();
  }
  try {
    a.options.min_bytes = bytes_of("--min-bytes", a.min_bytes);
    a.options.max_bytes = bytes_of("--max-bytes", a.max_bytes);
    a.options.stream_bytes.clear();
    for (const std::string& s : a.stream) a.options.stream_bytes.push_back(bytes_of("--stream", s));
  } catch (const std::invalid_argument& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return kBadInput;
  }
  std::unique_ptr<traces::ProbeComm> comm = make_mpi_probe_comm();
  if (!comm) {
    std::cerr << "stagecraft: this build has no MPI (STAGECRAFT_WITH_MPI=OFF): probing a world of one rank\n";
    comm = traces::make_local_comm();
  }
  // The largest buffers one rank allocates: three n x n fp32 matrices per GEMM, a stream pass's
  // three arrays, a collective's send, receive and expected buffers (an all-gather receives
  // world x the send). Refused before allocating when this host cannot give them.
  // With --backend cuda the compute rows' buffers are on the device (a failed allocation there
  // says so); the host then holds only the collectives' buffers.
  double need = 0;
  if (a.backend == "cpu") {
    for (int64_t n : a.options.gemm_sizes) need = std::max(need, compute->gemm_bytes(n));
    for (int64_t b : a.options.stream_bytes) need = std::max(need, static_cast<double>(b));
  }
  need = std::max(need, 3.0 * static_cast<double>(a.options.max_bytes) * static_cast<double>(comm->size()));
  const double available = host_available_bytes();
  const int64_t local = ranks_on_this_host(comm->size());
  if (available > 0 && need * static_cast<double>(local) > available) {
    if (comm->rank() == 0) {
      std::cerr << "stagecraft: error: the probe needs about " << short_bytes(need) << " per rank (" << local
                << " on this host), and the host has " << short_bytes(available)
                << " available; use smaller --gemm, --stream or --max-bytes\n";
    }
    return kBadInput;
  }
  traces::ProbeResult r;
  try {
    r = traces::run_probe(*comm, a.options, compute.get());
  } catch (const std::invalid_argument& e) {
    std::cerr << "stagecraft: error: " << e.what() << "\n";
    return kBadInput;
  } catch (const std::runtime_error& e) {  // the device's (executor::ExecutorError)
    std::cerr << "stagecraft: error: rank " << comm->rank() << ": " << e.what() << "\n";
    return kImpossible;
  }
  if (comm->rank() == 0) {
    std::cout << traces::format_table(r) << std::flush;
    if (!a.trace.empty()) {
      traces::write_stagecraft(r.trace, a.trace);
      std::cerr << "stagecraft: wrote " << a.trace << "\n";
    }
    if (r.wrong > 0) std::cerr << "stagecraft: error: " << r.wrong << " wrong elements\n";
  }
  return r.wrong > 0 ? kImpossible : kOk;
}

}  // namespace

Subcommand add_probe(CLI::App& root) {
  auto args = std::make_shared<ProbeArgs>();
  traces::ProbeOptions& o = args->options;
  CLI::App* app = root.add_subcommand(
      "probe", "Microbenchmarks under mpirun (GEMM sweep, memory pass, all-gather / reduce-scatter / all-reduce / "
               "send-recv sweeps) printed nccl-tests style and written as a trace calibrate accepts");
  app->add_option("-b,--min-bytes", args->min_bytes, "smallest message (nccl-tests -b)")->capture_default_str();
  app->add_option("-e,--max-bytes", args->max_bytes, "largest message (nccl-tests -e)")->capture_default_str();
  app->add_option("-f,--factor", o.factor, "size multiplier between steps (nccl-tests -f)")->capture_default_str();
  app->add_option("-n,--iters", o.iters, "timed iterations per size")->capture_default_str();
  app->add_option("-w,--warmup", o.warmup, "untimed iterations per size")->capture_default_str();
  app->add_option("--tests", o.collectives, "collectives to run")->delimiter(',')->capture_default_str();
  app->add_option("--gemm", o.gemm_sizes, "GEMM sizes m = n = k (empty: none)")->delimiter(',')->capture_default_str();
  app->add_option("--stream", args->stream, "memory-bound pass sizes in bytes")->delimiter(',')->capture_default_str();
  app->add_option("--backend", args->backend, "where the GEMM and memory rows run: cpu (Eigen, fp32) or cuda (cuBLASLt, bf16)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app->add_option("--trace", args->trace, "write the measured trace here (for stagecraft calibrate)")->check(writable_file());
  return {app, [args, app]() {
            args->gemm_given = app->count("--gemm") > 0;
            args->stream_given = app->count("--stream") > 0;
            return run_probe(*args);
          }};
}

}  // namespace stagecraft::cli
