#include "traces/probe.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include <Eigen/Dense>

namespace stagecraft::traces {

using program::Lane;
using program::Op;

namespace {

// ---------------------------------------------------------------------------------------------
// The tests: each fills in counts, input and expected output, bus factor and run.

float value(int rank, int64_t i) { return static_cast<float>(rank + 1 + i % 13); }
// Σ_q value(q, i) over n ranks: n(n+1)/2 + n·(i mod 13), exact in fp32 for the sizes used.
float sum_value(int n, int64_t i) { return static_cast<float>(n * (n + 1) / 2 + n * (i % 13)); }

struct Counts {
  int64_t send = 0, recv = 0, total = 0;  // total: fp32 elements of S
};

struct Test {
  const char* name;
  Op op;
  Lane lane;
  Counts (*counts)(int64_t bytes, int n);
  void (*fill)(int rank, int n, std::vector<float>& send, std::vector<float>& expected);
  double (*factor)(int n);
  void (*run)(ProbeComm& c, const std::vector<float>& send, std::vector<float>& recv);
};

const Test kTests[] = {
    {"all_gather", Op::kGatherParams, Lane::kDpGather,
     [](int64_t bytes, int n) {
       const int64_t per = bytes / 4 / n;
       return Counts{per, per * n, per * n};
     },
     [](int rank, int n, std::vector<float>& send, std::vector<float>& expected) {
       const int64_t per = static_cast<int64_t>(send.size());
       for (int64_t i = 0; i < per; ++i) send[static_cast<std::size_t>(i)] = value(rank, i);
       for (int q = 0; q < n; ++q) {
         for (int64_t i = 0; i < per; ++i) expected[static_cast<std::size_t>(q * per + i)] = value(q, i);
       }
     },
     [](int n) { return static_cast<double>(n - 1) / n; },
     [](ProbeComm& c, const std::vector<float>& send, std::vector<float>& recv) {
       c.all_gather(send.data(), recv.data(), static_cast<int64_t>(send.size()));
     }},
    {"reduce_scatter", Op::kReduceScatterGrads, Lane::kDpReduce,
     [](int64_t bytes, int n) {
       const int64_t per = bytes / 4 / n;
       return Counts{per * n, per, per * n};
     },
     [](int rank, int n, std::vector<float>& send, std::vector<float>& expected) {
       const int64_t per = static_cast<int64_t>(expected.size());
       for (int64_t i = 0; i < per * n; ++i) send[static_cast<std::size_t>(i)] = value(rank, i);
       for (int64_t i = 0; i < per; ++i) expected[static_cast<std::size_t>(i)] = sum_value(n, rank * per + i);
     },
     [](int n) { return static_cast<double>(n - 1) / n; },
     [](ProbeComm& c, const std::vector<float>& send, std::vector<float>& recv) {
       c.reduce_scatter(send.data(), recv.data(), static_cast<int64_t>(recv.size()));
     }},
    {"all_reduce", Op::kAllReduceGrads, Lane::kDpReduce,
     [](int64_t bytes, int) {
       const int64_t count = bytes / 4;
       return Counts{count, count, count};
     },
     [](int rank, int n, std::vector<float>& send, std::vector<float>& expected) {
       for (std::size_t i = 0; i < send.size(); ++i) send[i] = value(rank, static_cast<int64_t>(i));
       for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = sum_value(n, static_cast<int64_t>(i));
     },
     [](int n) { return 2.0 * (n - 1) / n; },
     [](ProbeComm& c, const std::vector<float>& send, std::vector<float>& recv) {
       c.all_reduce(send.data(), recv.data(), static_cast<int64_t>(send.size()));
     }},
    {"sendrecv", Op::kSendActivation, Lane::kPpSend,
     [](int64_t bytes, int) {
       const int64_t count = bytes / 4;
       return Counts{count, count, count};
     },
     [](int rank, int n, std::vector<float>& send, std::vector<float>& expected) {
       const int from = (rank - 1 + n) % n;
       for (std::size_t i = 0; i < send.size(); ++i) send[i] = value(rank, static_cast<int64_t>(i));
       for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = value(from, static_cast<int64_t>(i));
     },
     [](int) { return 1.0; },
     [](ProbeComm& c, const std::vector<float>& send, std::vector<float>& recv) {
       const int n = c.size(), r = c.rank();
       c.send_recv(send.data(), (r + 1) % n, recv.data(), (r - 1 + n) % n, static_cast<int64_t>(send.size()));
     }},
};

const Test& test_named(const std::string& name) {
  for (const Test& t : kTests) {
    if (name == t.name) return t;
  }
  std::string known;
  for (const Test& t : kTests) known += (known.empty() ? "" : ", ") + std::string(t.name);
  throw std::invalid_argument("unknown probe test \"" + name + "\" (known: " + known + ")");
}

// ---------------------------------------------------------------------------------------------
// The harness.

class Harness {
 public:
  Harness(ProbeComm& comm, const ProbeOptions& o, ProbeCompute& compute) : comm_(comm), o_(o), compute_(compute) {}

  void align_clock(const std::vector<std::string>& hosts);
  ProbeRow collective(const Test& t, int64_t bytes);
  ProbeComputeRow gemm(int64_t n, int64_t& wrong);
  ProbeComputeRow triad(int64_t bytes);
  std::vector<trace::Event>& events() { return events_; }

 private:
  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count() -
           origin_ns_;
  }
  // Runs `body` warmup + iters times after a barrier each; returns the median over the timed
  // iterations of the slowest rank's duration, recording one event per timed iteration.
  template <typename F>
  double timed(F&& body, trace::Event proto);
  // The same for a body that returns its own duration in seconds (a device's, by its events).
  template <typename F>
  double timed_by_itself(F&& body, trace::Event proto);

  ProbeComm& comm_;
  const ProbeOptions& o_;
  ProbeCompute& compute_;
  int64_t origin_ns_ = 0;
  int32_t next_id_ = 0;
  std::vector<trace::Event> events_;
};

void Harness::align_clock(const std::vector<std::string>& hosts) {
  comm_.barrier();
  const int64_t mine = now_ns();
  const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  const int64_t earliest = comm_.min(mine);
  origin_ns_ += one_host ? earliest : mine;
}

template <typename F>
double Harness::timed(F&& body, trace::Event proto) {
  return timed_by_itself(
      [&] {
        const auto t0 = std::chrono::steady_clock::now();
        body();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      },
      proto);
}

template <typename F>
double Harness::timed_by_itself(F&& body, trace::Event proto) {
  for (int i = 0; i < o_.warmup; ++i) {
    comm_.barrier();
    body();
  }
  std::vector<double> times;
  for (int i = 0; i < o_.iters; ++i) {
    comm_.barrier();
    const int64_t t0 = now_ns();
    const double seconds = body();
    trace::Event e = proto;
    e.rank = comm_.rank();
    e.instr = next_id_++;
    e.start_ns = t0;
    e.end_ns = t0 + std::llround(seconds * 1e9);
    events_.push_back(e);
    times.push_back(comm_.max(seconds));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

ProbeRow Harness::collective(const Test& t, int64_t bytes) {
  const int n = comm_.size(), r = comm_.rank();
  const Counts c = t.counts(bytes, n);
  std::vector<float> send(static_cast<std::size_t>(c.send)), expected(static_cast<std::size_t>(c.recv)),
      recv(static_cast<std::size_t>(c.recv));
  t.fill(r, n, send, expected);
  trace::Event proto;
  proto.lane = t.lane;
  proto.op = t.op;
  proto.bytes = c.total * 4;
  const double seconds = timed(
      [&] {
        t.run(comm_, send, recv);
      },
      proto);
  int64_t wrong = 0;
  for (std::size_t i = 0; i < recv.size(); ++i) wrong += recv[i] != expected[i];
  ProbeRow row;
  row.test = t.name;
  row.bytes = c.total * 4;
  row.count = c.total;
  row.time_us = seconds * 1e6;
  row.algbw_GBps = static_cast<double>(row.bytes) / seconds * 1e-9;
  row.busbw_GBps = row.algbw_GBps * t.factor(n);
  row.wrong = comm_.sum(wrong);
  return row;
}

ProbeComputeRow Harness::gemm(int64_t n, int64_t& wrong) {
  compute_.prepare_gemm(n);
  trace::Event proto;
  proto.lane = Lane::kCompute;
  proto.op = Op::kForward;
  proto.flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const double seconds = timed_by_itself([&] { return compute_.gemm(); }, proto);
  wrong += comm_.sum(compute_.gemm_wrong());
  return {"gemm", n, proto.flops, 0, seconds * 1e6, proto.flops / seconds * 1e-9};
}

ProbeComputeRow Harness::triad(int64_t bytes) {
  const int64_t n = bytes / 12;
  compute_.prepare_triad(n);
  trace::Event proto;
  proto.lane = Lane::kCompute;
  proto.op = Op::kForward;
  proto.bytes = 12 * n;
  const double seconds = timed_by_itself([&] { return compute_.triad(); }, proto);
  return {"triad", n, 0, static_cast<double>(proto.bytes), seconds * 1e6, static_cast<double>(proto.bytes) / seconds * 1e-9};
}

// Operands of the probe's GEMMs, small integers so that every product sum is exact in fp32 (and
// the operands exact in bf16): A(i, j) = (i + 2j) mod 7 - 3, B(i, j) = (2i + j) mod 5 - 2.
float gemm_a(int64_t i, int64_t j) { return static_cast<float>((i + 2 * j) % 7) - 3.0f; }
float gemm_b(int64_t i, int64_t j) { return static_cast<float>((2 * i + j) % 5) - 2.0f; }

class CpuCompute final : public ProbeCompute {
 public:
  std::string dtype() const override { return "fp32"; }
  std::string device() const override { return "cpu (Eigen)"; }
  double gemm_bytes(int64_t n) const override { return 12.0 * static_cast<double>(n) * static_cast<double>(n); }
  void prepare_gemm(int64_t n) override {
    const Eigen::Index m = static_cast<Eigen::Index>(n);
    a_.resize(m, m);
    b_.resize(m, m);
    c_.setZero(m, m);
    for (Eigen::Index j = 0; j < m; ++j) {
      for (Eigen::Index i = 0; i < m; ++i) {
        a_(i, j) = gemm_a(i, j);
        b_(i, j) = gemm_b(i, j);
      }
    }
  }
  double gemm() override {
    const auto t0 = std::chrono::steady_clock::now();
    c_.noalias() = a_ * b_;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  int64_t gemm_wrong() override { return probe_gemm_wrong(c_.rows(), [&](int64_t i, int64_t j) { return c_(i, j); }); }
  void prepare_triad(int64_t elems) override {
    const std::size_t n = static_cast<std::size_t>(elems);
    ta_.assign(n, 0.0f);
    tb_.assign(n, 1.0f);
    tc_.assign(n, 2.0f);
  }
  double triad() override {
    const float s = 3.0f;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < ta_.size(); ++i) ta_[i] = tb_[i] + s * tc_[i];
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    volatile float sink = ta_.empty() ? 0.0f : ta_[ta_.size() / 2];
    (void)sink;
    return seconds;
  }

 private:
  Eigen::MatrixXf a_, b_, c_;
  std::vector<float> ta_, tb_, tc_;
};

void check_options(const ProbeOptions& o) {
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes) throw std::invalid_argument("probe: need 1 <= min_bytes <= max_bytes");
  if (o.factor < 2) throw std::invalid_argument("probe: the size factor must be at least 2");
  if (o.iters < 1 || o.warmup < 0) throw std::invalid_argument("probe: need iters >= 1 and warmup >= 0");
  for (const std::string& t : o.collectives) test_named(t);
  for (int64_t n : o.gemm_sizes) {
    if (n < 1) throw std::invalid_argument("probe: GEMM sizes must be positive");
    if (n > kMaxExactGemm) {
      throw std::invalid_argument("probe: GEMM size " + std::to_string(n) + " is above " + std::to_string(kMaxExactGemm) +
                                  ", where the check's fp32 sums stop being exact");
    }
  }
  for (int64_t b : o.stream_bytes) {
    if (b < 12) throw std::invalid_argument("probe: memory-bound pass sizes must be at least 12 bytes");
  }
}

template <typename T>
std::string to_blob(const std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
std::vector<T> from_blob(const std::string& s) {
  std::vector<T> v(s.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), s.data(), v.size() * sizeof(T));  // data() may be null when empty
  return v;
}

// ---------------------------------------------------------------------------------------------
// A world of one.

class LocalComm final : public ProbeComm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string host() const override { return "localhost"; }
  void barrier() override {}
  void all_gather(const float* in, float* out, int64_t count) override { std::copy(in, in + count, out); }
  void reduce_scatter(const float* in, float* out, int64_t count) override { std::copy(in, in + count, out); }
  void all_reduce(const float* in, float* out, int64_t count) override { std::copy(in, in + count, out); }
  void send_recv(const float* in, int, float* out, int, int64_t count) override { std::copy(in, in + count, out); }
  int64_t sum(int64_t v) override { return v; }
  double max(double v) override { return v; }
  int64_t min(int64_t v) override { return v; }
  std::vector<std::string> gather(const std::string& blob) override { return {blob}; }
  std::vector<std::string> all_gather_strings(const std::string& s) override { return {s}; }
};

}  // namespace

std::unique_ptr<ProbeComm> make_local_comm() { return std::make_unique<LocalComm>(); }

std::unique_ptr<ProbeCompute> make_cpu_compute() { return std::make_unique<CpuCompute>(); }

int64_t probe_gemm_wrong(int64_t n, const std::function<float(int64_t, int64_t)>& c) {
  int64_t wrong = 0;
  for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t want = 0;
      for (int64_t k = 0; k < n; ++k) {
        want += static_cast<int64_t>(gemm_a(i, k)) * static_cast<int64_t>(gemm_b(k, j));
      }
      wrong += c(i, j) != static_cast<float>(want);
    }
  }
  return wrong;
}

float probe_gemm_a(int64_t i, int64_t j) { return gemm_a(i, j); }
float probe_gemm_b(int64_t i, int64_t j) { return gemm_b(i, j); }

double bus_factor(const std::string& test, int n) { return test_named(test).factor(n); }

std::vector<std::string> probe_tests() {
  std::vector<std::string> out;
  for (const Test& t : kTests) out.emplace_back(t.name);
  return out;
}

ProbeResult run_probe(ProbeComm& comm, const ProbeOptions& o, ProbeCompute* compute) {
  check_options(o);
  std::unique_ptr<ProbeCompute> cpu;
  if (compute == nullptr) {
    cpu = make_cpu_compute();
    compute = cpu.get();
  }
  ProbeResult r;
  r.world = comm.size();
  r.dtype = compute->dtype();
  r.device = compute->device();
  const std::vector<std::string> hosts = comm.all_gather_strings(comm.host());
  Harness h(comm, o, *compute);
  h.align_clock(hosts);
  for (int64_t n : o.gemm_sizes) r.compute.push_back(h.gemm(n, r.wrong));
  for (int64_t b : o.stream_bytes) r.compute.push_back(h.triad(b));
  for (const std::string& name : o.collectives) {
    const Test& t = test_named(name);
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      if (t.counts(bytes, r.world).total == 0) continue;
      r.rows.push_back(h.collective(t, bytes));
      r.wrong += r.rows.back().wrong;
    }
  }
  const std::vector<std::string> blobs = comm.gather(to_blob(h.events()));
  if (comm.rank() == 0) {
    trace::Trace t;
    t.source = "measured";
    for (const std::string& b : blobs) {
      for (const trace::Event& e : from_blob<trace::Event>(b)) t.events.push_back(e);
    }
    const nlohmann::json meta = {
        {"probe",
         {{"world", r.world}, {"hosts", hosts}, {"dtype", r.dtype}, {"device", r.device}, {"tool", "stagecraft probe"},
          {"iters", o.iters}, {"warmup", o.warmup}}}};
    r.trace = from_core(t, "<probe>", meta);
  }
  return r;
}

std::string format_table(const ProbeResult& r) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "# stagecraft probe: %d rank%s, collectives in fp32, nccl-tests conventions (time: median over iterations of "
                "the slowest rank)\n# compute rows: %s, GEMMs in %s\n#\n",
                r.world, r.world == 1 ? "" : "s", r.device.c_str(), r.dtype.c_str());
  out += line;
  out += "#  test                size         count    type   redop     time    algbw    busbw  #wrong\n";
  out += "#                       (B)    (elements)                     (us)   (GB/s)   (GB/s)\n";
  double busbw = 0;
  for (const ProbeRow& row : r.rows) {
    const char* redop = row.test == "all_reduce" || row.test == "reduce_scatter" ? "sum" : "none";
    std::snprintf(line, sizeof line, "   %-14s %10lld %13lld   float %7s %8.2f %8.3f %8.3f %7lld\n", row.test.c_str(),
                  static_cast<long long>(row.bytes), static_cast<long long>(row.count), redop, row.time_us, row.algbw_GBps,
                  row.busbw_GBps, static_cast<long long>(row.wrong));
    out += line;
    busbw += row.busbw_GBps;
  }
  std::snprintf(line, sizeof line, "# Out of bounds values : %lld %s\n# Avg bus bandwidth    : %.4f\n#\n",
                static_cast<long long>(r.wrong), r.wrong == 0 ? "OK" : "FAILED",
                r.rows.empty() ? 0.0 : busbw / static_cast<double>(r.rows.size()));
  out += line;
  out += "#  test        size (m=n=k | elements)        FLOPs        bytes      time        rate\n";
  out += "#                                                                     (us)   (GFLOP/s | GB/s)\n";
  for (const ProbeComputeRow& c : r.compute) {
    std::snprintf(line, sizeof line, "   %-8s %14lld %22.4g %12.4g %9.2f %11.3f\n", c.test.c_str(), static_cast<long long>(c.size),
                  c.flops, c.bytes, c.time_us, c.rate);
    out += line;
  }
  return out;
}

}  // namespace stagecraft::traces
