// Executor step benchmark (run it with bench/executor_step.sh, under mpirun -n 2): trains a
// 4-layer GPT of hidden 256 on the CPU executor with 2 ranks and reports, for rank 0,
//  * the step time and tokens/s, and the share of the step spent in GEMMs (the units' linears
//    and the head's logits, timed by executor/model/gemm_profile.hpp);
//  * the GEMM throughput inside the step against the same GEMMs (same shapes, forms and counts)
//    run standalone on warm buffers, twice: with the other rank idle, and with the other rank
//    running GEMMs too (as it does during a data-parallel step: two ranks on two cores share
//    caches and memory bandwidth, and on a VM possibly one physical core). The ratio says what
//    the step's data flow costs the GEMMs (goal: >= 80%).
// Options: --plan pp2 | dp2 (default pp2: 2 stages, 1F1B, 4 micro-batches of 2 sequences;
// dp2: 2 data-parallel ranks with ZeRO-1), --steps N (default 10, after 2 warm-up steps).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <mpi.h>

#include "core/program/lower.hpp"
#include "executor/comm/mpi.hpp"
#include "executor/model/gemm_profile.hpp"
#include "executor/model/ops.hpp"
#include "executor/runner.hpp"
#include "mpi/session.hpp"

namespace sc = stagecraft;
using sc::executor::GemmForm;
using sc::executor::GemmShape;

namespace {

sc::spec::Model bench_model() {
  sc::spec::Model m;
  m.name = "bench-4l-h256";
  m.layers = 4, m.hidden = 256, m.heads = 4, m.kv_heads = 4, m.ffn_hidden = 1024, m.vocab = 256, m.seq_len = 128;
  return m;  // GPT defaults: gelu, LayerNorm, learned positions, tied embeddings, biases
}

sc::spec::Plan bench_plan(const std::string& which) {
  sc::spec::Plan p;
  if (which == "dp2") {
    p.dp = 2, p.micro_batch = 2, p.micro_batches = 2;
    p.zero.stage = 1;
  } else {
    p.pp = 2, p.micro_batch = 2, p.micro_batches = 4;
  }
  return p;
}

// Seconds per call of one GEMM shape run alone (same Eigen expression as the units'), warm.
double standalone_seconds(const GemmShape& s) {
  using Map = sc::executor::ops::MatMap<float>;
  using CMap = sc::executor::ops::ConstMatMap<float>;
  const int64_t a_rows = s.form == GemmForm::kTN ? s.k : s.m, a_cols = s.form == GemmForm::kTN ? s.m : s.k;
  const int64_t b_rows = s.form == GemmForm::kNT ? s.n : s.k, b_cols = s.form == GemmForm::kNT ? s.k : s.n;
  std::mt19937 gen(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(a_rows * a_cols)), b(static_cast<std::size_t>(b_rows * b_cols)),
      c(static_cast<std::size_t>(s.m * s.n), 0.0f);
  for (float& x : a) x = dist(gen);
  for (float& x : b) x = dist(gen);
  CMap am(a.data(), a_rows, a_cols), bm(b.data(), b_rows, b_cols);
  Map cm(c.data(), s.m, s.n);
  auto once = [&] {
    switch (s.form) {
      case GemmForm::kNN:
        if (s.accumulate) cm.noalias() += am * bm; else cm.noalias() = am * bm;
        break;
      case GemmForm::kNT:
        if (s.accumulate) cm.noalias() += am * bm.transpose(); else cm.noalias() = am * bm.transpose();
        break;
      case GemmForm::kTN:
        if (s.accumulate) cm.noalias() += am.transpose() * bm; else cm.noalias() = am.transpose() * bm;
        break;
    }
  };
  for (int i = 0; i < 3; ++i) once();
  int64_t reps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < 0.05 || reps < 5) {
    once();
    ++reps;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return elapsed / static_cast<double>(reps);
}

const char* form_name(GemmForm f) { return f == GemmForm::kNN ? "NN" : f == GemmForm::kNT ? "NT" : "TN"; }

// A barrier every rank enters with MPI_Ibarrier (non-blocking and blocking collectives never
// match each other); `work` runs repeatedly until it completes.
template <typename F>
void barrier_while(F&& work) {
  MPI_Request barrier;
  MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
  int done = 0;
  while (!done) {
    work();
    MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
  }
}

// Standalone seconds per call of every profiled shape on rank 0; the other ranks idle in a
// barrier (peer_busy false) or run GEMMs meanwhile (peer_busy true).
std::vector<double> replay(const sc::executor::GemmProfile& prof, bool rank0, bool peer_busy) {
  std::vector<double> out;
  if (rank0) {
    for (const auto& [s, st] : prof.by_shape()) out.push_back(standalone_seconds(s));
    barrier_while([] {});
  } else if (peer_busy) {
    barrier_while([] { standalone_seconds({GemmForm::kNN, 256, 256, 1024, false}); });
  } else {
    barrier_while([] {});
  }
  return out;
}

void report(const sc::executor::GemmProfile& prof, const std::vector<double>& idle, const std::vector<double>& busy,
            double step_seconds, double compute_seconds, int steps, const sc::program::Program& prog) {
  const double tokens = static_cast<double>(prog.training.global_batch * prog.model.seq_len);
  std::printf("model %s (%lld layers, hidden %lld, seq %lld), %s, %d measured steps\n", prog.model.name.c_str(),
              static_cast<long long>(prog.model.layers), static_cast<long long>(prog.model.hidden),
              static_cast<long long>(prog.model.seq_len), sc::spec::summary(prog.plan).c_str(), steps);
  std::printf("step %.2f ms, %.0f tokens/s; rank 0: compute instructions %.1f%% of the step, GEMMs %.1f%% of the step\n",
              1e3 * step_seconds / steps, tokens * steps / step_seconds, 100 * compute_seconds / step_seconds,
              100 * prof.seconds() / step_seconds);
  std::printf("%-4s %6s %6s %6s %4s %6s %10s %12s %12s\n", "form", "m", "k", "n", "acc", "calls", "step GF/s",
              "alone GF/s", "loaded GF/s");
  double idle_total = 0, busy_total = 0;
  std::size_t i = 0;
  for (const auto& [s, st] : prof.by_shape()) {
    const double calls = static_cast<double>(st.calls), flops = s.flops() * calls;
    idle_total += idle[i] * calls;
    busy_total += busy[i] * calls;
    std::printf("%-4s %6lld %6lld %6lld %4s %6lld %10.2f %12.2f %12.2f\n", form_name(s.form), static_cast<long long>(s.m),
                static_cast<long long>(s.k), static_cast<long long>(s.n), s.accumulate ? "+=" : "=",
                static_cast<long long>(st.calls), flops / st.seconds / 1e9, flops / (idle[i] * calls) / 1e9,
                flops / (busy[i] * calls) / 1e9);
    ++i;
  }
  const double in_step = prof.flops() / prof.seconds();
  const double alone = prof.flops() / idle_total, loaded = prof.flops() / busy_total;
  std::printf("GEMM throughput inside the step %.2f GFLOP/s; standalone %.2f GFLOP/s with the other rank idle (%.0f%%), "
              "%.2f GFLOP/s with it running GEMMs too (%.0f%%); goal >= 80%%\n",
              in_step / 1e9, alone / 1e9, 100 * in_step / alone, loaded / 1e9, 100 * in_step / loaded);
}

}  // namespace

int main(int argc, char** argv) {
  const sc::mpi::Session mpi(sc::mpi::ThreadLevel::kFunneled, &argc, &argv);
  std::string which = "pp2";
  int steps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--plan") == 0) which = argv[i + 1];
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  sc::spec::Training training;
  training.global_batch = 8;
  training.dtype = sc::spec::Dtype::kFp32;
  const sc::program::Program prog = sc::program::lower(bench_model(), training, bench_plan(which));
  sc::executor::MpiCommunicator comm(prog.placement);
  const sc::executor::Corpus corpus = sc::executor::Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 1);
  sc::executor::Runner runner(prog, comm, corpus, {});
  for (int i = 0; i < 2; ++i) runner.step();
  sc::executor::GemmProfile& prof = sc::executor::gemm_profile();
  prof.reset();
  prof.enable(comm.rank() == 0);
  double step_seconds = 0, compute_seconds = 0;
  for (int i = 0; i < steps; ++i) {
    const sc::executor::StepStats s = runner.step();
    step_seconds += s.seconds;
    compute_seconds += s.compute_seconds;
  }
  prof.enable(false);
  const bool rank0 = comm.rank() == 0;
  const std::vector<double> idle = replay(prof, rank0, false);
  const std::vector<double> busy = replay(prof, rank0, true);
  if (rank0) report(prof, idle, busy, step_seconds, compute_seconds, steps, prog);
  comm.barrier();
  return 0;
}
