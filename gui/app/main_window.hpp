// The main window (docs/gui.md "Main window"): the inputs dock on the left; the Explore
// workspace — Plans | Pareto | Why over the selected plan's step (timeline over memory, one time
// axis); the details dock; Search / Stop with progress in the toolbar; the search's counts in the
// status bar. One selection: choosing a plan anywhere (table, scatter, explanation) selects it in
// every view and simulates its step.
#pragma once

#include <QMainWindow>

#include <memory>
#include <string>

#include "gui/jobs/plan_job.hpp"
#include "gui/jobs/search_worker.hpp"
#include "gui/model/plan_table_model.hpp"

class QAction;
class QCheckBox;
class QComboBox;
class QLabel;
class QProgressBar;
class QTabWidget;
class QTextBrowser;

namespace stagecraft::gui {

class ExplainView;
class InputsPanel;
class MemoryView;
class ParetoView;
class PlanTableView;
class TimeAxis;
class TimelineView;
class WhatIfPanel;
class CompareView;
class SpaceMapView;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  InputsPanel* inputs() const { return inputs_; }
  PlanTableModel* table_model() const { return model_; }
  PlanTableView* table() const { return table_; }
  ParetoView* pareto() const { return pareto_; }
  ExplainView* explain() const { return explain_; }
  TimelineView* timeline() const { return timeline_; }
  MemoryView* memory() const { return memory_; }
  TimeAxis* time_axis() const { return axis_; }
  SearchWorker* worker() const { return worker_; }
  PlanJobs* jobs() const { return jobs_; }
  QTabWidget* plan_tabs() const { return plan_tabs_; }
  QProgressBar* progress() const { return progress_; }
  QTextBrowser* details() const { return details_; }
  WhatIfPanel* whatif() const { return whatif_; }
  CompareView* compare() const { return compare_; }
  SpaceMapView* space_map_view() const { return space_map_; }
  QTabWidget* workspaces() const { return workspaces_; }
  const SearchResultPtr& result() const { return result_; }
  const std::string& selected_key() const { return selected_; }

  // The `stagecraft search …` command of the current inputs (also on the clipboard via the menu).
  std::string command() const;

 public slots:
  void start_search();
  // Continues the latest search with the same inputs in the results store, reusing its plans
  // (--resume); only with a results db.
  void resume_search();
  void stop_search();
  void select_plan(const QString& key);
  // A plan file (or bundled name) of the current inputs: simulated, added to the table, selected.
  // False with the loader's message in the status bar when it does not load or fit the inputs.
  bool open_plan(const std::string& plan);
  // A stored search's plans into the table, Pareto and space map (read-only: no search runs).
  // False with the store's message in the status bar.
  bool open_stored(const std::string& path, int64_t search_id);
  // Sessions (gui/model/session.hpp): save what is on screen; open restores the inputs, searches
  // (resuming from the results db when there is one), selects the plan and loads the traces.
  void save_session(const std::string& path) const;
  bool open_session(const std::string& path);
  // A file dropped on the window, routed by its content; false when it is not one the GUI reads.
  bool open_file(const std::string& path);
  // Saves a PNG of the window with each plan tab in front, and of the schedule view, into `dir`,
  // each through io::AtomicFile (never a truncated PNG over a good one). Throws spec::SpecError
  // naming the file that could not be written.
  void save_screenshots(const QString& dir);
  // Why the latest search failed ("" when it did not).
  const QString& search_error() const { return search_error_; }

 signals:
  // The selected plan's step is on screen.
  void step_ready();
  // The selected plan's step could not be simulated (the job's message).
  void step_failed(const QString& key, const QString& why);
  void search_done();

 private:
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;
  void on_batch(const PlanBatch& rows, const planner::Progress& p);
  void on_finished(const SearchResultPtr& r, const SpacePtr& space);
  void on_view(const PlanViewPtr& v);
  void show_instruction(int row, std::size_t index);
 public:
  // Details of the selected time range: each rank's partition of it, each row's busy time and ops.
  void show_range();
  void show_critical_path();

 private:
  void update_title();
  void build_menus();
  void export_with_dialog(const QString& what);

  InputsPanel* inputs_ = nullptr;
  PlanTableModel* model_ = nullptr;
  PlanTableView* table_ = nullptr;
  ParetoView* pareto_ = nullptr;
  ExplainView* explain_ = nullptr;
  TimeAxis* axis_ = nullptr;
  TimelineView* timeline_ = nullptr;
  MemoryView* memory_ = nullptr;
  QTabWidget* plan_tabs_ = nullptr;
  QTextBrowser* details_ = nullptr;
  WhatIfPanel* whatif_ = nullptr;
  CompareView* compare_ = nullptr;
  SpaceMapView* space_map_ = nullptr;
  QTabWidget* workspaces_ = nullptr;
  Inputs searched_;
  QProgressBar* progress_ = nullptr;
  QLabel* progress_label_ = nullptr;
  QLabel* step_title_ = nullptr;
  QCheckBox* schedule_ = nullptr;
  QCheckBox* critical_ = nullptr;
  QComboBox* memory_rank_ = nullptr;
  QAction *search_action_ = nullptr, *stop_action_ = nullptr, *resume_action_ = nullptr;
  bool resume_next_ = false;
  SearchWorker* worker_ = nullptr;
  PlanJobs* jobs_ = nullptr;
  SearchResultPtr result_;
  SpacePtr space_;
  std::optional<planner::Baseline> baseline_;
  PlanViewPtr view_;
  std::string selected_;
  QString search_error_;
};

}  // namespace stagecraft::gui
