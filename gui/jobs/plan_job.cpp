#include "gui/jobs/plan_job.hpp"

#include <QCoreApplication>
#include <QMetaObject>
#include <QPointer>
#include <QThreadPool>

#include "core/program/format.hpp"
#include "core/program/lower.hpp"
#include "core/text/format.hpp"

namespace stagecraft::gui {

namespace {
const int kRegistered = [] {
  qRegisterMetaType<PlanViewPtr>();
  return 0;
}();

std::string duration(double ns) {
  if (ns >= 1e9) return text::fmt("%.3f s", ns * 1e-9);
  if (ns >= 1e6) return text::fmt("%.2f ms", ns * 1e-6);
  return text::fmt("%.1f us", ns * 1e-3);
}
}  // namespace

void match_messages(PlanView& v) {
  v.peers.clear();
  std::map<std::pair<program::MessageKey, int>, std::pair<std::size_t, std::size_t>> open;   // (message, is_recv)
  for (std::size_t r = 0; r < v.timeline.rows().size(); ++r) {
    const traces::TimelineRow& row = v.timeline.rows()[r];
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool send = program::is_send(row.op[i]), recv = program::is_recv(row.op[i]);
      if (!send && !recv) continue;
      const program::Instr* in = v.context.find(row.rank, row.instr[i]);
      if (!in) continue;
      const program::MessageKey key = program::message_of(v.context.program.placement, row.rank, *in);
      const auto other = open.find({key, send ? 1 : 0});
      if (other != open.end()) {
        v.peers[{r, i}] = other->second;
        v.peers[other->second] = {r, i};
        open.erase(other);
      } else {
        open[{key, send ? 0 : 1}] = {r, i};
      }
    }
  }
}

PlanViewPtr simulated_view(std::string key, spec::Plan plan, spec::Cluster cluster, traces::ProgramContext context) {
  auto v = std::make_shared<PlanView>();
  v->key = std::move(key);
  v->plan = std::move(plan);
  v->cluster = std::move(cluster);
  v->context = std::move(context);
  sim::SimOptions o;
  o.record_trace = true;
  v->sim = sim::simulate(v->context.program, v->cluster, o);
  v->trace = traces::from_core(v->sim.trace, "simulated");
  v->timeline = traces::TimelineModel(v->trace, &v->context);
  match_messages(*v);
  return v;
}

PlanViewPtr simulate_view(const planner::Space& space, const spec::Plan& plan, const std::string& key) {
  traces::ProgramContext context;
  context.program = program::lower(space.model(), space.training(), plan);
  context.training = space.training();
  context.training_origin = "the GUI's inputs";
  return simulated_view(key, plan, space.cluster(), std::move(context));
}

PlanViewPtr traced_view(const PlanView& like, traces::Trace trace, int32_t step) {
  auto v = std::make_shared<PlanView>();
  v->key = like.key;
  v->plan = like.plan;
  v->cluster = like.cluster;
  v->context = like.context;
  v->trace = std::move(trace);
  v->timeline = traces::TimelineModel(v->trace, &v->context, step);
  match_messages(*v);
  return v;
}

std::optional<std::pair<std::size_t, std::size_t>> PlanView::peer(std::size_t row, std::size_t index) const {
  const auto it = peers.find({row, index});
  if (it == peers.end()) return std::nullopt;
  return it->second;
}

std::string PlanView::describe(std::size_t row, std::size_t index) const {
  const traces::TimelineRow& r = timeline.rows().at(row);
  if (timeline.kernel_level()) {
    const traces::Kernel& k = trace.kernels.at(r.source.at(index));
    return k.name + " (" + traces::to_string(k.cls) + (k.collective.empty() ? "" : ", " + k.collective) + ")";
  }
  const program::RoleProgram& role = context.program.role_of(r.rank);
  return program::describe(context.program, role, r.instr.at(index) - role.first_id);
}

std::string PlanView::tooltip(std::size_t row, std::size_t index) const {
  const traces::TimelineRow& r = timeline.rows().at(row);
  if (timeline.kernel_level()) {
    return describe(row, index) + "\n" + r.label + "\n" + duration(static_cast<double>(r.end[index] - r.start[index])) + " at " +
           duration(static_cast<double>(r.start[index]));
  }
  const trace::Event& e = trace.data.events.at(r.source.at(index));
  std::string s = describe(row, index) + "\n" + r.label;
  if (e.stage >= 0) s += " (stage " + std::to_string(e.stage) + ")";
  const double ns = static_cast<double>(r.end[index] - r.start[index]);
  s += "\n" + duration(ns) + " at " + duration(static_cast<double>(r.start[index]));
  if (program::is_recv(r.op[index]) && r.busy_from[index] > r.start[index]) {
    s += "\nwaits " + duration(static_cast<double>(r.busy_from[index] - r.start[index])) + " for its send, transfers " +
         duration(static_cast<double>(r.end[index] - r.busy_from[index]));
  }
  if (e.flops > 0 && ns > 0) s += "\n" + text::short_count(e.flops) + "FLOP, " + text::fmt("%.1f TFLOP/s", e.flops / ns * 1e-3);
  if (e.bytes > 0) {
    s += "\n" + text::short_bytes(static_cast<double>(e.bytes));
    if (ns > 0) s += text::fmt(", %.1f GB/s algorithm bandwidth", static_cast<double>(e.bytes) / ns);
  }
  return s;
}

PlanJobs::PlanJobs(QObject* parent) : QObject(parent) { (void)kRegistered; }

void PlanJobs::request(std::shared_ptr<const planner::Space> space, const spec::Plan& plan, const std::string& key) {
  const int64_t generation = ++generation_;
  QPointer<PlanJobs> self(this);
  QThreadPool::globalInstance()->start([self, space, plan, key, generation] {
    PlanViewPtr view;
    QString error;
    try {
      view = simulate_view(*space, plan, key);
    } catch (const std::exception& e) {
      error = QString::fromStdString(e.what());
    }
    // Delivered on the GUI thread, through the application object (which outlives every job), so
    // that a PlanJobs deleted meanwhile is noticed there and not raced here.
    QMetaObject::invokeMethod(QCoreApplication::instance(), [self, view, error, key, generation] {
      if (!self || generation != self->generation_) return;   // a later plan was asked for
      if (view) {
        emit self->ready(view);
      } else {
        emit self->failed(QString::fromStdString(key), error);
      }
    }, Qt::QueuedConnection);
  });
}

}  // namespace stagecraft::gui
