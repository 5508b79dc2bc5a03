#include "traces/analysis.hpp"

#include "sim/engine/intervals.hpp"

#include <algorithm>
#include <tuple>

namespace stagecraft::traces {

using program::Lane;
using program::Op;

namespace {

using sim::Interval;
using sim::length;
using sim::overlap;
using sim::union_of;

// As the simulator accounts its lanes: the compute lane is compute, the traffic lanes
// (program::traffic_of) communication, the rest (offload copies, releases) neither.
Category lane_category(const trace::Event& e) { return category_of(e.lane, e.op); }

KernelClass event_class(const trace::Event& e) {
  if (e.lane == Lane::kOffload) return KernelClass::kMemory;
  return lane_category(e) == Category::kCommunication ? KernelClass::kCommunication : KernelClass::kCompute;
}

// A p2p message of one step: the Program's message identity and the step.
using StepMessage = std::pair<program::MessageKey, int32_t>;

std::map<StepMessage, int64_t> send_starts(const Trace& t, const ProgramContext& pc) {
  std::map<StepMessage, int64_t> out;
  for (std::size_t i = 0; i < t.data.events.size(); ++i) {
    const trace::Event& e = t.data.events[i];
    const program::Instr* in = pc.find(e.rank, e.instr);
    if (!in || !program::is_send(in->op)) continue;
    out[{program::message_of(pc.program.placement, e.rank, *in), t.event_step[i]}] = e.start_ns;
  }
  return out;
}

void instruction_activities(const Trace& t, Level level, const ProgramContext* pc, std::vector<Activity>& out) {
  std::map<StepMessage, int64_t> sends;
  if (pc) sends = send_starts(t, *pc);
  for (std::size_t i = 0; i < t.data.events.size(); ++i) {
    const trace::Event& e = t.data.events[i];
    Activity a;
    a.rank = e.rank;
    a.step = t.event_step[i];
    a.start_ns = a.busy_from_ns = e.start_ns;
    a.end_ns = e.end_ns;
    a.category = lane_category(e);
    a.row = static_cast<int64_t>(e.lane);
    a.source = i;
    if (level == Level::kInstruction) {
      a.key = e.instr;
      a.kind = program::trace_kind(e.op);
    } else {
      const KernelClass c = event_class(e);
      a.key = static_cast<int32_t>(c);
      a.kind = to_string(c);
    }
    if (pc && program::is_recv(e.op)) {
      if (const program::Instr* in = pc->find(e.rank, e.instr)) {
        const auto it = sends.find({program::message_of(pc->program.placement, e.rank, *in), a.step});
        if (it != sends.end()) a.busy_from_ns = std::min(a.end_ns, std::max(a.start_ns, it->second));
      }
    }
    out.push_back(a);
  }
}

void kernel_activities(const Trace& t, std::vector<Activity>& out) {
  for (std::size_t i = 0; i < t.kernels.size(); ++i) {
    const Kernel& k = t.kernels[i];
    if (k.step < 0) continue;
    Activity a;
    a.rank = k.rank;
    a.step = k.step;
    a.start_ns = a.busy_from_ns = k.start_ns;
    a.end_ns = k.end_ns;
    a.category = k.cls == KernelClass::kCommunication ? Category::kCommunication : Category::kCompute;
    a.key = static_cast<int32_t>(k.cls);
    a.kind = to_string(k.cls);
    a.row = k.stream;
    a.source = i;
    out.push_back(a);
  }
}

}  // namespace

Category category_of(program::Lane lane, program::Op op) {
  if (lane == Lane::kCompute) return Category::kCompute;
  return program::traffic_of(lane, op) != program::Traffic::kNone ? Category::kCommunication : Category::kOther;
}

Breakdown partition(const std::vector<std::pair<int64_t, int64_t>>& compute,
                    const std::vector<std::pair<int64_t, int64_t>>& comm, int64_t t0, int64_t t1, bool clip) {
  const auto clipped = [&](const std::vector<std::pair<int64_t, int64_t>>& v) {
    std::vector<Interval> out;
    for (const auto& [b, e] : v) {
      const int64_t lo = clip ? std::max(b, t0) : b, hi = clip ? std::min(e, t1) : e;
      if (hi > lo) out.push_back({lo, hi});
    }
    return union_of(std::move(out));
  };
  const std::vector<Interval> c = clipped(compute), m = clipped(comm);
  Breakdown b;
  b.step_s = static_cast<double>(t1 - t0) * 1e-9;
  b.compute_s = static_cast<double>(length(c)) * 1e-9;
  b.exposed_comm_s = static_cast<double>(length(m) - overlap(m, c)) * 1e-9;
  b.bubble_s = std::max(0.0, b.step_s - b.compute_s - b.exposed_comm_s);
  return b;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<Activity> activities(const Trace& t, Level level, const ProgramContext* pc) {
  std::vector<Activity> out;
  if (t.kernel_level()) {
    kernel_activities(t, out);
  } else {
    instruction_activities(t, level, pc, out);
  }
  return out;
}

std::map<int32_t, std::pair<int64_t, int64_t>> step_spans(const Trace& t, const std::vector<Activity>& acts) {
  std::map<int32_t, std::pair<int64_t, int64_t>> spans;
  auto widen = [&](int32_t step, int64_t begin, int64_t end) {
    auto [it, fresh] = spans.try_emplace(step, begin, end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, begin);
      it->second.second = std::max(it->second.second, end);
    }
  };
  if (t.kernel_level() && !t.steps.empty()) {
    for (const StepSpan& s : t.steps) widen(s.step, s.start_ns, s.end_ns);
    return spans;
  }
  for (const Activity& a : acts) widen(a.step, a.start_ns, a.end_ns);
  return spans;
}

double step_time_s(const Trace& t, const std::vector<Activity>& acts) {
  std::vector<double> steps;
  for (const auto& [step, span] : step_spans(t, acts)) steps.push_back(static_cast<double>(span.second - span.first) * 1e-9);
  return median(steps);
}

std::map<int64_t, Breakdown> breakdown_by_rank(const Trace& t, const std::vector<Activity>& acts) {
  const auto spans = step_spans(t, acts);
  using Spans = std::vector<std::pair<int64_t, int64_t>>;
  std::map<std::pair<int64_t, int32_t>, std::pair<Spans, Spans>> by_rank_step;
  for (const Activity& a : acts) {
    auto& [compute, comm] = by_rank_step[{a.rank, a.step}];
    if (a.category == Category::kCompute) compute.emplace_back(a.start_ns, a.end_ns);
    if (a.category == Category::kCommunication) comm.emplace_back(a.busy_from_ns, a.end_ns);
  }
  std::map<int64_t, std::vector<Breakdown>> per_step;
  for (const auto& [key, lists] : by_rank_step) {
    const auto span = spans.find(key.second);
    if (span == spans.end()) continue;
    per_step[key.first].push_back(partition(lists.first, lists.second, span->second.first, span->second.second, false));
  }
  std::map<int64_t, Breakdown> out;
  for (const auto& entry : per_step) {
    const std::vector<Breakdown>& list = entry.second;  // a named reference: clang 14 cannot capture bindings
    const int64_t rank = entry.first;
    auto pick = [&](double Breakdown::*field) {
      std::vector<double> v;
      for (const Breakdown& b : list) v.push_back(b.*field);
      return median(v);
    };
    out[rank] = {pick(&Breakdown::step_s), pick(&Breakdown::compute_s), pick(&Breakdown::exposed_comm_s),
                 pick(&Breakdown::bubble_s)};
  }
  return out;
}

}  // namespace stagecraft::traces
