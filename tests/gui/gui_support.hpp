// Shared by the GUI tests: small searches and simulated plans on the bundled tiny configs.
#pragma once

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QTest>

#include <functional>
#include <string>

#include "core/spec/bundled.hpp"
#include "gui/jobs/plan_job.hpp"
#include "gui/model/inputs.hpp"
#include "planner/search.hpp"

namespace stagecraft::test {

// tiny on 2 nodes of cpu-local (4 ranks), tiny-cpu training: a search of milliseconds.
inline gui::Inputs tiny_inputs() {
  gui::Inputs in;
  in.model = "tiny";
  in.cluster = "cpu-local";
  in.training = "tiny-cpu";
  in.nodes = 2;
  in.top_k = 5;
  in.threads = 1;
  return in;
}

inline planner::SearchOptions options_of(const gui::Inputs& in) {
  planner::SearchOptions o;
  o.top_k = in.top_k;
  o.threads = in.threads;
  o.pareto_window = in.pareto_window;
  return o;
}

// A bundled plan on tiny, simulated as the GUI does.
inline gui::PlanViewPtr tiny_view(const std::string& plan_name) {
  const gui::Loaded l = gui::load(tiny_inputs());
  const spec::Plan plan = spec::load_plan(spec::resolve_config(spec::ConfigKind::kPlan, plan_name));
  return gui::simulate_view(*l.space, plan, plan_name);
}

// Processes events until `done` or the timeout; true when done.
inline bool wait_for(const std::function<bool()>& done, int ms = 20000) {
  QElapsedTimer t;
  t.start();
  while (!done()) {
    if (t.elapsed() > ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    QTest::qWait(5);
  }
  return true;
}

}  // namespace stagecraft::test
