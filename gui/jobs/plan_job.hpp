// One plan simulated for the step views (timeline, memory, details): lowered and simulated with
// the trace recorded — program::lower and sim::simulate, the calls `stagecraft simulate` makes —
// then laid out (traces::TimelineModel) with receives matched to their sends. Runs on a pool
// thread; a result for a plan no longer selected is dropped by its generation number.
#pragma once

#include <QObject>

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <memory>
#include <string>

#include "core/program/program.hpp"
#include "gui/model/memory_series.hpp"
#include "planner/space.hpp"
#include "sim/simulator.hpp"
#include "traces/io/trace_io.hpp"
#include "traces/program_context.hpp"
#include "traces/timeline_model.hpp"

namespace stagecraft::gui {

struct PlanView {
  std::string key;
  spec::Plan plan;
  spec::Cluster cluster;
  traces::ProgramContext context;     // the Program and its training
  sim::SimResult sim;                 // metrics, trace, per-rank peaks
  traces::Trace trace;
  traces::TimelineModel timeline;

  // The memory of `rank` on the timeline's time axis.
  MemoryStack memory(int64_t rank) const { return memory_of(sim.trace, rank, timeline.origin_ns()); }
  // "#412 Forward mb=3 chunk=0 …" for an event of a timeline row.
  std::string describe(std::size_t row, std::size_t index) const;
  // The hover text of an event: what, where, how long, when, and its rate.
  std::string tooltip(std::size_t row, std::size_t index) const;
  // A pipeline send's receive, or a receive's send (matched by the Program's message identity),
  // as (row, index); nullopt for other events and messages whose peer was not simulated.
  std::optional<std::pair<std::size_t, std::size_t>> peer(std::size_t row, std::size_t index) const;

  std::map<std::pair<std::size_t, std::size_t>, std::pair<std::size_t, std::size_t>> peers;   // both directions
};
using PlanViewPtr = std::shared_ptr<const PlanView>;

// Fills v.peers from its timeline and Program.
void match_messages(PlanView& v);

// Throws what lowering and simulation throw (spec::SpecError, sim::SimError).
PlanViewPtr simulate_view(const planner::Space& space, const spec::Plan& plan, const std::string& key);
// The Program of `context` simulated on `cluster` with its trace recorded, laid out (what
// simulate_view does after lowering; Compare's "Use calibrated" calls it with the fitted profile).
PlanViewPtr simulated_view(std::string key, spec::Plan plan, spec::Cluster cluster, traces::ProgramContext context);
// The same plan and Program as `like` with another trace of it (a measured one) laid out at `step`.
PlanViewPtr traced_view(const PlanView& like, traces::Trace trace, int32_t step);

class PlanJobs : public QObject {
  Q_OBJECT
 public:
  explicit PlanJobs(QObject* parent = nullptr);
  // Simulates on a pool thread; emits ready (or failed) unless a later request came first.
  void request(std::shared_ptr<const planner::Space> space, const spec::Plan& plan, const std::string& key);
  int64_t generation() const { return generation_; }

 signals:
  void ready(PlanViewPtr view);
  void failed(QString key, QString message);

 private:
  int64_t generation_ = 0;
};

}  // namespace stagecraft::gui

Q_DECLARE_METATYPE(stagecraft::gui::PlanViewPtr)
