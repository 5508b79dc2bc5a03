#include "gui/views/compare_view.hpp"

#include <QCheckBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtCharts/QBarCategoryAxis>
#include <QtCharts/QBarSet>
#include <QtCharts/QChartView>
#include <QtCharts/QHorizontalStackedBarSeries>
#include <QtCharts/QValueAxis>

#include <cmath>

#include "core/text/format.hpp"
#include "gui/views/charts.hpp"
#include "gui/views/plan_table_view.hpp"
#include "gui/views/timeline_view.hpp"

namespace stagecraft::gui {

namespace {

QString percent(double e) {
  if (!std::isfinite(e)) return QStringLiteral("—");
  return QString::fromStdString(text::fmt("%+.1f%%", e * 100));
}

QTableWidgetItem* cell(const QString& text) {
  auto* i = new QTableWidgetItem(text);
  i->setFlags(i->flags() & ~Qt::ItemIsEditable);
  return i;
}

QTableWidget* table(const QStringList& headers) {
  auto* t = new QTableWidget(0, static_cast<int>(headers.size()));
  t->setHorizontalHeaderLabels(headers);
  t->verticalHeader()->hide();
  t->verticalHeader()->setDefaultSectionSize(20);
  t->horizontalHeader()->setStretchLastSection(true);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  return t;
}

}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  axis_ = new TimeAxis(this);
  sim_view_ = new TimelineView(axis_);
  meas_view_ = new TimelineView(axis_);
  banner_ = new QLabel(QStringLiteral("Select a plan, then load a measured trace of it (stagecraft run --trace, or PyTorch profiler files)."));
  banner_->setWordWrap(true);
  auto* load = new QPushButton(QStringLiteral("Load measured trace…"));
  connect(load, &QPushButton::clicked, this, [this] {
    const QStringList files = QFileDialog::getOpenFileNames(this, QStringLiteral("Measured trace"), QString(), QStringLiteral("Traces (*.json)"));
    std::vector<std::string> f;
    for (const QString& s : files) f.push_back(s.toStdString());
    if (!f.empty()) load_measured(f);
  });
  step_ = new QSpinBox;
  step_->setPrefix(QStringLiteral("measured step "));
  step_->setRange(0, 0);
  connect(step_, &QSpinBox::valueChanged, this, [this](int s) { set_step(s); });
  calibrate_ = new QPushButton(QStringLiteral("Calibrate from measured"));
  calibrate_->setEnabled(false);
  connect(calibrate_, &QPushButton::clicked, this, &CompareView::calibrate);
  overlay_ = new QCheckBox(QStringLiteral("overlay"));
  overlay_->setToolTip(QStringLiteral("measured bars coloured by their error (simulated / measured − 1; blue: the simulator is fast), "
                                      "each with its simulated counterpart outlined"));
  connect(overlay_, &QCheckBox::toggled, this, &CompareView::apply_overlay);
  use_ = new QPushButton(QStringLiteral("Use calibrated"));
  use_->setEnabled(false);
  connect(use_, &QPushButton::clicked, this, &CompareView::use_calibrated);
  auto* bar = new QHBoxLayout;
  bar->addWidget(load);
  bar->addWidget(step_);
  bar->addWidget(overlay_);
  bar->addWidget(banner_, 1);
  bar->addWidget(calibrate_);
  bar->addWidget(use_);

  const auto scrolled = [](QWidget* w) {
    auto* s = new QScrollArea;
    s->setWidget(w);
    s->setWidgetResizable(true);
    s->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    return s;
  };
  auto* timelines = new QSplitter(Qt::Vertical);
  auto* sim_box = new QWidget;
  auto* sim_layout = new QVBoxLayout(sim_box);
  sim_layout->setContentsMargins(0, 0, 0, 0);
  sim_layout->addWidget(new QLabel(QStringLiteral("<b>simulated</b>")));
  sim_layout->addWidget(scrolled(sim_view_), 1);
  auto* meas_box = new QWidget;
  auto* meas_layout = new QVBoxLayout(meas_box);
  meas_layout->setContentsMargins(0, 0, 0, 0);
  meas_layout->addWidget(new QLabel(QStringLiteral("<b>measured</b> (the same time axis)")));
  meas_layout->addWidget(scrolled(meas_view_), 1);
  timelines->addWidget(sim_box);
  timelines->addWidget(meas_box);

  summary_ = new QLabel;
  summary_->setWordWrap(true);
  kinds_ = table({QStringLiteral("kind"), QStringLiteral("simulated s"), QStringLiteral("measured s"), QStringLiteral("error"),
                  QStringLiteral("items")});
  ranks_ = table({QStringLiteral("rank"), QStringLiteral("compute sim / meas"), QStringLiteral("exposed sim / meas"),
                  QStringLiteral("bubble sim / meas")});
  grid_ = new QTableWidget;
  grid_->setToolTip(QStringLiteral("simulated / measured − 1 per rank and kind: blue the simulator is fast, red slow; the outlined cell is the largest compute error"));
  grid_->verticalHeader()->setDefaultSectionSize(20);
  worst_ = new QListWidget;
  connect(worst_, &QListWidget::currentRowChanged, this, &CompareView::select_item);
  params_ = table({QStringLiteral("parameter"), QStringLiteral("base"), QStringLiteral("fitted"), QStringLiteral("std error"),
                   QStringLiteral("status")});
  calibration_text_ = new QLabel;
  calibration_text_->setWordWrap(true);
  auto* calib_box = new QWidget;
  auto* calib_layout = new QVBoxLayout(calib_box);
  calib_layout->addWidget(calibration_text_);
  calib_layout->addWidget(params_, 1);
  auto* tabs = tabs_ = new QTabWidget;
  tabs->addTab(kinds_, QStringLiteral("Per kind"));
  breakdown_ = new QChartView;
  breakdown_->chart()->setAnimationOptions(QChart::NoAnimation);
  breakdown_->chart()->legend()->setAlignment(Qt::AlignBottom);
  breakdown_->setRenderHint(QPainter::Antialiasing, true);
  auto* per_rank = new QSplitter(Qt::Vertical);
  per_rank->addWidget(ranks_);
  per_rank->addWidget(breakdown_);
  per_rank->setStretchFactor(1, 2);
  tabs->addTab(per_rank, QStringLiteral("Per rank"));
  tabs->addTab(grid_, QStringLiteral("Rank × kind"));
  tabs->addTab(worst_, QStringLiteral("Worst items"));
  tabs->addTab(calib_box, QStringLiteral("Calibration"));
  auto* right = new QWidget;
  auto* right_layout = new QVBoxLayout(right);
  right_layout->setContentsMargins(0, 0, 0, 0);
  right_layout->addWidget(summary_);
  right_layout->addWidget(tabs, 1);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(timelines);
  split->addWidget(right);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  auto* v = new QVBoxLayout(this);
  v->addLayout(bar);
  v->addWidget(split, 1);
}

void CompareView::set_simulated(PlanViewPtr simulated) {
  simulated_ = std::move(simulated);
  calibration_.reset();
  use_->setEnabled(false);
  sim_view_->set_view(simulated_);
  if (measured_) {
    refresh();
  } else if (simulated_) {
    axis_->set_end(simulated_->timeline.end_ns());
  }
}

bool CompareView::load_measured(const std::vector<std::string>& files) {
  try {
    if (!set_measured(traces::read_trace_files(files))) return false;
    files_ = files;
    return true;
  } catch (const std::exception& e) {
    error_ = QString::fromStdString(e.what());
    banner_->setText(QStringLiteral("<span style=\"color:#b00020\">%1</span>").arg(error_.toHtmlEscaped()));
    return false;
  }
}

bool CompareView::set_measured(traces::Trace measured) {
  if (!simulated_) {
    error_ = QStringLiteral("select a plan first: its simulated step is what the measured one is compared with");
    banner_->setText(error_);
    return false;
  }
  std::optional<traces::Trace> before = std::move(measured_);
  measured_ = std::move(measured);
  calibration_.reset();
  if (!refresh()) {
    measured_ = std::move(before);   // a trace of another plan changes nothing
    return false;
  }
  return true;
}

void CompareView::set_step(int32_t step) {
  if (!data_ || step == data_->step) return;
  if (data_->measured) {
    const PlanViewPtr v = traced_view(*data_->measured, data_->measured->trace, step);
    data_->measured = v;
    data_->step = step;
    meas_view_->set_view(v);
    apply_overlay();
    axis_->set_end(std::max(simulated_->timeline.end_ns(), v->timeline.end_ns()));
  }
}

bool CompareView::refresh() {
  try {
    CompareData d = compare_data(simulated_, *measured_, step_->value());
    data_ = std::move(d);
  } catch (const std::exception& e) {
    error_ = QString::fromStdString(e.what());
    banner_->setText(QStringLiteral("<span style=\"color:#b00020\">%1</span>").arg(error_.toHtmlEscaped()));
    return false;
  }
  error_.clear();
  fill();
  emit compared();
  return true;
}

void CompareView::fill() {
  const CompareData& d = *data_;
  const traces::Comparison& c = d.comparison;
  banner_->setText(QString::fromStdString(c.measured_file + " (" + c.measured_source + ", " + std::to_string(d.steps) + " step(s)) against " +
                                          d.simulated->key) + (d.note.empty() ? QString() : QStringLiteral(" — ") + QString::fromStdString(d.note)));
  step_->blockSignals(true);
  step_->setRange(0, d.steps - 1);
  step_->setValue(d.step);
  step_->blockSignals(false);
  sim_view_->set_view(d.simulated);
  meas_view_->set_view(d.measured);
  apply_overlay();
  axis_->set_end(std::max(d.simulated->timeline.end_ns(), d.measured ? d.measured->timeline.end_ns() : 0));
  QString summary = QStringLiteral("step: simulated %1, measured %2, error %3 · %4 items matched (%5 level)")
                        .arg(QString::fromStdString(traces::seconds_text(c.step_simulated_s)),
                             QString::fromStdString(traces::seconds_text(c.step_measured_s)), percent(c.step_error()))
                        .arg(c.matched)
                        .arg(c.level == traces::Level::kInstruction ? QStringLiteral("instruction") : QStringLiteral("kernel class"));
  if (std::isfinite(error_before_)) summary += QStringLiteral(" · before calibration %1").arg(percent(error_before_));
  summary_->setText(summary);
  // per kind
  const std::vector<std::string> order = traces::kind_order(c.kinds);
  kinds_->setRowCount(static_cast<int>(order.size()));
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const traces::KindStats& k = c.kinds.at(order[static_cast<std::size_t>(i)]);
    kinds_->setItem(i, 0, cell(QString::fromStdString(order[static_cast<std::size_t>(i)])));
    kinds_->setItem(i, 1, cell(QString::fromStdString(traces::seconds_text(k.simulated_s))));
    kinds_->setItem(i, 2, cell(QString::fromStdString(traces::seconds_text(k.measured_s))));
    QTableWidgetItem* e = cell(percent(k.error()));
    e->setBackground(error_colour(k.error()));
    kinds_->setItem(i, 3, e);
    kinds_->setItem(i, 4, cell(QString::number(k.count)));
  }
  // per rank
  ranks_->setRowCount(static_cast<int>(c.ranks.size()));
  for (int i = 0; i < static_cast<int>(c.ranks.size()); ++i) {
    const traces::RankComparison& r = c.ranks[static_cast<std::size_t>(i)];
    const auto pair = [](double a, double b) {
      return QString::fromStdString(traces::seconds_text(a) + " / " + traces::seconds_text(b));
    };
    ranks_->setItem(i, 0, cell(QString::number(r.rank)));
    ranks_->setItem(i, 1, cell(pair(r.simulated.compute_s, r.measured.compute_s)));
    ranks_->setItem(i, 2, cell(pair(r.simulated.exposed_comm_s, r.measured.exposed_comm_s)));
    ranks_->setItem(i, 3, cell(pair(r.simulated.bubble_s, r.measured.bubble_s)));
  }
  {
    QChart* chart = breakdown_->chart();
    clear_chart(chart);
    auto* series = new QHorizontalStackedBarSeries;
    const char* const terms[] = {"compute", "exposed communication", "bubble"};
    const QColor colours[] = {SplitBarDelegate::colour(0), SplitBarDelegate::colour(1), SplitBarDelegate::colour(2)};
    QStringList categories;
    std::vector<QBarSet*> sets;
    for (int k = 0; k < 3; ++k) {
      auto* set = new QBarSet(QString::fromUtf8(terms[k]));
      set->setColor(colours[k]);
      set->setBorderColor(colours[k]);
      sets.push_back(set);
    }
    // bottom to top: the last rank first, so rank 0 is drawn on top as in the tables
    for (auto it = c.ranks.rbegin(); it != c.ranks.rend(); ++it) {
      for (const bool measured : {true, false}) {
        const traces::Breakdown& b = measured ? it->measured : it->simulated;
        categories << QStringLiteral("rank %1 %2").arg(it->rank).arg(measured ? QStringLiteral("measured") : QStringLiteral("simulated"));
        *sets[0] << b.compute_s;
        *sets[1] << b.exposed_comm_s;
        *sets[2] << b.bubble_s;
      }
    }
    for (QBarSet* set : sets) series->append(set);
    chart->addSeries(series);
    auto* ay = new QBarCategoryAxis;
    ay->append(categories);
    auto* ax = new QValueAxis;
    ax->setTitleText(QStringLiteral("seconds of the step"));
    ax->setLabelFormat(QStringLiteral("%.3g"));
    chart->addAxis(ay, Qt::AlignLeft);
    chart->addAxis(ax, Qt::AlignBottom);
    series->attachAxis(ay);
    series->attachAxis(ax);
    ax->applyNiceNumbers();
  }
  // rank x kind
  const ErrorGrid& g = d.grid;
  grid_->clear();
  grid_->setRowCount(static_cast<int>(g.ranks.size()));
  grid_->setColumnCount(static_cast<int>(g.kinds.size()));
  QStringList kinds, ranks;
  for (const std::string& k : g.kinds) kinds << QString::fromStdString(k);
  for (int64_t r : g.ranks) ranks << QStringLiteral("rank %1").arg(r);
  grid_->setHorizontalHeaderLabels(kinds);
  grid_->setVerticalHeaderLabels(ranks);
  for (int r = 0; r < grid_->rowCount(); ++r) {
    for (int k = 0; k < grid_->columnCount(); ++k) {
      const double e = g.error[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)];
      QTableWidgetItem* it = cell(percent(e));
      it->setBackground(error_colour(e));
      if (r == g.worst_rank && k == g.worst_kind) {
        QFont f = it->font();
        f.setBold(true);
        it->setFont(f);
        it->setText(it->text() + QStringLiteral(" ◀"));
        it->setToolTip(QStringLiteral("the largest compute error: rank %1's %2").arg(g.ranks[static_cast<std::size_t>(r)]).arg(kinds[k]));
      }
      grid_->setItem(r, k, it);
    }
  }
  // worst items
  worst_->blockSignals(true);
  worst_->clear();
  for (const traces::WorstItem& w : c.worst) {
    worst_->addItem(QStringLiteral("%1 rank %2 %3: simulated %4, measured %5")
                        .arg(w.instr >= 0 ? QStringLiteral("#%1").arg(w.instr) : QString())
                        .arg(w.rank)
                        .arg(QString::fromStdString(w.kind), QString::fromStdString(traces::seconds_text(w.simulated_s)),
                             QString::fromStdString(traces::seconds_text(w.measured_s))));
  }
  worst_->blockSignals(false);
  calibrate_->setEnabled(!measured_->kernel_level());
  calibrate_->setToolTip(measured_->kernel_level() ? QStringLiteral("PyTorch profiler traces carry no Program: calibrate from a Stagecraft run's trace")
                                                   : QStringLiteral("fit the profile's parameters to the measured instructions"));
}

void CompareView::set_overlay(bool on) { overlay_->setChecked(on); }

void CompareView::apply_overlay() {
  if (!overlay_->isChecked() || !data_ || !data_->measured) {
    meas_view_->set_overlay({}, {});
    return;
  }
  auto o = std::make_shared<const Overlay>(overlay_of(*data_));
  meas_view_->set_overlay(
      [o](std::size_t row, std::size_t i) -> std::optional<QColor> { return error_colour(o->error.at(row).at(i)); },
      [o](std::size_t row, std::size_t i) { return o->ghost.at(row).at(i); });
}

void CompareView::select_item(int index) {
  if (!data_ || index < 0 || index >= static_cast<int>(data_->comparison.worst.size())) return;
  const traces::WorstItem& w = data_->comparison.worst[static_cast<std::size_t>(index)];
  if (w.instr < 0) return;
  const auto find = [&](TimelineView* view, const PlanViewPtr& v, int64_t rank) {
    if (!v) return;
    for (std::size_t r = 0; r < v->timeline.rows().size(); ++r) {
      const traces::TimelineRow& row = v->timeline.rows()[r];
      if (row.rank != rank) continue;
      for (std::size_t i = 0; i < row.size(); ++i) {
        if (row.instr[i] == w.instr) {
          view->select(TimelineMark{static_cast<int>(r), i});
          return;
        }
      }
    }
  };
  find(meas_view_, data_->measured, w.rank);
  const auto rc = std::find_if(data_->comparison.ranks.begin(), data_->comparison.ranks.end(),
                               [&](const traces::RankComparison& r) { return r.rank == w.rank; });
  find(sim_view_, data_->simulated, rc != data_->comparison.ranks.end() ? rc->simulated_rank : w.rank);
}

bool CompareView::calibrate() {
  if (!data_ || !measured_) return false;
  try {
    calibration_ = calibrate_from(*measured_, simulated_->cluster, simulated_->context.training);
  } catch (const std::exception& e) {
    error_ = QString::fromStdString(e.what());
    calibration_text_->setText(QStringLiteral("<span style=\"color:#b00020\">cannot calibrate: %1</span>").arg(error_.toHtmlEscaped()));
    return false;
  }
  const traces::Calibration& c = *calibration_;
  params_->setRowCount(static_cast<int>(c.parameters.size()));
  for (int i = 0; i < static_cast<int>(c.parameters.size()); ++i) {
    const traces::Parameter& p = c.parameters[static_cast<std::size_t>(i)];
    params_->setItem(i, 0, cell(QString::fromStdString(p.name)));
    params_->setItem(i, 1, cell(QString::number(p.base, 'g', 5)));
    params_->setItem(i, 2, cell(QString::number(p.value, 'g', 5)));
    params_->setItem(i, 3, cell(std::isfinite(p.std_error) ? QString::number(p.std_error, 'g', 3) : QStringLiteral("—")));
    params_->setItem(i, 4, cell(QString::fromStdString(p.status)));
  }
  QString groups;
  for (const traces::GroupReport& g : c.groups) {
    groups += QStringLiteral("%1: %2 samples, %3 fitted, RMS residual %4. ")
                  .arg(QString::fromStdString(g.name))
                  .arg(g.samples)
                  .arg(g.parameters)
                  .arg(std::isfinite(g.rms_residual) ? percent(g.rms_residual).remove('+') : QStringLiteral("—"));
  }
  calibration_text_->setText(groups);
  use_->setEnabled(c.fitted_any());
  return true;
}

bool CompareView::use_calibrated() {
  if (!calibration_ || !simulated_ || !data_) return false;
  error_before_ = data_->comparison.step_error();
  try {
    simulated_ = resimulate(*simulated_, calibration_->cluster);
  } catch (const std::exception& e) {
    error_ = QString::fromStdString(e.what());
    return false;
  }
  return refresh();
}

}  // namespace stagecraft::gui
