// Tracer: the measured trace of a run (SCHEMAS.md "Trace", core/trace/trace.hpp). Every rank
// records each executed instruction's start and end (steady_clock) with its Program id, lane,
// micro-batch, stage, bytes moved and FLOPs, plus its memory samples. Clocks are aligned once
// at start: a barrier, then every rank's clock reading right after it is all-gathered; ranks on
// one host share steady_clock, so their events are placed on the earliest reading (exact
// relative order), ranks on different hosts on their own reading (aligned to the barrier's
// exit). gather() sends everything to rank 0, which gets one Trace with source "measured" that
// names its Program (model, training as executed, plan, fingerprint).
// A disabled Tracer records nothing and costs one branch per instruction.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/trace/trace.hpp"
#include "executor/comm/communicator.hpp"

namespace stagecraft::executor {

class Tracer {
 public:
  explicit Tracer(bool enabled = false) : enabled_(enabled) {}

  // Collective: aligns this rank's clock with the others'.
  void start(Communicator& comm);
  bool enabled() const { return enabled_; }
  // Nanoseconds since the aligned origin.
  int64_t now_ns() const;
  void record(const trace::Event& e) {
    if (enabled_) events_.push_back(e);
  }
  const std::vector<trace::Event>& events() const { return events_; }
  // The events from index `from` on whose instruction `times` holds take those [start, end]
  // (a device's clock, instr_clock.hpp).
  void retime(std::size_t from, const std::map<int32_t, std::pair<int64_t, int64_t>>& times) {
    for (std::size_t i = from; i < events_.size(); ++i) {
      const auto it = times.find(events_[i].instr);
      if (it == times.end()) continue;
      events_[i].start_ns = it->second.first;
      events_[i].end_ns = it->second.second;
    }
  }

  // Collective: rank 0 returns every rank's events and `memory` samples in one Trace (other
  // ranks an empty one), naming the Program it ran (trace::name_program) and where:
  // cluster {"name": cluster_name, "hosts": [each rank's host name]}.
  trace::Trace gather(Communicator& comm, const std::vector<trace::MemorySample>& memory, const program::Program& prog,
                      const std::string& cluster_name) const;

 private:
  bool enabled_ = false;
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<trace::Event> events_;
};

}  // namespace stagecraft::executor
