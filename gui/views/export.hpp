// Exports (docs/gui.md "Export"): each writes what the command line writes for the same thing —
// plan JSON (spec::to_json), DeepSpeed JSON (planner::to_deepspeed, whose warnings the caller
// shows before saving), the simulated trace (trace::write_trace, opens in Perfetto), the search
// (planner::to_json, as `search --json`), the table as CSV (visible rows, raw units) — and the
// step views as PNG or SVG (by the file's extension), painted by the same routines as the screen.
// Every function throws std::runtime_error naming the file when it cannot write.
#pragma once

#include <QAbstractItemModel>
#include <QSize>
#include <QWidget>

#include <string>
#include <vector>

#include "gui/jobs/plan_job.hpp"
#include "gui/render/paint_timeline.hpp"
#include "planner/search.hpp"

namespace stagecraft::gui {

void export_plan(const std::string& path, const planner::Evaluated& e, const std::string& source);
// Returns the DeepSpeed warnings (written into the log by the caller).
std::vector<std::string> deepspeed_warnings(const planner::Evaluated& e, const spec::Training& t);
void export_deepspeed(const std::string& path, const planner::Evaluated& e, const spec::Training& t);
void export_trace(const std::string& path, const PlanView& v);
void export_search(const std::string& path, const planner::SearchResult& r);
// The model's rows in view order with raw values (kRawRole) under unit-named headers.
void export_csv(const std::string& path, const QAbstractItemModel& rows);
// The timeline (and the memory of `rank` under it) of a plan over `window`, at `size` pixels.
void export_step_image(const std::string& path, const PlanView& v, TimelineStyle style, const TimeWindow& window,
                       int64_t rank, QSize size);

// A chart (the Pareto scatter, the what-if sweep) as PNG or SVG by extension, rendered by the
// widget's own paint at its current size.
void export_widget_image(const std::string& path, QWidget& widget);

}  // namespace stagecraft::gui
