#include "planner/sweep.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/program/lower.hpp"
#include "core/spec/error.hpp"
#include "core/text/format.hpp"
#include "core/thread/allocator.hpp"
#include "planner/pool.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::planner {

Sweep sweep(const SweepInputs& in, const spec::Override& axis, const std::vector<std::string>& values,
            const std::vector<SweepPlan>& plans, int threads, const std::atomic<bool>* cancel) {
  thread::keep_freed_memory();   // as planner::search: many Programs built and freed
  Sweep s;
  s.axis = axis;
  s.plans = plans;
  s.points.resize(values.size());
  // Read the files once per point on this thread (their errors are the caller's: a bad value
  // stops the sweep with the loader's message), then simulate in parallel.
  struct Inputs {
    spec::Cluster cluster;
    spec::Training training;
  };
  std::vector<Inputs> at(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::vector<spec::Override> o = in.base;
    o.push_back(spec::with_value(axis, spec::parse_value(values[i])));
    at[i].cluster = spec::load_cluster(in.cluster_path, o);
    if (in.nodes > 0 && axis.key() != "cluster.nodes") at[i].cluster.nodes = in.nodes;
    at[i].training = spec::load_training(in.training_path, o);
    s.points[i].value = values[i];
    s.points[i].cells.resize(plans.size());
  }
  ThreadPool pool(threads);
  pool.parallel_for(values.size() * plans.size(), [&](std::size_t k, int) {
    const std::size_t i = k / plans.size(), j = k % plans.size();
    SweepCell& cell = s.points[i].cells[j];
    if (cancel != nullptr && cancel->load()) {
      cell.skipped = true;
      cell.error = "not simulated: interrupted";
      return;
    }
    try {
      const spec::Model model = spec::with_training_length(in.model, at[i].training);
      spec::Plan plan = plans[j].plan;
      if (axis.key() == "cluster.nodes") {
        const AdaptedPlan a = adapt_plan(plan, at[i].training.global_batch, at[i].cluster.gpus(), at[i].cluster.gpus_per_node);
        if (!a.plan) throw spec::SpecError("--vary", "", a.reason);
        plan = *a.plan;
      }
      spec::validate_plan(plan, model, at[i].training, at[i].cluster.gpus());
      const program::Program prog = program::lower(model, at[i].training, plan);
      cell.metrics = sim::simulate(prog, at[i].cluster).metrics;
      cell.ok = true;
    } catch (const std::exception& e) {
      cell.error = e.what();
    }
  });
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    SweepPoint& p = s.points[i];
    p.complete = std::none_of(p.cells.begin(), p.cells.end(), [](const SweepCell& c) { return c.skipped; });
    s.interrupted = s.interrupted || !p.complete;
    if (!p.complete) continue;  // a winner among the cells that ran would be a guess
    for (std::size_t j = 0; j < p.cells.size(); ++j) {
      const SweepCell& c = p.cells[j];
      if (!c.ok || !c.metrics.fits) continue;
      if (p.best < 0 || c.metrics.step_time_s < p.cells[static_cast<std::size_t>(p.best)].metrics.step_time_s) p.best = static_cast<int>(j);
    }
    if (i > 0 && s.points[i - 1].complete && p.best != s.points[i - 1].best) s.changes.push_back(i);
  }
  return s;
}

AdaptedPlan adapt_plan(const spec::Plan& plan, int64_t global_batch, int64_t gpus, int64_t gpus_per_node) {
  const auto works = [&](int64_t g) {
    const int64_t shard = plan.tp * plan.cp * plan.pp;
    if (g <= 0 || g % shard != 0) return false;
    const int64_t dp = g / shard;
    return global_batch % (dp * plan.micro_batch) == 0;
  };
  AdaptedPlan out;
  if (works(gpus)) {
    spec::Plan p = plan;
    p.dp = gpus / (plan.tp * plan.cp * plan.pp);
    p.micro_batches = global_batch / (p.dp * plan.micro_batch);
    out.plan = p;
    return out;
  }
  const int64_t shard = plan.tp * plan.cp * plan.pp;
  if (gpus % shard != 0) {
    out.reason = std::to_string(gpus) + " GPUs are not a multiple of " + (plan.cp > 1 ? "tp x cp x pp = " : "tp x pp = ") +
                 std::to_string(shard);
  } else {
    const int64_t dp = gpus / shard;
    out.reason = "the global batch " + std::to_string(global_batch) + " / (dp " + std::to_string(dp) + " x micro-batch " +
                 std::to_string(plan.micro_batch) + ") is not a whole number of micro-batches";
  }
  const int64_t step = std::max<int64_t>(1, gpus_per_node);
  std::optional<int64_t> below, above;
  for (int64_t g = (gpus / step) * step; g >= step && !below; g -= step) {
    if (g < gpus && works(g)) below = g;
  }
  for (int64_t g = (gpus / step + 1) * step; g <= gpus * 8 && !above; g += step) {
    if (works(g)) above = g;
  }
  if (below || above) {
    out.reason += "; nearest GPU counts that work:";
    if (below) out.reason += " " + std::to_string(*below);
    if (above) out.reason += std::string(below ? "," : "") + " " + std::to_string(*above);
  }
  return out;
}

std::vector<std::string> range_values(const std::string& text, const std::string& option) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  const auto fail = [&](const std::string& why) -> std::vector<std::string> {
    throw spec::SpecError(option, "", "expected LO:HI:N or LO:HI:N:log (" + why + "), got \"" + text + "\"");
  };
  if (parts.size() != 3 && !(parts.size() == 4 && parts[3] == "log")) return fail("three or four fields");
  double lo = 0, hi = 0;
  long n = 0;
  try {
    std::size_t used = 0;
    lo = std::stod(parts[0], &used);
    if (used != parts[0].size()) return fail("LO is not a number");
    hi = std::stod(parts[1], &used);
    if (used != parts[1].size()) return fail("HI is not a number");
    n = std::stol(parts[2], &used);
    if (used != parts[2].size()) return fail("N is not a whole number");
  } catch (const std::exception&) {
    return fail("not numbers");
  }
  const bool log = parts.size() == 4;
  if (n < 2 || n > 64) return fail("N from 2 to 64");
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo == hi) return fail("two different finite ends");
  if (log && (lo <= 0 || hi <= 0)) return fail("a log range needs positive ends");
  std::vector<std::string> out;
  for (long i = 0; i < n; ++i) {
    const double f = static_cast<double>(i) / static_cast<double>(n - 1);
    const double v = log ? lo * std::pow(hi / lo, f) : lo + (hi - lo) * f;
    std::ostringstream s;
    s.precision(6);
    s << v;
    out.push_back(s.str());
  }
  return out;
}

std::string format_sweep(const Sweep& s) {
  std::ostringstream out;
  out << "step time (s) of each plan as " << s.axis.key() << " varies; * the fastest that fits\n";
  for (std::size_t j = 0; j < s.plans.size(); ++j) out << "  [" << j + 1 << "] " << s.plans[j].key << "\n";
  std::size_t width = 6;
  for (const SweepPoint& p : s.points) width = std::max(width, p.value.size());
  out << "\n  " << std::string(width - 5, ' ') << "value";
  for (std::size_t j = 0; j < s.plans.size(); ++j) out << "  " << std::string(9, ' ') << "[" << j + 1 << "]";
  out << "\n";
  for (const SweepPoint& p : s.points) {
    out << "  " << std::string(width - p.value.size(), ' ') << p.value;
    for (std::size_t j = 0; j < p.cells.size(); ++j) {
      const SweepCell& c = p.cells[j];
      std::string cell = c.skipped ? "-" : !c.ok ? "n/a" : text::fmt("%.4f", c.metrics.step_time_s) + (c.metrics.fits ? "" : " oom");
      if (static_cast<int>(j) == p.best) cell += "*";
      out << "  " << std::string(cell.size() < 12 ? 12 - cell.size() : 0, ' ') << cell;
    }
    out << "\n";
  }
  for (std::size_t i : s.changes) {
    const int a = s.points[i - 1].best, b = s.points[i].best;
    out << "\nbetween " << s.points[i - 1].value << " and " << s.points[i].value << " the fastest changes from "
        << (a >= 0 ? "[" + std::to_string(a + 1) + "]" : std::string("none")) << " to "
        << (b >= 0 ? "[" + std::to_string(b + 1) + "]" : std::string("none"));
  }
  if (s.interrupted) {
    std::size_t done = 0, all = 0;
    for (const SweepPoint& p : s.points) {
      for (const SweepCell& c : p.cells) done += c.skipped ? 0 : 1, ++all;
    }
    out << "\ninterrupted: " << done << " of " << all << " cells simulated (- : not simulated); values with a cell "
        << "missing name no fastest plan";
  } else if (s.changes.empty() && !s.points.empty()) {
    out << "\nthe fastest plan is the same at every value";
  }
  out << "\n";
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    for (std::size_t j = 0; j < s.points[i].cells.size(); ++j) {
      const SweepCell& c = s.points[i].cells[j];
      if (!c.ok && !c.skipped) out << "n/a: [" << j + 1 << "] at " << s.points[i].value << ": " << c.error << "\n";
    }
  }
  return out.str();
}

nlohmann::json to_json(const Sweep& s) {
  nlohmann::json plans = nlohmann::json::array(), points = nlohmann::json::array();
  for (const SweepPlan& p : s.plans) plans.push_back(p.key);
  for (const SweepPoint& p : s.points) {
    nlohmann::json cells = nlohmann::json::array();
    for (const SweepCell& c : p.cells) {
      if (c.ok) {
        cells.push_back({{"step_time_s", c.metrics.step_time_s}, {"tokens_per_s", c.metrics.tokens_per_s}, {"mfu", c.metrics.mfu},
                         {"fits", c.metrics.fits}, {"peak_memory_bytes", c.metrics.peak_memory_bytes}});
      } else {
        cells.push_back({{"error", c.error}, {"skipped", c.skipped}});
      }
    }
    points.push_back({{"value", p.value}, {"plans", cells}, {"best", p.best >= 0 ? nlohmann::json(p.best) : nlohmann::json()},
                      {"complete", p.complete}});
  }
  nlohmann::json changes = nlohmann::json::array();
  for (std::size_t i : s.changes) {
    changes.push_back({{"between", {s.points[i - 1].value, s.points[i].value}},
                       {"from", s.points[i - 1].best >= 0 ? nlohmann::json(s.points[i - 1].best) : nlohmann::json()},
                       {"to", s.points[i].best >= 0 ? nlohmann::json(s.points[i].best) : nlohmann::json()}});
  }
  return {{"axis", s.axis.key()}, {"plans", plans}, {"points", points}, {"changes", changes}, {"interrupted", s.interrupted}};
}

}  // namespace stagecraft::planner
