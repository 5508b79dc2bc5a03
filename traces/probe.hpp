// stagecraft probe: nccl-tests-style microbenchmarks whose results calibrate a cluster profile.
// One harness, one small descriptor per test (nccl-tests' shape): each collective fills in its
// element counts, its input and expected output, its bus-bandwidth factor and how to run it; the
// harness owns warm-up, timing, checking and the table, and counts wrong elements.
//   sizes     S = min_bytes, ·factor, ... ≤ max_bytes (nccl-tests -b/-e/-f), S the full buffer:
//             the gathered output of an all-gather, the input of a reduce-scatter, the buffer of
//             an all-reduce, the message of a send/recv; counts of fp32 elements, rounded down
//             to a multiple of n where the collective splits the buffer
//   time      per iteration: barrier, then t = max over ranks of the rank's own duration; the
//             table shows the median over `iters` iterations after `warmup` untimed ones
//   algbw     S / t,  busbw = algbw · F,  F = 2(n−1)/n all-reduce, (n−1)/n all-gather and
//             reduce-scatter, 1 send/recv (nccl-tests doc/PERFORMANCE.md)
//   #wrong    elements that differ from the expected output, summed over ranks. Inputs are
//             small integers, x_r[i] = r + 1 + (i mod 13), so every sum is exact in fp32 and the
//             check is equality.
//   GEMM      C = A·B, m = n = k over `gemm_sizes` (2·m·n·k FLOPs), every rank at once; a
//             memory-bound pass (triad a = b + s·c over `stream_bytes`: 12 bytes per element
//             moved) for the memory throughput. Both run on a ProbeCompute: the host CPU (Eigen,
//             fp32) by default, or a device the command line provides (cli/probe_compute.hpp);
//             its GEMM dtype is the trace header's "dtype".
// Trace (Stagecraft schema, source "measured", header "probe": {world, hosts, dtype}): every
// timed iteration on every rank is an event with a shared id — GEMM and triad as Forward (FLOPs,
// or bytes with no FLOPs), all-gather as GatherParams, reduce-scatter as ReduceScatterGrads,
// all-reduce as AllReduceGrads, send/recv as SendActivation to rank (r+1) mod n, with S in bytes.
// `stagecraft calibrate` reads it (calibrate/samples.hpp).
// The communicator is an interface: a world of one here (tests, builds without MPI), MPI_COMM_WORLD
// in the command line (cli/probe_comm_mpi.cpp), which may join this harness and the MPI utility.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "traces/io/trace_io.hpp"

namespace stagecraft::traces {

class ProbeComm {
 public:
  virtual ~ProbeComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string host() const = 0;
  virtual void barrier() = 0;
  // fp32; counts per rank's part where the collective splits the buffer
  virtual void all_gather(const float* in, float* out, int64_t count_per_rank) = 0;
  virtual void reduce_scatter(const float* in, float* out, int64_t count_per_rank) = 0;  // sum
  virtual void all_reduce(const float* in, float* out, int64_t count) = 0;               // sum
  virtual void send_recv(const float* in, int to, float* out, int from, int64_t count) = 0;
  virtual int64_t sum(int64_t v) = 0;
  virtual double max(double v) = 0;
  virtual int64_t min(int64_t v) = 0;
  // Every rank's blob, on rank 0 (others get an empty list).
  virtual std::vector<std::string> gather(const std::string& blob) = 0;
  virtual std::vector<std::string> all_gather_strings(const std::string& s) = 0;
};

// A world of one rank: collectives copy, send/recv to itself.
std::unique_ptr<ProbeComm> make_local_comm();

// Where the GEMM and memory-bound rows run. Each run returns its own duration in seconds, timed
// by the implementation (host clock, or device events for a device that runs asynchronously), and
// the harness places it on the trace clock at the moment it started the run.
class ProbeCompute {
 public:
  virtual ~ProbeCompute() = default;
  virtual std::string dtype() const = 0;   // of the GEMM operands: "fp32", "bf16"
  virtual std::string device() const = 0;  // for the table's header
  // The largest buffers one rank allocates for `n` (m = n = k) or a `bytes` pass.
  virtual double gemm_bytes(int64_t n) const = 0;
  virtual void prepare_gemm(int64_t n) = 0;
  virtual double gemm() = 0;
  // Elements of the prepared GEMM's result that differ from C = A·B (operands are small integers
  // so the products are exact; the implementation checks a sample of rows and columns).
  virtual int64_t gemm_wrong() = 0;
  virtual void prepare_triad(int64_t elems) = 0;
  virtual double triad() = 0;
};

// The host CPU: Eigen GEMMs and a triad loop in fp32.
std::unique_ptr<ProbeCompute> make_cpu_compute();

// The GEMM operands every ProbeCompute uses, A(i, j) and B(i, j) (column index j), and the check:
// elements of rows 0, n/2 and n-1 of `c(i, j)` that differ from the exact product. Exact up to
// kMaxExactGemm (|sum| <= 6n < 2^24), which check_options enforces.
inline constexpr int64_t kMaxExactGemm = 1 << 21;
float probe_gemm_a(int64_t i, int64_t j);
float probe_gemm_b(int64_t i, int64_t j);
int64_t probe_gemm_wrong(int64_t n, const std::function<float(int64_t, int64_t)>& c);

struct ProbeOptions {
  int64_t min_bytes = 8;
  int64_t max_bytes = 64 << 20;
  int64_t factor = 2;
  int warmup = 2;
  int iters = 5;
  std::vector<std::string> collectives = {"all_gather", "reduce_scatter", "all_reduce", "sendrecv"};
  std::vector<int64_t> gemm_sizes = {64, 128, 256, 384, 512, 768, 1024};
  std::vector<int64_t> stream_bytes = {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20, int64_t{64} << 20};
};

struct ProbeRow {
  std::string test;       // "all_reduce", ...
  int64_t bytes = 0;
  int64_t count = 0;      // fp32 elements of S
  double time_us = 0;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  int64_t wrong = 0;
};

struct ProbeComputeRow {
  std::string test;       // "gemm" | "triad"
  int64_t size = 0;       // m = n = k, or elements
  double flops = 0;
  double bytes = 0;
  double time_us = 0;
  double rate = 0;        // GFLOP/s or GB/s
};

struct ProbeResult {
  int world = 1;
  std::string dtype = "fp32";   // the GEMMs'
  std::string device = "cpu";   // where the compute rows ran
  std::vector<ProbeComputeRow> compute;
  std::vector<ProbeRow> rows;
  int64_t wrong = 0;      // over all rows and ranks
  Trace trace;            // rank 0 holds every rank's events
};

// Collective over `comm`: every rank calls it. Throws std::invalid_argument for bad options.
// `compute` runs the GEMM and memory rows (the CPU when null).
ProbeResult run_probe(ProbeComm& comm, const ProbeOptions& options, ProbeCompute* compute = nullptr);

// nccl-tests' table (and the compute rows), with the "#wrong" column and the summary lines.
std::string format_table(const ProbeResult& r);

double bus_factor(const std::string& test, int n);
std::vector<std::string> probe_tests();   // the collective names run_probe knows

}  // namespace stagecraft::traces
