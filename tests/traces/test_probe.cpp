// The probe harness on a world of one rank (the MPI run is a CTest under mpirun): every test
// runs, checks exactly, prints the nccl-tests table and writes a trace calibrate reads; a
// communicator that corrupts one element is caught.
#include "traces/probe.hpp"

#include <gtest/gtest.h>

#include "traces/calibrate/samples.hpp"
#include "sim/cluster_fixture.hpp"

namespace stagecraft::traces {
namespace {

ProbeOptions small() {
  ProbeOptions o;
  o.min_bytes = 8;
  o.max_bytes = 4096;
  o.factor = 8;  // 8, 64, 512, 4096
  o.warmup = 1;
  o.iters = 3;
  o.gemm_sizes = {16, 32};
  o.stream_bytes = {1200};
  return o;
}

TEST(Probe, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor("all_gather", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor("reduce_scatter", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor("sendrecv", 8), 1.0);
  EXPECT_THROW(bus_factor("broadcast", 8), std::invalid_argument);
}

TEST(Probe, AWorldOfOneRunsEveryTestWithoutWrongElements) {
  auto comm = make_local_comm();
  const ProbeOptions o = small();
  const ProbeResult r = run_probe(*comm, o);
  EXPECT_EQ(r.wrong, 0);
  ASSERT_EQ(r.rows.size(), 4u * 4u);  // 4 tests × sizes 8, 64, 512, 4096
  for (const ProbeRow& row : r.rows) {
    EXPECT_EQ(row.count, row.bytes / 4);
    EXPECT_GT(row.time_us, 0);
    // n = 1: nothing crosses a link except send/recv (factor 1)
    EXPECT_DOUBLE_EQ(row.busbw_GBps, row.test == "sendrecv" ? row.algbw_GBps : 0.0) << row.test;
  }
  ASSERT_EQ(r.compute.size(), 3u);
  EXPECT_EQ(r.compute[0].flops, 2.0 * 16 * 16 * 16);
  EXPECT_EQ(r.compute[2].bytes, 1200.0);  // triad: 100 elements × 12 bytes
  const std::string table = format_table(r);
  EXPECT_NE(table.find("#wrong"), std::string::npos);
  EXPECT_NE(table.find("busbw"), std::string::npos);
  EXPECT_NE(table.find("Out of bounds values : 0 OK"), std::string::npos);
  // One event per timed iteration: (2 GEMMs + 1 triad + 16 rows) × 3 iterations.
  EXPECT_EQ(r.trace.data.events.size(), (2u + 1u + 16u) * 3u);
  EXPECT_TRUE(r.trace.is_probe());
  // calibrate reads it: GEMMs and the triad are compute samples, collectives link samples
  // (none here: a world of one moves nothing), the send/recv to itself a p2p sample.
  spec::Cluster c = test::make_cluster();
  c.gpu.peak_flops = {{spec::Dtype::kFp32, 1e11}};
  c.gpu.matmul_efficiency = {{1e6, 0.5}};
  Samples s;
  add_trace_samples(r.trace, c, std::nullopt, s);
  EXPECT_EQ(s.compute.size(), 3u * 3u);
  EXPECT_EQ(s.traces[0].kind, "probe");
}

// all_reduce adds one to its first element: every all_reduce row has exactly one wrong element.
class CorruptingComm final : public ProbeComm {
 public:
  explicit CorruptingComm(std::unique_ptr<ProbeComm> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string host() const override { return inner_->host(); }
  void barrier() override { inner_->barrier(); }
  void all_gather(const float* in, float* out, int64_t n) override { inner_->all_gather(in, out, n); }
  void reduce_scatter(const float* in, float* out, int64_t n) override { inner_->reduce_scatter(in, out, n); }
  void all_reduce(const float* in, float* out, int64_t n) override {
    inner_->all_reduce(in, out, n);
    out[0] += 1.0f;
  }
  void send_recv(const float* in, int to, float* out, int from, int64_t n) override { inner_->send_recv(in, to, out, from, n); }
  int64_t sum(int64_t v) override { return inner_->sum(v); }
  double max(double v) override { return inner_->max(v); }
  int64_t min(int64_t v) override { return inner_->min(v); }
  std::vector<std::string> gather(const std::string& b) override { return inner_->gather(b); }
  std::vector<std::string> all_gather_strings(const std::string& s) override { return inner_->all_gather_strings(s); }

 private:
  std::unique_ptr<ProbeComm> inner_;
};

TEST(Probe, WrongElementsAreCounted) {
  CorruptingComm comm(make_local_comm());
  ProbeOptions o = small();
  o.collectives = {"all_reduce", "all_gather"};
  const ProbeResult r = run_probe(comm, o);
  EXPECT_EQ(r.wrong, 4);  // 4 all_reduce sizes, one wrong element each
  for (const ProbeRow& row : r.rows) EXPECT_EQ(row.wrong, row.test == "all_reduce" ? 1 : 0);
  EXPECT_NE(format_table(r).find("Out of bounds values : 4 FAILED"), std::string::npos);
}

// The GEMM check against the exact integer product: n = 4, rows 0, 2 and 3 checked. Row 0 of
// A is (i + 2j) mod 7 - 3 = -3, -1, 1, 3; column 0 of B is (2i) mod 5 - 2 = -2, 0, 2, -1, so
// C(0, 0) = 6 + 0 + 2 - 3 = 5.
TEST(Probe, TheGemmCheckCountsElementsThatDifferFromTheExactProduct) {
  EXPECT_EQ(probe_gemm_a(0, 3), 3.0f);
  EXPECT_EQ(probe_gemm_b(3, 0), -1.0f);
  auto exact = [](int64_t i, int64_t j) {
    float c = 0;
    for (int64_t k = 0; k < 4; ++k) c += probe_gemm_a(i, k) * probe_gemm_b(k, j);
    return c;
  };
  EXPECT_EQ(exact(0, 0), 5.0f);
  EXPECT_EQ(probe_gemm_wrong(4, exact), 0);
  EXPECT_EQ(probe_gemm_wrong(4, [&](int64_t i, int64_t j) { return exact(i, j) + (i == 2 && j == 1 ? 1.0f : 0.0f); }), 1);
  EXPECT_EQ(probe_gemm_wrong(4, [&](int64_t i, int64_t j) { return exact(i, j) + (i == 1 ? 1.0f : 0.0f); }), 0)
      << "row 1 is not sampled";
}

// A compute that reports its own durations (as a device timed by events does): the rows and the
// trace carry those, not the host's clock, and the trace header names its dtype and device.
class FixedCompute final : public ProbeCompute {
 public:
  std::string dtype() const override { return "bf16"; }
  std::string device() const override { return "fixed test device"; }
  double gemm_bytes(int64_t n) const override { return 8.0 * static_cast<double>(n * n); }
  void prepare_gemm(int64_t n) override { n_ = n; }
  double gemm() override { return 1e-3 * static_cast<double>(n_); }  // 1 ms per unit of n
  int64_t gemm_wrong() override { return n_ == 32 ? 2 : 0; }
  void prepare_triad(int64_t) override {}
  double triad() override { return 2e-6; }

 private:
  int64_t n_ = 0;
};

TEST(Probe, AComputeTimesItselfAndNamesItsDtype) {
  auto comm = make_local_comm();
  ProbeOptions o = small();
  o.collectives = {"sendrecv"};
  FixedCompute compute;
  const ProbeResult r = run_probe(*comm, o, &compute);
  ASSERT_EQ(r.compute.size(), 3u);
  EXPECT_DOUBLE_EQ(r.compute[0].time_us, 16e3);                          // n = 16: 16 ms
  EXPECT_DOUBLE_EQ(r.compute[1].rate, 2.0 * 32 * 32 * 32 / 32e-3 * 1e-9);  // FLOPs / 32 ms, in GFLOP/s
  EXPECT_DOUBLE_EQ(r.compute[2].rate, 1200.0 / 2e-6 * 1e-9);
  EXPECT_EQ(r.wrong, 2) << "the n = 32 GEMM's wrong elements count";
  EXPECT_EQ(r.trace.meta["probe"]["dtype"], "bf16");
  EXPECT_EQ(r.trace.meta["probe"]["device"], "fixed test device");
  const trace::Event& first = r.trace.data.events.at(0);
  EXPECT_EQ(first.end_ns - first.start_ns, 16000000);
  EXPECT_NE(format_table(r).find("fixed test device, GEMMs in bf16"), std::string::npos);
}

TEST(Probe, BadOptionsAreRefused) {
  auto comm = make_local_comm();
  ProbeOptions o = small();
  o.collectives = {"broadcast"};
  EXPECT_THROW(run_probe(*comm, o), std::invalid_argument);
  o = small();
  o.factor = 1;
  EXPECT_THROW(run_probe(*comm, o), std::invalid_argument);
  o = small();
  o.gemm_sizes = {kMaxExactGemm + 1};  // the check's sums would no longer be exact
  EXPECT_THROW(run_probe(*comm, o), std::invalid_argument);
}

}  // namespace
}  // namespace stagecraft::traces
