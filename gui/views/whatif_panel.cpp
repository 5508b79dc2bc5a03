#include "gui/views/whatif_panel.hpp"

#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPointer>
#include <QPushButton>
#include <QSpinBox>
#include <QThreadPool>
#include <QTimer>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>

#include <cmath>

#include "core/text/format.hpp"
#include "gui/views/charts.hpp"

namespace stagecraft::gui {

namespace {

QString delta(double before, double after, const char* format, double scale = 1) {
  const QString a = QString::fromStdString(text::fmt(format, before * scale));
  const QString b = QString::fromStdString(text::fmt(format, after * scale));
  if (before == 0) return a + QStringLiteral(" → ") + b;
  return a + QStringLiteral(" → ") + b + QStringLiteral(" (%1%)").arg((after / before - 1) * 100, 0, 'f', 1);
}

}  // namespace

WhatIfPanel::WhatIfPanel(QWidget* parent) : QWidget(parent) {
  debounce_ = new QTimer(this);
  debounce_->setSingleShot(true);
  debounce_->setInterval(150);
  connect(debounce_, &QTimer::timeout, this, &WhatIfPanel::evaluate);

  title_ = new QLabel(QStringLiteral("Select a plan to change its cluster and see the step time change."));
  title_->setWordWrap(true);
  auto* form = new QFormLayout;
  for (const WhatIfField& f : whatif_fields()) {
    auto* box = new QDoubleSpinBox;
    box->setDecimals(f.integer ? 0 : 2);
    box->setRange(f.min, f.max);
    if (!f.unit.empty()) box->setSuffix(QStringLiteral(" ") + QString::fromStdString(f.unit));
    box->setKeyboardTracking(false);
    box->setToolTip(QStringLiteral("--set %1 (in %2)").arg(QString::fromStdString(f.key), QString::fromStdString(f.unit.empty() ? "units" : f.unit)));
    connect(box, &QDoubleSpinBox::valueChanged, this, [this] {
      if (!loading_) schedule();
    });
    form->addRow(QString::fromStdString(f.label), box);
    boxes_.push_back(box);
  }
  base_.assign(boxes_.size(), 0);
  // the plan's own fields
  const std::pair<const char*, const char*> plan_fields[] = {
      {"micro_batch", "micro-batch size"},
      {"reduce_bucket", "reduce bucket (elements)"},
      {"prefetch_bucket", "ZeRO-3 prefetch bucket"},
      {"max_live_parameters", "ZeRO-3 max live parameters"}};
  for (const auto& [field, label] : plan_fields) {
    auto* box = new QDoubleSpinBox;
    box->setDecimals(0);
    box->setRange(1, 1e12);
    box->setKeyboardTracking(false);
    box->setToolTip(std::string(field) == "micro_batch"
                        ? QStringLiteral("sequences per micro-batch; dp is kept, so the micro-batch count becomes B / (dp · mb)")
                        : QStringLiteral("DeepSpeed counts elements (%1)").arg(QString::fromUtf8(field)));
    connect(box, &QDoubleSpinBox::valueChanged, this, [this] {
      if (!loading_) schedule();
    });
    form->addRow(QString::fromUtf8(label), box);
    plan_boxes_.emplace_back(field, box);
  }
  plan_base_.assign(plan_boxes_.size(), 0);
  summary_ = new QLabel;
  summary_->setTextFormat(Qt::RichText);
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  show_modified_ = new QCheckBox(QStringLiteral("show the modified step"));
  connect(show_modified_, &QCheckBox::toggled, this, [this](bool on) { emit show_step(on && result_ ? result_->view : nullptr); });
  auto* reset_button = new QPushButton(QStringLiteral("Reset"));
  connect(reset_button, &QPushButton::clicked, this, &WhatIfPanel::reset);
  auto* replan_button = new QPushButton(QStringLiteral("Re-plan with these"));
  replan_button->setToolTip(QStringLiteral("search again on the edited cluster"));
  connect(replan_button, &QPushButton::clicked, this, [this] {
    std::vector<spec::Override> e;
    int64_t nodes = inputs_.nodes;
    for (const spec::Override& o : edits()) {
      if (o.key() == "cluster.nodes") {
        nodes = o.value.get<int64_t>();
      } else {
        e.push_back(o);
      }
    }
    emit replan(e, nodes);
  });
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(show_modified_);
  buttons->addStretch(1);
  buttons->addWidget(reset_button);
  buttons->addWidget(replan_button);

  // sweep controls
  sweep_field_ = new QComboBox;
  for (const WhatIfField& f : whatif_fields()) sweep_field_->addItem(QString::fromStdString(f.label), QString::fromStdString(f.key));
  sweep_lo_ = new QDoubleSpinBox;
  sweep_hi_ = new QDoubleSpinBox;
  for (QDoubleSpinBox* b : {sweep_lo_, sweep_hi_}) {
    b->setRange(0.01, 1e6);
    b->setDecimals(2);
  }
  sweep_points_ = new QSpinBox;
  sweep_points_->setRange(2, 16);
  sweep_points_->setValue(8);
  const auto default_range = [this] {
    const int i = sweep_field_->currentIndex();
    if (i < 0 || static_cast<std::size_t>(i) >= base_.size()) return;
    const WhatIfField& f = whatif_fields()[static_cast<std::size_t>(i)];
    const double v = base_[static_cast<std::size_t>(i)];
    sweep_lo_->setValue(f.integer ? std::max(1.0, std::round(v / 4)) : std::max(f.min, v / 8));
    sweep_hi_->setValue(f.integer ? std::round(v * 2) : std::min(f.max, v * 2));
  };
  connect(sweep_field_, &QComboBox::currentIndexChanged, this, default_range);
  auto* run = new QPushButton(QStringLiteral("Sweep"));
  run->setToolTip(QStringLiteral("step time of the top plans over the range (log-spaced), with where the fastest changes"));
  connect(run, &QPushButton::clicked, this, [this] {
    run_sweep(sweep_field_->currentData().toString().toStdString(), sweep_lo_->value(), sweep_hi_->value(), sweep_points_->value());
  });
  auto* sweep_row = new QHBoxLayout;
  sweep_row->addWidget(new QLabel(QStringLiteral("Sweep")));
  sweep_row->addWidget(sweep_field_, 1);
  sweep_row->addWidget(sweep_lo_);
  sweep_row->addWidget(new QLabel(QStringLiteral("to")));
  sweep_row->addWidget(sweep_hi_);
  sweep_row->addWidget(sweep_points_);
  sweep_row->addWidget(run);
  sweep_note_ = new QLabel;
  sweep_note_->setWordWrap(true);
  chart_ = new QChartView;
  chart_->chart()->setAnimationOptions(QChart::NoAnimation);
  chart_->chart()->legend()->setAlignment(Qt::AlignRight);
  chart_->setMinimumHeight(220);
  chart_->setRenderHint(QPainter::Antialiasing, true);

  auto* left = new QVBoxLayout;
  left->addWidget(title_);
  left->addLayout(form);
  left->addLayout(buttons);
  left->addWidget(summary_);
  left->addStretch(1);
  auto* right = new QVBoxLayout;
  right->addLayout(sweep_row);
  right->addWidget(sweep_note_);
  right->addWidget(chart_, 1);
  auto* h = new QHBoxLayout(this);
  h->addLayout(left, 2);
  h->addLayout(right, 3);
  setEnabled(false);
  default_range();
}

void WhatIfPanel::set_context(const Inputs& inputs, const spec::Cluster& cluster, const planner::Evaluated& plan,
                              std::vector<planner::SweepPlan> sweep_plans) {
  inputs_ = inputs;
  cluster_ = cluster;
  plan_ = plan;
  sweep_plans_ = std::move(sweep_plans);
  title_->setText(QStringLiteral("What-if for <b>%1</b>").arg(QString::fromStdString(plan.key).toHtmlEscaped()));
  loading_ = true;
  for (std::size_t i = 0; i < boxes_.size(); ++i) {
    boxes_[i]->setValue(field_value(cluster, whatif_fields()[i]));
    base_[i] = boxes_[i]->value();   // as the box holds it (rounded to its decimals): no edit yet
  }
  const spec::Plan& p = plan.plan;
  const double plan_values[] = {static_cast<double>(p.micro_batch), static_cast<double>(p.zero.reduce_bucket),
                                static_cast<double>(p.zero.prefetch_bucket), static_cast<double>(p.zero.max_live_parameters)};
  for (std::size_t i = 0; i < plan_boxes_.size(); ++i) {
    plan_boxes_[i].second->setValue(plan_values[i]);
    plan_base_[i] = plan_boxes_[i].second->value();
    const bool applies = i == 0 || (i == 1 && p.zero.stage >= 1) || p.zero.stage == 3;
    plan_boxes_[i].second->setEnabled(applies);
  }
  loading_ = false;
  result_.reset();
  show_modified_->setChecked(false);
  summary_->setText(QStringLiteral("Change a field to re-simulate this plan."));
  setEnabled(true);
  sweep_field_->currentIndexChanged(sweep_field_->currentIndex());
}

void WhatIfPanel::set_value(const std::string& key, double shown) {
  for (std::size_t i = 0; i < boxes_.size(); ++i) {
    if (whatif_fields()[i].key == key) boxes_[i]->setValue(shown);
  }
}

std::vector<spec::Override> WhatIfPanel::edits() const {
  std::vector<spec::Override> out;
  for (std::size_t i = 0; i < boxes_.size(); ++i) {
    const double v = boxes_[i]->value();
    if (v != base_[i]) {
      out.push_back(field_override(whatif_fields()[i], v, &cluster_));
    }
  }
  return out;
}

PlanEdits WhatIfPanel::plan_edits() const {
  PlanEdits e;
  std::optional<int64_t>* fields[] = {&e.micro_batch, &e.reduce_bucket, &e.prefetch_bucket, &e.max_live_parameters};
  for (std::size_t i = 0; i < plan_boxes_.size(); ++i) {
    const double v = plan_boxes_[i].second->value();
    if (v != plan_base_[i]) *fields[i] = static_cast<int64_t>(std::llround(v));
  }
  return e;
}

void WhatIfPanel::set_plan_value(const std::string& field, int64_t value) {
  for (const auto& [name, box] : plan_boxes_) {
    if (name == field) box->setValue(static_cast<double>(value));
  }
}

void WhatIfPanel::reset() {
  loading_ = true;
  for (std::size_t i = 0; i < plan_boxes_.size(); ++i) plan_boxes_[i].second->setValue(plan_base_[i]);
  for (std::size_t i = 0; i < boxes_.size(); ++i) boxes_[i]->setValue(base_[i]);
  loading_ = false;
  schedule();
}

void WhatIfPanel::schedule() { debounce_->start(); }

void WhatIfPanel::evaluate() {
  if (!plan_) return;
  const int64_t generation = ++generation_;
  ++evaluations_;
  const Inputs inputs = inputs_;
  const std::vector<spec::Override> e = edits();
  const PlanEdits pe = plan_edits();
  const planner::Evaluated plan = *plan_;
  QPointer<WhatIfPanel> self(this);
  QThreadPool::globalInstance()->start([self, inputs, e, pe, plan, generation] {
    WhatIfResult r = evaluate_whatif(inputs, e, plan, pe);
    QMetaObject::invokeMethod(QCoreApplication::instance(), [self, r, generation] {
      if (!self || generation != self->generation_) return;   // a newer edit is on its way
      self->result_ = r;
      self->show_result();
      emit self->evaluated();
    }, Qt::QueuedConnection);
  });
}

void WhatIfPanel::show_result() {
  const WhatIfResult& r = *result_;
  if (!r.modified) {
    summary_->setText(QStringLiteral("<span style=\"color:#b00020\">%1</span>").arg(QString::fromStdString(r.error).toHtmlEscaped()));
    if (show_modified_->isChecked()) emit show_step(nullptr);
    return;
  }
  const sim::Metrics& a = r.base;
  const sim::Metrics& b = *r.modified;
  QString html = QStringLiteral("<table cellspacing=\"4\">");
  const auto row = [&](const char* name, const QString& value) {
    html += QStringLiteral("<tr><td>%1</td><td>%2</td></tr>").arg(QString::fromUtf8(name), value);
  };
  row("step time", delta(a.step_time_s, b.step_time_s, "%.3f s"));
  row("tokens/s", delta(a.tokens_per_s, b.tokens_per_s, "%.4g"));
  row("MFU", delta(a.mfu, b.mfu, "%.1f%%", 100));
  row("compute", delta(a.time.compute_s, b.time.compute_s, "%.3f s"));
  row("exposed comm", delta(a.time.exposed_comm_s, b.time.exposed_comm_s, "%.3f s"));
  row("bubble", delta(a.time.bubble_s, b.time.bubble_s, "%.3f s"));
  row("dp lane busy", delta(a.time.dp_s, b.time.dp_s, "%.3f s"));
  row("peak memory", QString::fromStdString(text::short_bytes(static_cast<double>(a.peak_memory_bytes)) + " → " +
                                            text::short_bytes(static_cast<double>(b.peak_memory_bytes)) + (b.fits ? " (fits)" : " (does not fit)")));
  html += QStringLiteral("</table>");
  if (!r.plan_note.empty()) html += QStringLiteral("<p>") + QString::fromStdString(r.plan_note).toHtmlEscaped() + QStringLiteral("</p>");
  summary_->setText(html);
  if (show_modified_->isChecked()) emit show_step(r.view);
}

void WhatIfPanel::run_sweep(const std::string& key, double lo, double hi, int points) {
  if (!plan_ || sweep_plans_.empty()) return;
  const WhatIfField f = whatif_field(key);
  const int64_t generation = ++sweep_generation_;
  sweep_note_->setText(QStringLiteral("sweeping %1 for %2 plans…").arg(QString::fromStdString(f.label)).arg(sweep_plans_.size()));
  const Inputs inputs = inputs_;
  const std::vector<spec::Override> e = edits();
  const std::vector<planner::SweepPlan> plans = sweep_plans_;
  QPointer<WhatIfPanel> self(this);
  QThreadPool::globalInstance()->start([self, inputs, e, f, lo, hi, points, plans, generation] {
    std::optional<planner::Sweep> s;
    QString error;
    try {
      s = whatif_sweep(inputs, e, f, lo, hi, points, plans);
    } catch (const std::exception& ex) {
      error = QString::fromStdString(ex.what());
    }
    QMetaObject::invokeMethod(QCoreApplication::instance(), [self, s, error, f, generation] {
      if (!self || generation != self->sweep_generation_) return;
      if (!s) {
        self->sweep_note_->setText(QStringLiteral("sweep refused: ") + error);
        return;
      }
      self->sweep_ = s;
      self->draw_sweep(f);
      emit self->sweep_done();
    }, Qt::QueuedConnection);
  });
}

void WhatIfPanel::draw_sweep(const WhatIfField& f) {
  const planner::Sweep& s = *sweep_;
  QChart* chart = chart_->chart();
  clear_chart(chart);
  markers_.clear();
  std::vector<double> xs;
  for (const planner::SweepPoint& p : s.points) xs.push_back(spec::parse_value(p.value).get<double>() / f.scale);
  double ymin = INFINITY, ymax = 0;
  const bool log = xs.front() > 0 && xs.back() / xs.front() > 8;
  QAbstractAxis* ax = nullptr;
  if (log) {
    auto* l = new QLogValueAxis;
    l->setBase(2);
    l->setLabelFormat(QStringLiteral("%.4g"));
    ax = l;
  } else {
    auto* v = new QValueAxis;
    v->setLabelFormat(QStringLiteral("%.4g"));
    ax = v;
  }
  ax->setTitleText(QString::fromStdString(f.label + (f.unit.empty() ? "" : " (" + f.unit + ")")));
  auto* ay = new QValueAxis;
  ay->setTitleText(QStringLiteral("step time (s)"));
  chart->addAxis(ax, Qt::AlignBottom);
  chart->addAxis(ay, Qt::AlignLeft);
  for (std::size_t j = 0; j < s.plans.size(); ++j) {
    auto* line = new QLineSeries;
    // "[1] tp1 pp1 dp64 mb4x4 1f1b zero3 hpz8 qwz qgz": the plan's summary (shape, schedule, ZeRO
    // stage and variant, sp, recompute, offload), without the bucket sizes
    line->setName(QStringLiteral("[%1] %2").arg(j + 1).arg(QString::fromStdString(spec::summary(s.plans[j].plan))));
    for (std::size_t i = 0; i < s.points.size(); ++i) {
      const planner::SweepCell& c = s.points[i].cells[j];
      if (!c.ok) continue;
      line->append(xs[i], c.metrics.step_time_s);
      ymin = std::min(ymin, c.metrics.step_time_s);
      ymax = std::max(ymax, c.metrics.step_time_s);
    }
    line->setPointsVisible(true);
    chart->addSeries(line);
    line->attachAxis(ax);
    line->attachAxis(ay);
  }
  if (!std::isfinite(ymin)) {
    ymin = 0;
    ymax = 1;
  }
  ay->setRange(std::max(0.0, ymin * 0.95), ymax * 1.05);
  if (log) {
    static_cast<QLogValueAxis*>(ax)->setRange(xs.front() * 0.9, xs.back() * 1.1);
  } else {
    static_cast<QValueAxis*>(ax)->setRange(xs.front(), xs.back());
  }
  QString note;
  for (std::size_t i : s.changes) {
    // the change lies between the two points that bracket it: marked at their (geometric) middle
    const double x = log ? std::sqrt(xs[i - 1] * xs[i]) : (xs[i - 1] + xs[i]) / 2;
    markers_.push_back(x);
    auto* m = new QLineSeries;
    QPen pen(Qt::black);
    pen.setStyle(Qt::DashLine);
    m->setPen(pen);
    m->append(x, std::max(0.0, ymin * 0.95));
    m->append(x, ymax * 1.05);
    const int a = s.points[i - 1].best, b = s.points[i].best;
    m->setName(QStringLiteral("fastest: %1 → %2").arg(a >= 0 ? QStringLiteral("[%1]").arg(a + 1) : QStringLiteral("none"),
                                                        b >= 0 ? QStringLiteral("[%1]").arg(b + 1) : QStringLiteral("none")));
    chart->addSeries(m);
    m->attachAxis(ax);
    m->attachAxis(ay);
    note += QStringLiteral("between %1 and %2 %3 the fastest changes from %4 to %5. ")
                .arg(xs[i - 1], 0, 'g', 4)
                .arg(xs[i], 0, 'g', 4)
                .arg(QString::fromStdString(f.unit))
                .arg(a >= 0 ? QStringLiteral("[%1]").arg(a + 1) : QStringLiteral("none"))
                .arg(b >= 0 ? QStringLiteral("[%1]").arg(b + 1) : QStringLiteral("none"));
  }
  if (s.changes.empty()) note = QStringLiteral("The fastest plan is the same over the whole range.");
  sweep_note_->setText(note);
  chart->setTitle(QStringLiteral("step time as %1 varies").arg(QString::fromStdString(f.label)));
}

}  // namespace stagecraft::gui
