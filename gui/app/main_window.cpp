#include "gui/app/main_window.hpp"

#include <set>
#include <tuple>

#include <QAction>
#include <QChartView>
#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QEventLoop>
#include <QTimer>
#include <QDockWidget>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QInputDialog>
#include <QMimeData>
#include <QUrl>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextBrowser>
#include <QToolBar>
#include <QVBoxLayout>

#include "core/program/format.hpp"
#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "core/text/format.hpp"
#include "gui/views/explain_view.hpp"
#include "gui/views/export.hpp"
#include "gui/views/inputs_panel.hpp"
#include "gui/views/pareto_view.hpp"
#include "gui/views/plan_table_view.hpp"
#include "gui/views/timeline_view.hpp"
#include "gui/views/whatif_panel.hpp"
#include "gui/views/space_map_view.hpp"
#include "gui/views/compare_view.hpp"
#include "gui/model/session.hpp"
#include "gui/model/stored.hpp"
#include "gui/render/palette.hpp"
#include <numeric>
#include "planner/report.hpp"
#include "sim/report.hpp"

namespace stagecraft::gui {

namespace {
QString html_escaped(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  worker_ = new SearchWorker(this);
  jobs_ = new PlanJobs(this);
  model_ = new PlanTableModel(this);
  axis_ = new TimeAxis(this);

  inputs_ = new InputsPanel;
  auto* inputs_dock = new QDockWidget(QStringLiteral("Inputs"), this);
  inputs_dock->setObjectName(QStringLiteral("inputs"));
  auto* inputs_scroll = new QScrollArea;
  inputs_scroll->setWidget(inputs_);
  inputs_scroll->setWidgetResizable(true);
  inputs_dock->setWidget(inputs_scroll);
  inputs_scroll->setMinimumWidth(330);
  inputs_dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
  addDockWidget(Qt::LeftDockWidgetArea, inputs_dock);

  table_ = new PlanTableView(model_);
  pareto_ = new ParetoView;
  explain_ = new ExplainView;
  explain_->clear_result(QStringLiteral("Search to see why the best plan wins."));
  plan_tabs_ = new QTabWidget;
  plan_tabs_->addTab(table_, QStringLiteral("Plans"));
  auto* pareto_tab = new QWidget;
  auto* pareto_bar = new QHBoxLayout;
  auto* colour_by = new QComboBox;
  for (const char* axis : {"zero", "tp", "cp", "ep", "pp", "schedule", "recompute"}) colour_by->addItem(QString::fromUtf8(axis));
  colour_by->setToolTip(QStringLiteral("the plan axis that colours the points"));
  connect(colour_by, &QComboBox::currentTextChanged, this, [this](const QString& axis) {
    pareto_->set_colour_by(axis.toStdString());
    pareto_->select_key(selected_);
  });
  auto* clear_brush = new QPushButton(QStringLiteral("Show all plans in the table"));
  clear_brush->setToolTip(QStringLiteral("drag a rectangle on the chart to keep only the plans inside it in the table"));
  connect(clear_brush, &QPushButton::clicked, this, [this] { table_->proxy()->set_keys(std::nullopt); });
  pareto_bar->addWidget(new QLabel(QStringLiteral("colour by")));
  pareto_bar->addWidget(colour_by);
  pareto_bar->addStretch(1);
  pareto_bar->addWidget(clear_brush);
  auto* pareto_layout = new QVBoxLayout(pareto_tab);
  pareto_layout->setContentsMargins(0, 0, 0, 0);
  pareto_layout->addLayout(pareto_bar);
  pareto_layout->addWidget(pareto_, 1);
  plan_tabs_->addTab(pareto_tab, QStringLiteral("Pareto"));
  space_map_ = new SpaceMapView;
  plan_tabs_->addTab(space_map_, QStringLiteral("Space map"));
  plan_tabs_->addTab(explain_, QStringLiteral("Why"));

  // the step of the selected plan: timeline over memory
  timeline_ = new TimelineView(axis_);
  memory_ = new MemoryView(axis_);
  step_title_ = new QLabel(QStringLiteral("No plan selected"));
  step_title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  schedule_ = new QCheckBox(QStringLiteral("schedule view"));
  schedule_->setToolTip(QStringLiteral("compute rows only, with micro-batch numbers (as the papers draw schedules)"));
  connect(schedule_, &QCheckBox::toggled, timeline_, &TimelineView::set_schedule);
  critical_ = new QCheckBox(QStringLiteral("critical path"));
  critical_->setToolTip(QStringLiteral("the chain of instructions that sets the step's length; the other bars faded"));
  connect(critical_, &QCheckBox::toggled, this, [this](bool on) {
    timeline_->set_critical_path(on);
    show_critical_path();
  });
  auto* fit = new QPushButton(QStringLiteral("Fit"));
  fit->setToolTip(QStringLiteral("show the whole step (F)"));
  connect(fit, &QPushButton::clicked, axis_, &TimeAxis::fit);
  memory_rank_ = new QComboBox;
  memory_rank_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  memory_rank_->setMinimumContentsLength(22);
  memory_rank_->setToolTip(QStringLiteral("whose memory is drawn under the timeline"));
  connect(memory_rank_, &QComboBox::activated, this, [this](int i) { memory_->set_rank(memory_rank_->itemData(i).toLongLong()); });
  auto* step_bar = new QHBoxLayout;
  step_bar->addWidget(step_title_, 1);
  step_bar->addWidget(schedule_);
  step_bar->addWidget(critical_);
  step_bar->addWidget(new QLabel(QStringLiteral("memory of")));
  step_bar->addWidget(memory_rank_);
  step_bar->addWidget(fit);
  auto* timeline_scroll = new QScrollArea;
  timeline_scroll->setWidget(timeline_);
  timeline_scroll->setWidgetResizable(true);
  timeline_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  auto* step = new QWidget;
  auto* step_layout = new QVBoxLayout(step);
  step_layout->setContentsMargins(0, 0, 0, 0);
  step_layout->addLayout(step_bar);
  auto* step_split = new QSplitter(Qt::Vertical);
  step_split->addWidget(timeline_scroll);
  step_split->addWidget(memory_);
  step_split->setStretchFactor(0, 3);
  step_split->setStretchFactor(1, 1);
  step_layout->addWidget(step_split, 1);

  auto* explore = new QSplitter(Qt::Vertical);
  explore->addWidget(plan_tabs_);
  explore->addWidget(step);
  explore->setStretchFactor(0, 2);
  explore->setStretchFactor(1, 3);
  workspaces_ = new QTabWidget;
  workspaces_->addTab(explore, QStringLiteral("Explore"));
  compare_ = new CompareView;
  workspaces_->addTab(compare_, QStringLiteral("Compare"));
  setCentralWidget(workspaces_);

  details_ = new QTextBrowser;
  details_->setOpenLinks(false);
  details_->setMinimumWidth(340);
  auto* details_dock = new QDockWidget(QStringLiteral("Details"), this);
  details_dock->setObjectName(QStringLiteral("details"));
  details_dock->setWidget(details_);
  details_dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
  addDockWidget(Qt::RightDockWidgetArea, details_dock);
  whatif_ = new WhatIfPanel;
  auto* whatif_dock = new QDockWidget(QStringLiteral("What-if"), this);
  whatif_dock->setObjectName(QStringLiteral("whatif"));
  whatif_dock->setWidget(whatif_);
  whatif_dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
  addDockWidget(Qt::BottomDockWidgetArea, whatif_dock);

  // toolbar: search, stop, progress
  auto* bar = addToolBar(QStringLiteral("Search"));
  bar->setObjectName(QStringLiteral("search"));
  bar->setMovable(false);
  search_action_ = bar->addAction(QStringLiteral("▶ Search"), this, &MainWindow::start_search);
  search_action_->setShortcut(QKeySequence(QStringLiteral("Ctrl+R")));
  search_action_->setToolTip(QStringLiteral("search the plan space (Ctrl+R)"));
  stop_action_ = bar->addAction(QStringLiteral("■ Stop"), this, &MainWindow::stop_search);
  stop_action_->setShortcut(QKeySequence(Qt::Key_Escape));
  stop_action_->setToolTip(QStringLiteral("stop after the batch in flight, keeping what was found (Esc)"));
  stop_action_->setEnabled(false);
  resume_action_ = bar->addAction(QStringLiteral("↻ Resume"), this, &MainWindow::resume_search);
  resume_action_->setToolTip(QStringLiteral("continue the stopped search from the results db, reusing its plans (--resume)"));
  resume_action_->setVisible(false);
  progress_ = new QProgressBar;
  progress_->setMaximumWidth(260);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setTextVisible(false);
  bar->addSeparator();
  bar->addWidget(progress_);
  progress_label_ = new QLabel(QStringLiteral("  ready"));
  bar->addWidget(progress_label_);

  build_menus();

  connect(inputs_, &InputsPanel::changed, this, [this] {
    search_action_->setEnabled(!worker_->running() && inputs_->loaded().has_value());
    search_action_->setToolTip(inputs_->loaded() ? QStringLiteral("search the plan space (Ctrl+R)") : inputs_->error());
    update_title();
  });
  connect(worker_, &SearchWorker::batch, this, &MainWindow::on_batch);
  connect(worker_, &SearchWorker::finished, this, &MainWindow::on_finished);
  connect(worker_, &SearchWorker::failed, this, [this](const QString& why) {
    inputs_->set_enabled_inputs(true);
    search_action_->setEnabled(inputs_->loaded().has_value());
    stop_action_->setEnabled(false);
    progress_->setRange(0, 1);
    progress_label_->setText(QStringLiteral("  search failed: ") + why);
    search_error_ = why;
    emit search_done();
  });
  connect(table_, &PlanTableView::plan_selected, this, &MainWindow::select_plan);
  connect(pareto_, &ParetoView::plan_selected, this, &MainWindow::select_plan);
  connect(pareto_, &ParetoView::rectangle_selected, this, [this](std::unordered_set<std::string> keys) {
    table_->proxy()->set_keys(std::move(keys));
    statusBar()->showMessage(QStringLiteral("table: the %1 plans inside the rectangle (Pareto tab: \"Show all plans\" to clear)")
                                 .arg(table_->proxy()->rowCount()));
  });
  connect(explain_, &ExplainView::plan_selected, this, &MainWindow::select_plan);
  connect(space_map_, &SpaceMapView::plan_selected, this, &MainWindow::select_plan);
  connect(jobs_, &PlanJobs::ready, this, &MainWindow::on_view);
  connect(whatif_, &WhatIfPanel::show_step, this, [this](const PlanViewPtr& modified) {
    const PlanViewPtr& v = modified ? modified : view_;
    timeline_->set_view(v);
    memory_->set_view(v);
    if (v) {
      step_title_->setText(QStringLiteral("<b>%1</b> — %2 step %3 s")
                               .arg(html_escaped(v->key), modified ? QStringLiteral("what-if") : QStringLiteral("simulated"))
                               .arg(v->sim.metrics.step_time_s, 0, 'f', 3));
    }
  });
  connect(whatif_, &WhatIfPanel::replan, this, [this](std::vector<spec::Override> edits, int64_t nodes) {
    Inputs in = inputs_->inputs();
    for (const spec::Override& e : edits) {
      std::erase_if(in.overrides, [&](const spec::Override& o) { return o.key() == e.key(); });
      in.overrides.push_back(e);
    }
    in.nodes = nodes;
    inputs_->set_inputs(in);
    start_search();
  });
  connect(jobs_, &PlanJobs::failed, this, [this](const QString& key, const QString& why) {
    step_title_->setText(QStringLiteral("%1: could not simulate: %2").arg(key, why));
    emit step_failed(key, why);
  });
  connect(timeline_, &TimelineView::range_selected, this, &MainWindow::show_range);
  connect(timeline_, &TimelineView::instruction_selected, this, [this](int row, qulonglong index) {
    show_instruction(row, static_cast<std::size_t>(index));
  });
  connect(memory_, &MemoryView::instruction_clicked, this, [this](qlonglong rank, int instr) {
    if (!view_) return;
    const traces::TimelineModel& m = view_->timeline;
    for (std::size_t r = 0; r < m.rows().size(); ++r) {
      if (m.rows()[r].rank != rank) continue;
      const auto& ids = m.rows()[r].instr;
      const auto it = std::find(ids.begin(), ids.end(), instr);
      if (it == ids.end()) continue;
      const TimelineMark mark{static_cast<int>(r), static_cast<std::size_t>(it - ids.begin())};
      timeline_->select(mark);
      show_instruction(mark.row, mark.index);
      return;
    }
  });
  setAcceptDrops(true);
  resize(1500, 950);
  update_title();
  search_action_->setEnabled(inputs_->loaded().has_value());
}

MainWindow::~MainWindow() = default;

std::string MainWindow::command() const { return search_command(inputs_->inputs()); }

void MainWindow::build_menus() {
  QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
  file->addAction(QStringLiteral("Open session…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Session"), QString(), QStringLiteral("Sessions (*.stagecraft-session.json)"));
    if (!path.isEmpty()) open_session(path.toStdString());
  });
  file->addAction(QStringLiteral("Save session…"), this, [this] {
    QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Session"), QString(), QStringLiteral("Sessions (*.stagecraft-session.json)"));
    if (path.isEmpty()) return;
    if (!path.endsWith(QStringLiteral(".stagecraft-session.json"))) path += QStringLiteral(".stagecraft-session.json");
    try {
      save_session(path.toStdString());
    } catch (const std::exception& e) {
      QMessageBox::critical(this, QStringLiteral("Save session"), QString::fromStdString(e.what()));
    }
  });
  file->addAction(QStringLiteral("Open results db…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Results db"), QString(), QStringLiteral("SQLite (*.sqlite *.db);;All (*)"));
    if (path.isEmpty()) return;
    std::vector<planner::StoredSearch> searches;
    try {
      searches = stored_searches(path.toStdString());
    } catch (const std::exception& e) {
      QMessageBox::critical(this, QStringLiteral("Results db"), QString::fromStdString(e.what()));
      return;
    }
    if (searches.empty()) {
      QMessageBox::information(this, QStringLiteral("Results db"), QStringLiteral("No search is recorded in ") + path);
      return;
    }
    QStringList items;
    for (const planner::StoredSearch& s : searches) {
      items << QStringLiteral("#%1 %2: %3 on %4 GPUs of %5, %6 plans (%7)")
                   .arg(s.id)
                   .arg(QString::fromStdString(s.status), QString::fromStdString(s.model))
                   .arg(s.gpus)
                   .arg(QString::fromStdString(s.cluster))
                   .arg(s.counts.evaluated)
                   .arg(QString::fromStdString(s.finished_at.empty() ? s.started_at : s.finished_at));
    }
    bool ok = false;
    const QString pick = QInputDialog::getItem(this, QStringLiteral("Results db"), QStringLiteral("Search"), items, static_cast<int>(items.size()) - 1, false, &ok);
    if (!ok) return;
    open_stored(path.toStdString(), searches[static_cast<std::size_t>(items.indexOf(pick))].id);
  });
  file->addAction(QStringLiteral("Quit"), QKeySequence::Quit, qApp, &QApplication::quit);
  QMenu* search = menuBar()->addMenu(QStringLiteral("&Search"));
  search->addAction(search_action_);
  search->addAction(stop_action_);
  search->addAction(QStringLiteral("Copy as command"), QKeySequence(QStringLiteral("Ctrl+Shift+C")), this, [this] {
    QApplication::clipboard()->setText(QString::fromStdString(command()));
    statusBar()->showMessage(QStringLiteral("copied: ") + QString::fromStdString(command()), 8000);
  });
  QMenu* view = menuBar()->addMenu(QStringLiteral("&View"));
  view->addAction(QStringLiteral("Fit step"), QKeySequence(Qt::Key_F), axis_, &TimeAxis::fit);
  view->addAction(QStringLiteral("Schedule view"), this, [this] { schedule_->toggle(); });
  QMenu* ex = menuBar()->addMenu(QStringLiteral("&Export"));
  for (const char* what : {"Plan JSON…", "DeepSpeed JSON…", "Simulated trace (Perfetto)…", "Search JSON…", "Table CSV…",
                           "Step image (PNG or SVG)…", "Pareto chart (PNG or SVG)…", "Sweep chart (PNG or SVG)…"}) {
    const QString w = QString::fromUtf8(what);
    ex->addAction(w, this, [this, w] { export_with_dialog(w); });
  }
}

void MainWindow::export_with_dialog(const QString& what) {
  const planner::Evaluated* e = nullptr;
  if (const int row = model_->row_of(selected_); row >= 0) e = &model_->plan(row);
  const bool needs_plan = !what.startsWith(QStringLiteral("Search")) && !what.startsWith(QStringLiteral("Table")) &&
                          !what.startsWith(QStringLiteral("Pareto")) && !what.startsWith(QStringLiteral("Sweep"));
  if (needs_plan && !e) {
    QMessageBox::information(this, QStringLiteral("Export"), QStringLiteral("Select a plan first."));
    return;
  }
  if (what.startsWith(QStringLiteral("Search")) && !result_) {
    QMessageBox::information(this, QStringLiteral("Export"), QStringLiteral("Run a search first."));
    return;
  }
  if (what.startsWith(QStringLiteral("DeepSpeed"))) {
    const std::vector<std::string> warnings = deepspeed_warnings(*e, space_->training());
    if (!warnings.empty()) {
      QString text = QStringLiteral("DeepSpeed cannot run this plan exactly as simulated:\n");
      for (const std::string& w : warnings) text += QStringLiteral("\n• ") + QString::fromStdString(w);
      if (QMessageBox::warning(this, QStringLiteral("DeepSpeed export"), text, QMessageBox::Save | QMessageBox::Cancel) !=
          QMessageBox::Save) {
        return;
      }
    }
  }
  const QString path = QFileDialog::getSaveFileName(this, what);
  if (path.isEmpty()) return;
  try {
    const std::string p = path.toStdString();
    if (what.startsWith(QStringLiteral("Plan"))) {
      export_plan(p, *e, "stagecraft-gui: " + e->key + " for " + space_->model().name + " on " + std::to_string(space_->gpus()) +
                             " GPUs of " + space_->cluster().name);
    } else if (what.startsWith(QStringLiteral("DeepSpeed"))) {
      export_deepspeed(p, *e, space_->training());
    } else if (what.startsWith(QStringLiteral("Simulated")) && view_) {
      export_trace(p, *view_);
    } else if (what.startsWith(QStringLiteral("Search"))) {
      export_search(p, *result_);
    } else if (what.startsWith(QStringLiteral("Table"))) {
      export_csv(p, *table_->proxy());
    } else if (what.startsWith(QStringLiteral("Pareto"))) {
      export_widget_image(p, *pareto_);
    } else if (what.startsWith(QStringLiteral("Sweep"))) {
      export_widget_image(p, *whatif_->sweep_chart());
    } else if (view_) {
      export_step_image(p, *view_, timeline_->style(), axis_->window(), memory_->rank(), QSize(1600, 900));
    }
    statusBar()->showMessage(QStringLiteral("wrote ") + path, 8000);
  } catch (const std::exception& ex) {
    QMessageBox::critical(this, what, QString::fromStdString(ex.what()));
  }
}

void MainWindow::update_title() {
  const Inputs in = inputs_->inputs();
  QString t = QStringLiteral("Stagecraft — %1 · %2 × %3 nodes · %4")
                  .arg(QString::fromStdString(in.model), QString::fromStdString(in.cluster))
                  .arg(in.nodes)
                  .arg(QString::fromStdString(in.training));
  if (const auto& l = inputs_->loaded()) t += QStringLiteral(" (%1 GPUs)").arg(l->space->gpus());
  setWindowTitle(t);
}

void MainWindow::start_search() {
  if (worker_->running()) return;
  const auto& l = inputs_->loaded();
  if (!l) {
    progress_label_->setText(QStringLiteral("  cannot search: ") + inputs_->error());
    return;
  }
  model_->set_baseline(l->baseline);
  model_->clear();
  baseline_ = l->baseline;
  result_.reset();
  search_error_.clear();
  selected_.clear();
  view_.reset();
  timeline_->set_view(nullptr);
  memory_->set_view(nullptr);
  table_->proxy()->set_keys(std::nullopt);
  explain_->clear_result(QStringLiteral("searching…"));
  pareto_->set_plans({}, {}, l->space->cluster().gpu.memory_bytes, std::nullopt);
  inputs_->set_enabled_inputs(false);
  search_action_->setEnabled(false);
  stop_action_->setEnabled(true);
  stop_action_->setText(QStringLiteral("■ Stop"));
  progress_->setRange(0, 0);   // indeterminate until the first batch reports
  progress_label_->setText(QStringLiteral("  enumerating and pruning…"));
  statusBar()->clearMessage();
  searched_ = inputs_->inputs();
  searched_.resume = resume_next_ && !searched_.db.empty();
  resume_next_ = false;
  resume_action_->setVisible(false);
  worker_->start(l->space, searched_);
}

void MainWindow::resume_search() {
  resume_next_ = true;
  start_search();
}

void MainWindow::stop_search() {
  if (!worker_->running()) return;
  worker_->stop();
  stop_action_->setEnabled(false);
  stop_action_->setText(QStringLiteral("Stopping after this batch…"));
  progress_label_->setText(QStringLiteral("  stopping after this batch…"));
}

void MainWindow::on_batch(const PlanBatch& rows, const planner::Progress& p) {
  model_->append(*rows);
  progress_->setRange(0, static_cast<int>(std::min<int64_t>(p.evaluated + p.remaining, 1 << 30)));
  progress_->setValue(static_cast<int>(std::min<int64_t>(p.evaluated, 1 << 30)));
  QString text = QStringLiteral("  %1 candidates · %2 pruned · %3 simulated · ≤ %4 left")
                     .arg(QString::fromStdString(text::with_commas(p.counts.candidates)),
                          QString::fromStdString(text::with_commas(p.counts.pruned())))
                     .arg(p.evaluated)
                     .arg(p.remaining);
  if (p.best_step_time_s > 0) text += QStringLiteral(" · best %1 s").arg(p.best_step_time_s, 0, 'f', 3);
  progress_label_->setText(text);
}

void MainWindow::on_finished(const SearchResultPtr& r, const SpacePtr& space) {
  result_ = r;
  space_ = space;
  model_->set_result(*r);
  pareto_->set_plans(r->evaluated, r->pareto, r->capacity_bytes, baseline_);
  explain_->set_result(*r, baseline_);
  {
    std::vector<int64_t> pp;
    for (int64_t tp : space->tp_values()) {
      for (int64_t p : space->pp_values(tp)) {
        if (std::find(pp.begin(), pp.end(), p) == pp.end()) pp.push_back(p);
      }
    }
    std::sort(pp.begin(), pp.end());
    space_map_->set_map(space_map(space->tp_values(), pp, r->evaluated));
  }
  inputs_->set_enabled_inputs(true);
  search_action_->setEnabled(inputs_->loaded().has_value());
  stop_action_->setEnabled(false);
  stop_action_->setText(QStringLiteral("■ Stop"));
  progress_->setRange(0, 1);
  progress_->setValue(1);
  QString done = r->interrupted ? QStringLiteral("  stopped: ") : QStringLiteral("  done: ");
  done += QStringLiteral("%1 simulated in %2 s").arg(r->counts.evaluated).arg(r->seconds, 0, 'f', 2);
  if (r->interrupted) done += QStringLiteral(", %1 not explored").arg(r->counts.unexplored);
  if (r->resumed) done += QStringLiteral(" (resumed: %1 plans reused from the results db)").arg(r->counts.reused);
  resume_action_->setVisible(r->interrupted && !searched_.db.empty());
  progress_label_->setText(done);
  statusBar()->showMessage(QString::fromStdString(planner::format_counts(*r)));
  if (r->top.empty()) {
    step_title_->setText(QStringLiteral("No plan: ") + QString::fromStdString(r->reason));
  } else {
    select_plan(QString::fromStdString(r->top.front().key));
  }
  emit search_done();
}

void MainWindow::select_plan(const QString& qkey) {
  const std::string key = qkey.toStdString();
  const int row = model_->row_of(key);
  if (row < 0 || (key == selected_ && view_)) return;
  selected_ = key;
  table_->select_key(key);
  pareto_->select_key(key);
  const planner::Evaluated& e = model_->plan(row);
  step_title_->setText(QStringLiteral("simulating %1 …").arg(qkey));
  QString html = QStringLiteral("<h3>%1</h3><pre style=\"white-space: pre-wrap\">").arg(html_escaped(key));
  html += html_escaped(sim::report_text(e.metrics, e.plan, space_ ? space_->gpus() : e.plan.world(),
                                         space_ ? space_->cluster().name : std::string())) + QStringLiteral("</pre>");
  details_->setHtml(html);
  if (!space_) space_ = inputs_->loaded() ? inputs_->loaded()->space : nullptr;
  if (space_) jobs_->request(space_, e.plan, key);
}

bool MainWindow::open_plan(const std::string& name) {
  const auto& l = inputs_->loaded();
  if (!l) {
    statusBar()->showMessage(QStringLiteral("cannot open a plan: ") + inputs_->error());
    return false;
  }
  try {
    const spec::Plan plan = spec::load_plan(spec::resolve_config(spec::ConfigKind::kPlan, name));
    spec::validate_plan(plan, l->space->model(), l->space->training(), l->space->gpus());
    planner::Evaluated e;
    e.plan = plan;
    e.key = planner::plan_key(plan);
    e.metrics = planner::simulate_plan(*l->space, plan);
    if (!space_) space_ = l->space;
    if (model_->row_of(e.key) < 0) model_->append(std::span<const planner::Evaluated>(&e, 1));
    select_plan(QString::fromStdString(e.key));
    return true;
  } catch (const std::exception& ex) {
    statusBar()->showMessage(QString::fromStdString(ex.what()));
    return false;
  }
}

void MainWindow::save_session(const std::string& path) const {
  Session s;
  s.inputs = inputs_->inputs();
  s.axes = inputs_->axes();
  s.selected = selected_;
  s.measured = compare_->measured_files();
  write_session(s, path);
}

bool MainWindow::open_session(const std::string& path) {
  Session s;
  try {
    s = read_session(path);
  } catch (const std::exception& e) {
    statusBar()->showMessage(QString::fromStdString(e.what()));
    return false;
  }
  inputs_->set_inputs(s.inputs);
  for (const AxisChoice& a : s.axes) {
    for (const std::string& v : a.values) inputs_->set_checked(a.axis, v, false);
  }
  if (!inputs_->loaded()) {
    statusBar()->showMessage(QStringLiteral("session ") + QString::fromStdString(path) + QStringLiteral(": ") + inputs_->error());
    return false;
  }
  // after the search: the plan; once its step is drawn: the measured traces (each once)
  auto pending = std::make_shared<Session>(s);
  auto after_search = std::make_shared<QMetaObject::Connection>();
  *after_search = connect(this, &MainWindow::search_done, this, [this, pending, after_search] {
    disconnect(*after_search);
    if (!pending->selected.empty() && model_->row_of(pending->selected) >= 0) select_plan(QString::fromStdString(pending->selected));
    if (pending->measured.empty()) return;
    auto after_step = std::make_shared<QMetaObject::Connection>();
    *after_step = connect(this, &MainWindow::step_ready, this, [this, pending, after_step] {
      if (!pending->selected.empty() && selected_ != pending->selected) return;
      disconnect(*after_step);
      compare_->load_measured(pending->measured);
    });
  });
  if (s.inputs.db.empty()) {
    start_search();
  } else {
    resume_search();
  }
  return true;
}

bool MainWindow::open_file(const std::string& path) {
  Inputs in = inputs_->inputs();
  switch (file_kind(path)) {
    case FileKind::kModel: in.model = path; break;
    case FileKind::kCluster: in.cluster = path; break;
    case FileKind::kTraining: in.training = path; break;
    case FileKind::kDeepSpeed: in.deepspeed = path; break;
    case FileKind::kPlan: return open_plan(path);
    case FileKind::kSession: return open_session(path);
    case FileKind::kTrace:
      workspaces_->setCurrentWidget(compare_);
      return compare_->load_measured({path});
    case FileKind::kResultsDb: {
      std::vector<planner::StoredSearch> searches;
      try {
        searches = stored_searches(path);
      } catch (const std::exception& e) {
        statusBar()->showMessage(QString::fromStdString(e.what()));
        return false;
      }
      return !searches.empty() && open_stored(path, searches.back().id);
    }
    case FileKind::kUnknown:
      statusBar()->showMessage(QString::fromStdString(path) + QStringLiteral(": not a model, cluster, training, plan, DeepSpeed "
                                                                             "config, trace, session or results db"));
      return false;
  }
  inputs_->set_inputs(in);
  return true;
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  for (const QUrl& url : e->mimeData()->urls()) {
    if (url.isLocalFile()) open_file(url.toLocalFile().toStdString());
  }
}

bool MainWindow::open_stored(const std::string& path, int64_t search_id) {
  std::vector<planner::Evaluated> plans;
  try {
    plans = stored_plans(path, search_id);
  } catch (const std::exception& e) {
    statusBar()->showMessage(QString::fromStdString(e.what()));
    return false;
  }
  // The inputs must be the stored search's for its plans to be simulated again: the panel's are
  // used, and a plan they cannot run says so when selected.
  result_.reset();
  baseline_.reset();
  model_->set_baseline(std::nullopt);
  model_->clear();
  model_->append(plans);
  const std::vector<planner::Evaluated> front = planner::pareto_front(plans);
  const int64_t capacity = plans.empty() ? 0 : plans.front().metrics.capacity_bytes;
  pareto_->set_plans(plans, front, capacity);
  explain_->clear_result(QStringLiteral("A stored search (%1, #%2): the explanation is made by a search; search again to see it.")
                             .arg(QString::fromStdString(path))
                             .arg(search_id));
  if (inputs_->loaded()) space_ = inputs_->loaded()->space;
  statusBar()->showMessage(QStringLiteral("%1 plans of search #%2 from %3 (read-only)").arg(plans.size()).arg(search_id).arg(QString::fromStdString(path)));
  std::vector<const planner::Evaluated*> order;
  for (const planner::Evaluated& e : plans) {
    if (e.metrics.fits) order.push_back(&e);
  }
  if (!order.empty()) {
    const auto best = std::min_element(order.begin(), order.end(), [](const auto* a, const auto* b) { return planner::better(*a, *b); });
    select_plan(QString::fromStdString((*best)->key));
  }
  return true;
}

void MainWindow::on_view(const PlanViewPtr& v) {
  view_ = v;
  compare_->set_simulated(v);
  if (space_) {
    // The sweep compares shapes: the best fitting plan of each (tp, pp, ZeRO stage, schedule), best first.
    std::vector<const planner::Evaluated*> fitting;
    for (int row = 0; row < model_->rowCount(); ++row) {
      const planner::Evaluated& e = model_->plan(row);
      if (e.metrics.fits && !e.metrics.failed && !model_->is_baseline(row)) fitting.push_back(&e);
    }
    std::sort(fitting.begin(), fitting.end(), [](const auto* a, const auto* b) { return planner::better(*a, *b); });
    std::vector<planner::SweepPlan> top;
    std::set<std::tuple<int64_t, int64_t, int, int>> shapes;
    for (const planner::Evaluated* e : fitting) {
      if (top.size() == 5) break;
      if (shapes.insert({e->plan.tp, e->plan.pp, e->plan.zero.stage, static_cast<int>(e->plan.schedule)}).second) {
        top.push_back({e->key, e->plan});
      }
    }
    if (std::none_of(top.begin(), top.end(), [&](const planner::SweepPlan& p) { return p.key == v->key; })) {
      top.insert(top.begin(), {v->key, v->plan});
    }
    const Inputs& inputs = result_ ? searched_ : inputs_->inputs();
    if (const int row = model_->row_of(v->key); row >= 0) whatif_->set_context(inputs, space_->cluster(), model_->plan(row), top);
  }
  const sim::Metrics& m = v->sim.metrics;
  step_title_->setText(QStringLiteral("<b>%1</b> — simulated step %2 s · %3 events · %4 simulated rank(s)")
                           .arg(html_escaped(v->key))
                           .arg(m.step_time_s, 0, 'f', 3)
                           .arg(v->timeline.event_count())
                           .arg(m.simulated_ranks));
  timeline_->set_view(v);
  memory_->set_view(v);
  memory_rank_->clear();
  for (const trace::MemorySample& s : v->sim.rank_peaks) {
    memory_rank_->addItem(QStringLiteral("rank %1 (peak %2)").arg(s.rank).arg(QString::fromStdString(text::short_bytes(static_cast<double>(s.total())))),
                          static_cast<qlonglong>(s.rank));
    if (s.rank == m.peak_rank) memory_rank_->setCurrentIndex(memory_rank_->count() - 1);
  }
  emit step_ready();
}

void MainWindow::show_instruction(int row, std::size_t index) {
  if (!view_) return;
  const traces::TimelineRow& r = view_->timeline.rows().at(static_cast<std::size_t>(row));
  const program::Program& prog = view_->context.program;
  const program::RoleProgram& role = prog.role_of(r.rank);
  QString html = QStringLiteral("<h3>%1</h3><pre style=\"white-space: pre-wrap\">%2</pre>")
                     .arg(html_escaped(view_->describe(static_cast<std::size_t>(row), index)),
                          html_escaped(view_->tooltip(static_cast<std::size_t>(row), index)));
  const auto deps = role.deps_of(role.instrs.at(static_cast<std::size_t>(r.instr[index] - role.first_id)));
  if (!deps.empty()) {
    html += QStringLiteral("<p><b>waits for</b></p><pre style=\"white-space: pre-wrap\">");
    for (const int32_t d : deps) html += html_escaped(program::describe(prog, role, d)) + QStringLiteral("\n");
    html += QStringLiteral("</pre>");
  }
  details_->setHtml(html);
}

void MainWindow::show_critical_path() {
  const auto& p = timeline_->critical_path();
  if (!p || !timeline_->view()) return;
  const traces::TimelineModel& m = timeline_->view()->timeline;
  QString html = QStringLiteral("<h3>critical path: %1 instructions, %2</h3><p>compute %3 · communication %4 · other %5 · "
                                "waiting no dependency explains %6</p><pre style=\"white-space: pre-wrap\">")
                     .arg(p->steps.size())
                     .arg(time_text(static_cast<double>(p->end_ns)), time_text(static_cast<double>(p->compute_ns)),
                          time_text(static_cast<double>(p->communication_ns)), time_text(static_cast<double>(p->other_ns)),
                          time_text(static_cast<double>(p->wait_ns)));
  // runs of consecutive instructions on one row collapse into one line (the long members stand out)
  for (std::size_t k = 0; k < p->steps.size();) {
    std::size_t e = k;
    int64_t busy = 0;
    while (e < p->steps.size() && p->steps[e].row == p->steps[k].row) busy += p->steps[e++].busy_ns;
    const traces::TimelineRow& r = m.rows()[p->steps[k].row];
    html += html_escaped(r.label) + QStringLiteral(": ") + QString::number(e - k) + QStringLiteral(" instruction(s) from ") +
            time_text(static_cast<double>(p->steps[k].from_ns)) + QStringLiteral(", busy ") + time_text(static_cast<double>(busy)) +
            QStringLiteral(", first ") + html_escaped(timeline_->view()->describe(p->steps[k].row, p->steps[k].index).substr(0, 40)) +
            QStringLiteral("\n");
    k = e;
  }
  html += QStringLiteral("</pre>");
  details_->setHtml(html);
}

void MainWindow::show_range() {
  const PlanViewPtr& v = timeline_->view();
  if (!v || !axis_->range()) return;
  const auto [t0, t1] = *axis_->range();
  const traces::TimelineModel& m = v->timeline;
  QString html = QStringLiteral("<h3>%1 to %2 (%3)</h3>").arg(time_text(static_cast<double>(t0)), time_text(static_cast<double>(t1)),
                                                            time_text(static_cast<double>(t1 - t0)));
  html += QStringLiteral("<table cellspacing=\"4\"><tr><th>rank</th><th>compute</th><th>exposed comm</th><th>bubble</th></tr>");
  std::vector<int64_t> ranks;
  for (const traces::TimelineRow& r : m.rows()) {
    if (ranks.empty() || ranks.back() != r.rank) ranks.push_back(r.rank);
  }
  for (int64_t rank : ranks) {
    const traces::Breakdown b = m.breakdown_in(rank, t0, t1);
    html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td></tr>")
                .arg(rank)
                .arg(time_text(b.compute_s * 1e9), time_text(b.exposed_comm_s * 1e9), time_text(b.bubble_s * 1e9));
  }
  html += QStringLiteral("</table><p><b>busy time per row</b> (largest ops)</p><table cellspacing=\"4\">");
  for (std::size_t r = 0; r < m.rows().size(); ++r) {
    const int64_t busy = m.busy_in(r, t0, t1);
    if (busy == 0) continue;
    std::vector<int64_t> ops = m.kind_time_in(r, t0, t1);
    std::vector<int> order(ops.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return ops[static_cast<std::size_t>(a)] > ops[static_cast<std::size_t>(b)]; });
    QString top;
    for (int k = 0; k < 3 && ops[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] > 0; ++k) {
      top += QStringLiteral("%1%2 %3").arg(k ? QStringLiteral(", ") : QString(), QString::fromStdString(traces::kind_name(order[static_cast<std::size_t>(k)])),
                                          time_text(static_cast<double>(ops[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])])));
    }
    html += QStringLiteral("<tr><td>%1</td><td>%2 (%3%)</td><td>%4</td></tr>")
                .arg(html_escaped(m.rows()[r].label), time_text(static_cast<double>(busy)))
                .arg(100.0 * static_cast<double>(busy) / static_cast<double>(t1 - t0), 0, 'f', 1)
                .arg(top);
  }
  html += QStringLiteral("</table>");
  details_->setHtml(html);
}

void MainWindow::save_screenshots(const QString& dir) {
  if (!QDir().mkpath(dir)) throw spec::SpecError(dir.toStdString(), "", "cannot create the folder for the screenshots");
  const auto save = [this, &dir](const QString& name) {
    export_widget_image(QDir(dir).filePath(name).toStdString(), *this);
  };
  resize(1700, 1150);
  QApplication::processEvents();
  const char* const names[] = {"plans", "pareto", "space-map", "why"};
  for (int i = 0; i < plan_tabs_->count() && i < 4; ++i) {
    plan_tabs_->setCurrentIndex(i);
    QApplication::processEvents();
    save(QStringLiteral("gui-%1.png").arg(QString::fromUtf8(names[i])));
  }
  plan_tabs_->setCurrentIndex(0);
  // The schedule view shows a pipeline: the best simulated plan with pp >= 2 when this one has none.
  const std::string shown = selected_;
  if (view_ && view_->plan.pp == 1 && result_) {
    const planner::Evaluated* piped = nullptr;
    for (const planner::Evaluated& e : result_->evaluated) {
      if (e.plan.pp >= 2 && e.metrics.fits && (!piped || planner::better(e, *piped))) piped = &e;
    }
    if (piped) {
      QEventLoop wait;
      connect(this, &MainWindow::step_ready, &wait, &QEventLoop::quit);
      QTimer::singleShot(20000, &wait, &QEventLoop::quit);
      select_plan(QString::fromStdString(piped->key));
      wait.exec();
    }
  }
  schedule_->setChecked(true);
  QApplication::processEvents();
  save(QStringLiteral("gui-schedule.png"));
  schedule_->setChecked(false);
  critical_->setChecked(true);
  QApplication::processEvents();
  save(QStringLiteral("gui-critical.png"));
  critical_->setChecked(false);
  if (selected_ != shown) {
    QEventLoop wait;
    connect(this, &MainWindow::step_ready, &wait, &QEventLoop::quit);
    QTimer::singleShot(20000, &wait, &QEventLoop::quit);
    select_plan(QString::fromStdString(shown));
    wait.exec();
  }
  if (compare_->data()) {
    workspaces_->setCurrentWidget(compare_);
    QApplication::processEvents();
    save(QStringLiteral("gui-compare.png"));
    compare_->tables()->setCurrentIndex(1);
    QApplication::processEvents();
    save(QStringLiteral("gui-compare-ranks.png"));
    compare_->tables()->setCurrentIndex(0);
    workspaces_->setCurrentIndex(0);
  }
  // the what-if sweep of the inter-node bandwidth for the top plans
  if (result_) {
    QEventLoop wait;
    connect(whatif_, &WhatIfPanel::sweep_done, &wait, &QEventLoop::quit);
    QTimer::singleShot(60000, &wait, &QEventLoop::quit);
    whatif_->run_sweep("cluster.inter_node.nic_bandwidth_Bps", 25, 800, 8);
    wait.exec();
    QApplication::processEvents();
    save(QStringLiteral("gui-whatif.png"));
  }
}

}  // namespace stagecraft::gui
