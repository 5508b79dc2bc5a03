#include "traces/critical_path.hpp"

#include <algorithm>
#include <map>

namespace stagecraft::traces {

CriticalPath critical_path(const TimelineModel& m, const ProgramContext& pc) {
  CriticalPath out;
  out.end_ns = m.end_ns();
  if (m.event_count() == 0 || m.kernel_level()) return out;   // kernels carry no Program links
  using Mark = std::pair<std::size_t, std::size_t>;
  std::map<std::pair<int64_t, int32_t>, Mark> by_instr;   // (rank, instr) -> event
  std::map<program::MessageKey, Mark> sends;
  for (std::size_t r = 0; r < m.rows().size(); ++r) {
    const TimelineRow& row = m.rows()[r];
    for (std::size_t i = 0; i < row.size(); ++i) {
      by_instr[{row.rank, row.instr[i]}] = {r, i};
      if (program::is_send(row.op[i])) {
        if (const program::Instr* in = pc.find(row.rank, row.instr[i])) sends[program::message_of(pc.program.placement, row.rank, *in)] = {r, i};
      }
    }
  }
  const auto start = [&](const Mark& k) { return m.rows()[k.first].start[k.second]; };
  const auto end = [&](const Mark& k) { return m.rows()[k.first].end[k.second]; };
  // the last to end (ties: the latest to start)
  Mark cur{0, 0};
  bool have = false;
  for (std::size_t r = 0; r < m.rows().size(); ++r) {
    for (std::size_t i = 0; i < m.rows()[r].size(); ++i) {
      const Mark k{r, i};
      if (!have || end(k) > end(cur) || (end(k) == end(cur) && start(k) > start(cur))) cur = k;
      have = true;
    }
  }
  std::vector<CriticalStep> back;
  int64_t release = out.end_ns;   // the time the current instruction's part of the path ends
  std::string via;
  for (std::size_t guard = 0; guard <= m.event_count(); ++guard) {
    const TimelineRow& row = m.rows()[cur.first];
    CriticalStep s;
    s.row = cur.first;
    s.index = cur.second;
    s.via = via;
    s.to_ns = release;
    // the predecessor that released it
    std::optional<Mark> pred;
    int64_t released_at = 0;
    if (program::is_recv(row.op[cur.second]) && row.busy_from[cur.second] > row.start[cur.second]) {
      if (const program::Instr* in = pc.find(row.rank, row.instr[cur.second])) {
        const auto it = sends.find(program::message_of(pc.program.placement, row.rank, *in));
        if (it != sends.end()) {
          pred = it->second;
          released_at = start(it->second);
          via = "message";
        }
      }
    }
    if (!pred) {
      if (cur.second > 0) {
        pred = Mark{cur.first, cur.second - 1};
        released_at = end(*pred);
        via = "lane";
      }
      if (const program::Instr* in = pc.find(row.rank, row.instr[cur.second])) {
        const program::RoleProgram& role = pc.program.role_of(row.rank);
        for (const int32_t d : role.deps_of(*in)) {
          const auto it = by_instr.find({row.rank, role.first_id + d});
          if (it == by_instr.end()) continue;
          if (!pred || end(it->second) > released_at) {
            pred = it->second;
            released_at = end(it->second);
            via = "dependency";
          }
        }
      }
      if (pred && released_at > row.start[cur.second]) released_at = row.start[cur.second];   // never after its start
    }
    s.from_ns = pred ? std::min(released_at, release) : 0;
    s.busy_ns = std::max<int64_t>(0, std::min(release, row.end[cur.second]) - std::max(s.from_ns, row.start[cur.second]));
    back.push_back(s);
    if (!pred) break;
    release = s.from_ns;
    cur = *pred;
  }
  out.steps.assign(back.rbegin(), back.rend());
  for (const CriticalStep& s : out.steps) {
    const TimelineRow& row = m.rows()[s.row];
    const Category c = category_of(row.lane, row.op[s.index]);
    (c == Category::kCompute ? out.compute_ns : c == Category::kCommunication ? out.communication_ns : out.other_ns) += s.busy_ns;
    out.wait_ns += (s.to_ns - s.from_ns) - s.busy_ns;
  }
  return out;
}

}  // namespace stagecraft::traces
