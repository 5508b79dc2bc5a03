// The interactive timeline's data (traces/timeline_model.hpp), against brute force over the trace.
#include "traces/timeline_model.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "fixtures.hpp"
#include "support.hpp"
#include "traces/critical_path.hpp"
#include "traces/timeline.hpp"

namespace stagecraft::traces {
namespace {

struct Case {
  test::Scenario s;
  Trace trace;
  ProgramContext pc;
};

Case simulated(const char* plan, int64_t gpus, bool full) {
  Case c{test::bundled("tiny", "tiny-cpu", plan), {}, {}};
  const sim::SimResult r = test::simulate(c.s, test::cpu_cluster(gpus), full);
  c.trace = test::as_trace(r.trace, "sim.json");
  c.pc = ProgramContext{c.s.program, c.s.training, "test"};
  return c;
}

TEST(TimelineModel, OneRowPerRankAndLaneWithEveryEventSortedByStart) {
  const Case c = simulated("tiny-pp2-dp2", 4, true);
  const TimelineModel m(c.trace, &c.pc);
  std::set<std::pair<int64_t, int>> pairs;
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const trace::Event& e : c.trace.data.events) {
    pairs.insert({e.rank, static_cast<int>(e.lane)});
    first = std::min(first, e.start_ns);
    last = std::max(last, e.end_ns);
  }
  ASSERT_EQ(m.rows().size(), pairs.size());
  auto it = pairs.begin();
  std::size_t events = 0;
  for (const TimelineRow& r : m.rows()) {
    EXPECT_EQ(r.rank, it->first);
    EXPECT_EQ(static_cast<int>(r.lane), it->second);
    ++it;
    EXPECT_TRUE(std::is_sorted(r.start.begin(), r.start.end())) << r.label;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const trace::Event& e = c.trace.data.events[r.source[i]];
      EXPECT_EQ(r.start[i], e.start_ns - first);
      EXPECT_EQ(r.end[i], e.end_ns - first);
      EXPECT_EQ(r.instr[i], e.instr);
      EXPECT_EQ(r.op[i], e.op);
    }
    events += r.size();
  }
  EXPECT_EQ(events, c.trace.data.events.size()) << "a simulated trace is one step";
  EXPECT_EQ(m.event_count(), events);
  EXPECT_EQ(m.origin_ns(), first);
  EXPECT_EQ(m.end_ns(), last - first);
  EXPECT_EQ(m.rows().front().label, "rank 0 compute");
}

// Brute force: the events meeting [t0, t1) are exactly visible()'s range; event_at agrees with a
// scan; outside every interval there is no event.
TEST(TimelineModel, VisibleRangesAndHitTestsEqualAScan) {
  const Case c = simulated("tiny-pp2-dp2", 4, true);
  const TimelineModel m(c.trace, &c.pc);
  const int64_t T = m.end_ns();
  for (std::size_t row = 0; row < m.rows().size(); ++row) {
    const TimelineRow& r = m.rows()[row];
    for (int k = 0; k < 40; ++k) {
      const int64_t t0 = T * k / 40, t1 = t0 + T / 13 + 1;
      const auto [f, l] = m.visible(row, t0, t1);
      std::size_t expect = 0;
      for (std::size_t i = 0; i < r.size(); ++i) {
        const bool meets = r.start[i] < t1 && (r.end[i] > t0 || (r.end[i] == t0 && r.start[i] == t0));
        expect += meets;
        if (meets) {
          EXPECT_GE(i, f) << r.label;
          EXPECT_LT(i, l) << r.label;
        }
      }
      EXPECT_LE(expect, l - f);
      const int64_t t = t0 + 7;
      const std::optional<std::size_t> hit = m.event_at(row, t);
      std::optional<std::size_t> scan;
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (r.start[i] <= t && t < r.end[i]) scan = i;   // the latest-starting one
      }
      EXPECT_EQ(hit, scan) << r.label << " at " << t;
    }
  }
}

// Level of detail: at every zoom the columns' busy time sums to the events' busy time within the
// range (each event's overlap counted once), a column never holds more than its width on a row
// whose intervals do not overlap, and the dominant op of a column inside one long event is its op.
TEST(TimelineModel, ColumnsKeepEveryNanosecondOfBusyTimeAtEveryZoom) {
  const Case c = simulated("tiny-pp2-dp2", 4, true);
  const TimelineModel m(c.trace, &c.pc);
  const int64_t T = m.end_ns();
  for (std::size_t row = 0; row < m.rows().size(); ++row) {
    const TimelineRow& r = m.rows()[row];
    bool disjoint = true;
    for (std::size_t i = 1; i < r.size(); ++i) disjoint = disjoint && r.start[i] >= r.end[i - 1];
    for (const int n : {1, 7, 50, 333, 1600, 20000}) {
      for (const auto& [t0, t1] : std::vector<std::pair<int64_t, int64_t>>{{0, T}, {T / 3, T / 3 + T / 17 + 1}}) {
        const std::vector<TimelineColumn> cols = m.columns(row, t0, t1, n);
        ASSERT_EQ(cols.size(), static_cast<std::size_t>(n));
        int64_t sum = 0, expect = 0;
        for (const TimelineColumn& col : cols) sum += col.busy_ns;
        for (std::size_t i = 0; i < r.size(); ++i) expect += std::max<int64_t>(0, std::min(r.end[i], t1) - std::max(r.start[i], t0));
        EXPECT_EQ(sum, expect) << r.label << " n=" << n;
        if (disjoint) {
          const double width = static_cast<double>(t1 - t0) / n;
          for (const TimelineColumn& col : cols) EXPECT_LE(col.busy_ns, static_cast<int64_t>(width) + 1);
          EXPECT_EQ(m.busy_in(row, t0, t1), expect) << "disjoint: the union is the sum";
        }
      }
    }
    // the longest event: a column strictly inside it is dominated by its op
    const auto longest = std::max_element(r.start.begin(), r.start.end(), [&](const int64_t& a, const int64_t& b) {
      return r.end[&a - r.start.data()] - a < r.end[&b - r.start.data()] - b;
    }) - r.start.begin();
    const int64_t s = r.start[static_cast<std::size_t>(longest)], e = r.end[static_cast<std::size_t>(longest)];
    if (disjoint && e - s >= 1000) {
      const std::vector<TimelineColumn> cols = m.columns(row, s, e, 10);
      EXPECT_EQ(cols[5].dominant, static_cast<int>(r.op[static_cast<std::size_t>(longest)])) << r.label;
      EXPECT_EQ(cols[5].busy_ns, (e - s) * 6 / 10 - (e - s) * 5 / 10);
    }
  }
}

// A receive waits until its send starts: busy_from is that send's start on the peer's row.
TEST(TimelineModel, ReceivesTransferOnlyFromTheirSendsStart) {
  const Case c = simulated("tiny-pp2-dp2", 4, true);
  const TimelineModel m(c.trace, &c.pc);
  std::map<program::MessageKey, int64_t> send_start;
  for (const TimelineRow& r : m.rows()) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (!program::is_send(r.op[i])) continue;
      const program::Instr* in = c.pc.find(r.rank, r.instr[i]);
      ASSERT_NE(in, nullptr);
      send_start[program::message_of(c.pc.program.placement, r.rank, *in)] = r.start[i];
    }
  }
  int receives = 0, waiting = 0;
  for (const TimelineRow& r : m.rows()) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (!program::is_recv(r.op[i])) {
        EXPECT_EQ(r.busy_from[i], r.start[i]);
        continue;
      }
      const program::Instr* in = c.pc.find(r.rank, r.instr[i]);
      const int64_t sent = send_start.at(program::message_of(c.pc.program.placement, r.rank, *in));
      EXPECT_EQ(r.busy_from[i], std::clamp(sent, r.start[i], r.end[i]));
      ++receives;
      waiting += r.busy_from[i] > r.start[i];
    }
  }
  EXPECT_GT(receives, 0);
  EXPECT_GT(waiting, 0) << "pp2: some receive is posted before its send";
  const TimelineModel plain(c.trace, nullptr);
  for (const TimelineRow& r : plain.rows()) EXPECT_EQ(r.busy_from, r.start) << "without the Program nothing is matched";
}

// A PyTorch profiler trace: a row per rank and stream, the kernels of its first ProfilerStep (what
// timeline_panel draws), coloured by kernel class, no instruction ids; the next step on request.
TEST(TimelineModel, KernelLevelTracesHaveARowPerStreamAndTheStepsKernels) {
  const Trace k = read_trace_files({test::data_path("kineto/handwritten_rank0.json")});
  const TimelineModel m(k, nullptr);
  EXPECT_TRUE(m.kernel_level());
  const TimelinePanel p = timeline_panel(k, "kineto");
  ASSERT_EQ(m.rows().size(), p.rows.size());
  for (std::size_t r = 0; r < p.rows.size(); ++r) EXPECT_EQ(m.rows()[r].label, p.rows[r]);
  EXPECT_EQ(m.event_count(), p.bars.size());
  for (const TimelineRow& r : m.rows()) {
    for (std::size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(r.instr[i], -1);
      const Kernel& kernel = k.kernels[r.source[i]];
      EXPECT_EQ(r.kind[i], program::kOpCount + static_cast<int>(kernel.cls));
      EXPECT_EQ(kind_name(r.kind[i]), std::string(to_string(kernel.cls)) + " kernels");
    }
  }
  EXPECT_EQ(m.end_ns(), p.end_ns);
}

}  // namespace
}  // namespace stagecraft::traces

namespace stagecraft::traces {
namespace {

// A window's partition is the rule of breakdown_by_rank: over the whole step, each rank's
// compute / exposed / bubble equal it exactly; over halves they add up to the whole.
TEST(TimelineModel, AWindowsPartitionIsTheStepsBreakdownRule) {
  const test::Scenario s = test::bundled("tiny", "tiny-cpu", "tiny-pp2-dp2");
  const sim::SimResult r = test::simulate(s, test::cpu_cluster(4), true);
  const Trace t = test::as_trace(r.trace, "sim.json");
  const ProgramContext pc{s.program, s.training, "test"};
  const TimelineModel m(t, &pc);
  const std::map<int64_t, Breakdown> whole = breakdown_by_rank(t, activities(t, Level::kInstruction, &pc));
  ASSERT_EQ(whole.size(), 4u);
  const int64_t T = m.end_ns(), half = T / 2;
  for (const auto& [rank, b] : whole) {
    const Breakdown w = m.breakdown_in(rank, 0, T);
    EXPECT_DOUBLE_EQ(w.step_s, b.step_s);
    EXPECT_DOUBLE_EQ(w.compute_s, b.compute_s) << rank;
    EXPECT_DOUBLE_EQ(w.exposed_comm_s, b.exposed_comm_s) << rank;
    EXPECT_DOUBLE_EQ(w.bubble_s, b.bubble_s) << rank;
    const Breakdown a = m.breakdown_in(rank, 0, half), z = m.breakdown_in(rank, half, T);
    EXPECT_NEAR(a.compute_s + z.compute_s, w.compute_s, 1e-12);
    EXPECT_NEAR(a.exposed_comm_s + z.exposed_comm_s, w.exposed_comm_s, 1e-12);
    EXPECT_NEAR(a.step_s + z.step_s, w.step_s, 1e-12);
  }
  // per-op time inside a window: the compute row's ops over the whole step sum to its busy time
  const int row = m.row_of(0, program::Lane::kCompute);
  int64_t sum = 0;
  for (int64_t v : m.kind_time_in(static_cast<std::size_t>(row), 0, T)) sum += v;
  EXPECT_EQ(sum, m.rows()[static_cast<std::size_t>(row)].busy_ns);
}

}  // namespace
}  // namespace stagecraft::traces


namespace stagecraft::traces {
namespace {

// The critical path: its intervals tile [0, step end) (compute + communication + other + waiting
// = the step), the last instruction ends the step, and every link is one the simulator's start
// rule or a message makes: the previous event on the same lane, a Program dependency on the same
// rank, or a receive's matched send.
TEST(CriticalPath, TilesTheStepThroughLanesDependenciesAndMessages) {
  for (const char* plan : {"tiny-pp2-dp2", "tiny-tp2-pp2-dp2", "tiny-zero3"}) {
    const test::Scenario s = test::bundled("tiny", "tiny-cpu", plan);
    const sim::SimResult r = test::simulate(s, test::cpu_cluster(s.program.placement.world()), false);
    const Trace t = test::as_trace(r.trace, "sim.json");
    const ProgramContext pc{s.program, s.training, "test"};
    const TimelineModel m(t, &pc);
    const CriticalPath p = critical_path(m, pc);
    ASSERT_FALSE(p.steps.empty()) << plan;
    EXPECT_EQ(p.compute_ns + p.communication_ns + p.other_ns + p.wait_ns, m.end_ns()) << plan;
    EXPECT_EQ(p.steps.front().from_ns, 0);
    EXPECT_EQ(p.steps.back().to_ns, m.end_ns());
    const TimelineRow& last = m.rows()[p.steps.back().row];
    EXPECT_EQ(last.end[p.steps.back().index], m.end_ns()) << "the last instruction ends the step";
    for (std::size_t k = 0; k + 1 < p.steps.size(); ++k) {
      const CriticalStep& a = p.steps[k];
      const CriticalStep& b = p.steps[k + 1];
      EXPECT_EQ(a.to_ns, b.from_ns) << plan << " the intervals tile";
      EXPECT_LE(a.from_ns, a.to_ns);
      const TimelineRow& ra = m.rows()[a.row];
      const TimelineRow& rb = m.rows()[b.row];
      if (a.via == "lane") {
        EXPECT_EQ(a.row, b.row);
        EXPECT_EQ(a.index + 1, b.index);
      } else if (a.via == "dependency") {
        EXPECT_EQ(ra.rank, rb.rank);
        const program::RoleProgram& role = pc.program.role_of(rb.rank);
        const auto deps = role.deps_of(*pc.find(rb.rank, rb.instr[b.index]));
        EXPECT_NE(std::find(deps.begin(), deps.end(), ra.instr[a.index] - role.first_id), deps.end()) << plan;
      } else {
        ASSERT_EQ(a.via, "message") << plan;
        EXPECT_TRUE(program::is_send(ra.op[a.index]));
        EXPECT_TRUE(program::is_recv(rb.op[b.index]));
        EXPECT_EQ(rb.busy_from[b.index], ra.start[a.index]) << "the receive transferred from its send's start";
      }
    }
  }
}

}  // namespace
}  // namespace stagecraft::traces
