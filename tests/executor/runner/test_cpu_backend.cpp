// CpuBackend (executor/cpu_backend.hpp), the Backend the Program interpreter runs on: its element
// moves, and its units against Layer<float> called directly on the same parameters; and StageState
// keeping every buffer in the StateMemory it is given (what lets a device backend reuse it).
#include "executor/cpu_backend.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/program/lower.hpp"
#include "core/program/units.hpp"
#include "executor/comm/local.hpp"
#include "executor/data/corpus.hpp"
#include "executor/instr_clock.hpp"
#include "executor/runner.hpp"
#include "executor/errors.hpp"
#include "executor/zero/ranges.hpp"
#include "executor/zero/stage_state.hpp"
#include "plans.hpp"
#include "support.hpp"

namespace stagecraft::executor {
namespace {

struct OneStage {
  program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), test::make_plan({.micro_batches = 8}));
  StageLayout layout{prog, 0, 0, 0};
  MemoryTracker memory;
  CpuBackend backend{layout, false, memory, false, prog.plan.micro_batches};
};

TEST(CpuBackend, BuffersStartAtZeroAndMovesCheckTheirSizes) {
  OneStage f;
  Buffer a = f.backend.alloc(4), b = f.backend.alloc(4);
  for (float v : a.view()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(a.bytes(), 16);
  f.backend.fill(a.view(), 1.5f);
  f.backend.fill(b.view().subspan(1, 2), 2.0f);  // b = 0 2 2 0
  f.backend.add(a.view(), b.view());             // a = 1.5 3.5 3.5 1.5
  EXPECT_EQ(f.backend.read(a.view(), 1), 3.5f);
  f.backend.copy(b.view().first(2), a.view().last(2));  // b = 3.5 1.5 2 0
  EXPECT_EQ(f.backend.read(b.view(), 0), 3.5f);
  EXPECT_EQ(f.backend.read(b.view(), 3), 0.0f);
  EXPECT_THROW(f.backend.copy(a.view(), b.view().first(3)), ExecutorError);
  EXPECT_THROW(f.backend.add(a.view().first(1), b.view()), ExecutorError);
  Buffer moved = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): a moved-from Buffer is empty
  EXPECT_EQ(moved.size(), 4);
}

// Every unit forward then backward through the backend, and the same calls on Layer<float> with
// the backend's own parameters: the same loss and the same gradients, bit for bit, and the slot
// idle once each cache was spent.
TEST(CpuBackend, UnitsEqualTheLayersCalledDirectly) {
  OneStage f;
  f.backend.init_params(3);
  const Corpus corpus = Corpus::synthetic(f.prog.model.vocab, f.prog.model.seq_len, 7);
  const Batch batch = corpus.sample(0, 0, f.prog.plan.micro_batch);
  const TokenBatch tb = batch.view();
  const int32_t units = program::unit_count(f.prog.model);
  const int64_t slot = 1;

  Buffer x;
  for (int32_t u = 0; u < units; ++u) x = f.backend.forward(0, u, slot, tb, x.view(), false);
  const float loss = f.backend.read(x.view(), 0);
  EXPECT_GT(f.backend.cache_bytes(), 0) << "the forward left its caches in the slot";
  Buffer dy = f.backend.alloc(1);
  f.backend.fill(dy.view(), 0.5f);
  for (int32_t u = units - 1; u >= 0; --u) dy = f.backend.backward(0, u, slot, dy.view(), false);
  EXPECT_TRUE(f.backend.slot_idle(slot));
  const std::vector<float> grads(f.backend.grads().begin(), f.backend.grads().end());

  const ParamLayout& pl = f.layout.chunk(0);
  const std::vector<float> params = f.backend.params_host();
  std::vector<float> ref_grads(params.size(), 0.0f);
  std::vector<UnitCache<float>> caches(static_cast<std::size_t>(units));
  std::vector<float> a;
  for (int32_t u = 0; u < units; ++u) {
    Layer<float> l(pl, u);
    std::vector<float> y(static_cast<std::size_t>(l.output_size(tb.dims)));
    l.forward(tb, params, a, y, caches[static_cast<std::size_t>(u)]);
    a = std::move(y);
  }
  EXPECT_EQ(a.at(0), loss);
  std::vector<float> g{0.5f};
  for (int32_t u = units - 1; u >= 0; --u) {
    Layer<float> l(pl, u);
    UnitCache<float>& c = caches[static_cast<std::size_t>(u)];
    std::vector<float> dx(static_cast<std::size_t>(l.input_size(c.dims)));
    l.backward(params, g, dx, ref_grads, c);
    g = std::move(dx);
  }
  EXPECT_EQ(grads, ref_grads);
  f.backend.clear_slot(slot);
  EXPECT_EQ(f.backend.cache_bytes(), 0);
}

// A StateMemory that records what it allocated and forwards to host memory.
class RecordingMemory final : public StateMemory {
 public:
  std::span<float> allocate(int64_t elems) override {
    std::span<float> s = host_.allocate(elems);
    blocks.push_back(s);
    return s;
  }
  void fill(std::span<float> d, float v) override { host_.fill(d, v); }
  void copy(std::span<float> d, std::span<const float> s) override { host_.copy(d, s); }
  void adamw(const AdamWConfig& c, int64_t step, const AdamWShard& sh, std::span<const Range> dec, float g) override {
    ++adamw_calls;
    host_.adamw(c, step, sh, dec, g);
  }
  void add_sum_sq(std::span<const float> v, double& sum) override { host_.add_sum_sq(v, sum); }
  void download(std::span<const float> s, std::span<float> h) override { host_.download(s, h); }
  void upload(std::span<const float> h, std::span<float> d) override { host_.upload(h, d); }
  bool holds(std::span<const float> s) const {
    for (std::span<float> b : blocks) {
      if (s.data() >= b.data() && s.data() + s.size() <= b.data() + b.size()) return true;
    }
    return false;
  }
  std::vector<std::span<float>> blocks;
  int adamw_calls = 0;

 private:
  HostMemory host_;
};

// ZeRO-3 over dp 2 with persistent tensors: params, grads, the reduced shard and the persistent
// gradients are the given storage's, the MemoryTracker counts what it allocated (params only the
// kept shard and persistent positions), and the optimizer steps through it.
TEST(StageState, KeepsEveryBufferInTheGivenStorage) {
  // persistence 100 elements: the norms and biases stay whole on every rank
  const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(),
                                               test::make_plan({.dp = 2, .micro_batches = 4, .zero = 3, .persistence = 100}));
  const StageLayout layout(prog, 0, 1, 0);
  ASSERT_GT(layout.persistent_elems(), 0);
  MemoryTracker tracker;
  RecordingMemory mem;
  StageState state(layout, false, tracker, false, &mem);
  state.init_params(5);
  for (std::span<const float> s : {std::span<const float>(state.params()), std::span<const float>(state.grads()),
                                   std::span<const float>(state.shard_grads()), std::span<const float>(state.persistent_grads())}) {
    EXPECT_TRUE(mem.holds(s));
  }
  int64_t allocated = 0;
  for (std::span<float> b : mem.blocks) allocated += static_cast<int64_t>(b.size());
  // params N + grads N + shard S + m, v over S + persistent grads, m, v (P each)
  const int64_t n = layout.padded_elems(), sh = layout.shard_elems(), p = layout.persistent_elems();
  EXPECT_EQ(allocated, 2 * n + 3 * sh + 3 * p);
  EXPECT_EQ(tracker.bytes(MemoryKind::kGrads), 4 * (n + sh + p));
  EXPECT_EQ(tracker.bytes(MemoryKind::kOptimizer), 4 * (2 * sh + 2 * p));
  state.optimizer_step({}, 1, 1.0f);
  EXPECT_EQ(mem.adamw_calls, static_cast<int>(subtract(layout.owned_ranges(), layout.persistent()).size() +
                                              layout.persistent().size()));
}

// A device's clock (instr_clock.hpp) as the interpreter drives it: each instruction the backend
// runs (compute, the optimizer step, releases) is labelled before its calls and unlabelled (-1)
// after them; a traced step is bracketed by step_begin and step_end; and the trace's events of the
// instructions the clock returns take its times, the others keep the host's. This clock says
// instruction i ran [10^9 + 1000 i, 10^9 + 1000 i + 500] ns: times no host clock gives.
class FakeClock final : public InstrClock {
 public:
  void step_begin(int64_t) override {
    ++begun;
    seen.clear();
  }
  std::map<int32_t, std::pair<int64_t, int64_t>> step_end() override {
    ++ended;
    std::map<int32_t, std::pair<int64_t, int64_t>> out;
    for (int32_t i : seen) out[i] = {kOrigin + 1000 * int64_t{i}, kOrigin + 1000 * int64_t{i} + 500};
    return out;
  }
  static constexpr int64_t kOrigin = 1'000'000'000;
  int begun = 0, ended = 0;
  std::vector<int32_t> labels;
  std::set<int32_t> seen;
};

class ClockedCpu final : public CpuBackend {
 public:
  ClockedCpu(const StageLayout& l, bool offload, MemoryTracker& m, bool fwd, int64_t slots, FakeClock& clock)
      : CpuBackend(l, offload, m, fwd, slots), clock_(clock) {}
  InstrClock* clock() override { return &clock_; }
  void label_next(int32_t instr) override {
    clock_.labels.push_back(instr);
    if (instr >= 0) clock_.seen.insert(instr);
  }

 private:
  FakeClock& clock_;
};

TEST(CpuBackend, ADevicesClockTimesTheInstructionsItRan) {
  for (const bool trace : {true, false}) {
    const program::Program prog = program::lower(test::tiny_model(), test::tiny_training(), test::make_plan({.micro_batches = 8}));
    const Corpus corpus = Corpus::synthetic(prog.model.vocab, prog.model.seq_len, 7);
    FakeClock clock;
    RunnerOptions o;
    o.trace = trace;
    o.make_backend = [&clock](const StageLayout& l, bool offload, MemoryTracker& m, bool fwd, int64_t slots) -> std::unique_ptr<Backend> {
      return std::make_unique<ClockedCpu>(l, offload, m, fwd, slots, clock);
    };
    LocalCommunicator comm;
    Runner runner(prog, comm, corpus, o);
    runner.step();
    runner.step();
    EXPECT_EQ(clock.begun, trace ? 2 : 0);
    EXPECT_EQ(clock.ended, clock.begun);
    // the instructions the backend runs, each labelled then closed, in every step
    const program::RoleProgram& role = prog.role_of(0);
    std::vector<int32_t> want;
    for (int step = 0; step < 2; ++step) {
      for (std::size_t i = 0; i < role.instrs.size(); ++i) {
        const program::Op op = role.instrs[i].op;
        if (!program::is_compute(op) && op != program::Op::kOptimizerStep && op != program::Op::kOffloadCopy &&
            op != program::Op::kReleaseParams) {
          continue;
        }
        want.push_back(role.first_id + static_cast<int32_t>(i));
        want.push_back(-1);
      }
    }
    std::vector<int32_t> got = clock.labels;
    // the order among lanes is the interpreter's; per instruction the pairs are what matters
    std::vector<std::pair<int32_t, int32_t>> got_pairs, want_pairs;
    for (std::size_t k = 0; k + 1 < got.size(); k += 2) got_pairs.push_back({got[k], got[k + 1]});
    for (std::size_t k = 0; k + 1 < want.size(); k += 2) want_pairs.push_back({want[k], want[k + 1]});
    std::sort(got_pairs.begin(), got_pairs.end());
    std::sort(want_pairs.begin(), want_pairs.end());
    EXPECT_EQ(got.size(), want.size());
    EXPECT_EQ(got_pairs, want_pairs);
    if (!trace) continue;
    int retimed = 0, kept = 0;
    for (const trace::Event& e : runner.tracer().events()) {
      if (clock.seen.count(e.instr) > 0) {
        EXPECT_EQ(e.start_ns, FakeClock::kOrigin + 1000 * int64_t{e.instr}) << e.instr;
        EXPECT_EQ(e.end_ns, e.start_ns + 500) << e.instr;
        ++retimed;
      } else {
        EXPECT_LT(e.start_ns, FakeClock::kOrigin) << "a host time, this test runs for less than a second: " << e.instr;
        ++kept;
      }
    }
    EXPECT_EQ(retimed, static_cast<int>(want.size() / 2));  // every labelled instruction of both steps
    std::printf("%d events retimed by the device clock, %d kept the host's\n", retimed, kept);
  }
}

}  // namespace
}  // namespace stagecraft::executor
