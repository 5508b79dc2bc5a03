#include "gui/views/pareto_view.hpp"

#include <QMouseEvent>
#include <QRubberBand>
#include <QtCharts/QChart>
#include <QtCharts/QLegendMarker>
#include <QtCharts/QValueAxis>

#include <algorithm>
#include <cmath>
#include <map>

#include "gui/views/charts.hpp"

namespace stagecraft::gui {

namespace {
constexpr double kGiB = 1024.0 * 1024 * 1024;
}  // namespace

ParetoView::ParetoView(QWidget* parent) : QChartView(parent) {
  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setTitle(QStringLiteral("Step time against peak memory per GPU (lower left is better)"));
  setChart(chart);
  setRenderHint(QPainter::Antialiasing, true);
  setRubberBand(QChartView::NoRubberBand);
  band_ = new QRubberBand(QRubberBand::Rectangle, this);
}

void ParetoView::set_colour_by(const std::string& axis) {
  colour_by_ = axis;
  const std::vector<planner::Evaluated> plans = plans_, front = front_plans_;
  set_plans(plans, front, capacity_bytes_, baseline_);
}

namespace {

// The value a plan takes on an axis, and a sort key for the series order.
std::pair<double, std::string> axis_value(const planner::Evaluated& e, const std::string& axis) {
  const spec::Plan& p = e.plan;
  if (axis == "tp") return {static_cast<double>(p.tp), "tp " + std::to_string(p.tp)};
  if (axis == "pp") return {static_cast<double>(p.pp), "pp " + std::to_string(p.pp)};
  if (axis == "cp") return {static_cast<double>(p.cp), "cp " + std::to_string(p.cp)};
  if (axis == "ep") return {static_cast<double>(p.ep), "ep " + std::to_string(p.ep)};
  if (axis == "schedule") return {static_cast<double>(p.schedule), spec::to_string(p.schedule)};
  if (axis == "recompute") return {static_cast<double>(p.recompute), std::string("recompute ") + spec::to_string(p.recompute)};
  return {static_cast<double>(p.zero.stage), "ZeRO " + std::to_string(p.zero.stage)};
}

const QColor kPalette[] = {QColor(68, 119, 170), QColor(34, 136, 51), QColor(204, 187, 68), QColor(170, 51, 119),
                           QColor(102, 204, 238), QColor(238, 102, 119), QColor(119, 119, 119)};

}  // namespace

void ParetoView::set_plans(const std::vector<planner::Evaluated>& plans, const std::vector<planner::Evaluated>& front,
                           int64_t capacity_bytes, const std::optional<planner::Baseline>& baseline) {
  plans_ = plans;
  front_plans_ = front;
  capacity_bytes_ = capacity_bytes;
  baseline_ = baseline;
  QChart* chart = this->chart();
  clear_chart(chart);
  points_.clear();
  all_.clear();
  std::map<std::pair<double, int>, QScatterSeries*> by_value;   // (axis value, does not fit)
  std::map<double, int> colour_index;
  double max_x = static_cast<double>(capacity_bytes) / kGiB, max_y = 0, min_y = INFINITY;
  for (const planner::Evaluated& e : plans) {
    if (e.metrics.failed) continue;
    const auto [value, name] = axis_value(e, colour_by_);
    const bool fits = e.metrics.fits;
    QScatterSeries*& s = by_value[{value, fits ? 0 : 1}];
    if (!s) {
      s = new QScatterSeries;
      s->setName(QString::fromStdString(name) + (fits ? QString() : QStringLiteral(" (does not fit)")));
      s->setMarkerSize(fits ? 8 : 7);
      const int ci = colour_index.emplace(value, static_cast<int>(colour_index.size())).first->second;
      const QColor c = kPalette[ci % 7];
      s->setColor(fits ? c : QColor(Qt::white));
      s->setBorderColor(fits ? c.darker(130) : QColor(200, 0, 0));
    }
    const double x = static_cast<double>(e.metrics.peak_memory_bytes) / kGiB, y = e.metrics.step_time_s;
    s->append(x, y);
    all_.push_back({x, y, e.key});
    max_x = std::max(max_x, x);
    max_y = std::max(max_y, y);
    min_y = std::min(min_y, y);
  }
  auto* ax = new QValueAxis;
  ax->setTitleText(QStringLiteral("peak memory per GPU (GiB)"));
  ax->setRange(0, std::max(1.0, max_x * 1.08));
  ax->setLabelFormat(QStringLiteral("%.0f"));
  auto* ay = new QValueAxis;
  ay->setTitleText(QStringLiteral("step time (s)"));
  if (!std::isfinite(min_y)) {
    min_y = 0;
    max_y = 1;
  }
  const double pad = std::max(1e-3, (max_y - min_y) * 0.08);
  ay->setRange(std::max(0.0, min_y - pad), max_y + pad);
  ax->applyNiceNumbers();
  ay->applyNiceNumbers();
  chart->addAxis(ax, Qt::AlignBottom);
  chart->addAxis(ay, Qt::AlignLeft);
  if (baseline && !baseline->metrics.failed) {
    const double x = static_cast<double>(baseline->metrics.peak_memory_bytes) / kGiB, y = baseline->metrics.step_time_s;
    max_x = std::max(max_x, x);
    max_y = std::max(max_y, y);
    min_y = std::min(min_y, y);
  }
  for (auto& [k, s] : by_value) {
    chart->addSeries(s);
    s->attachAxis(ax);
    s->attachAxis(ay);
    points_.push_back(s);
  }
  front_ = new QLineSeries;
  front_->setName(QStringLiteral("Pareto front"));
  QPen fp(QColor(40, 40, 40));
  fp.setWidthF(1.5);
  front_->setPen(fp);
  // a step line: from each front plan right to the next one's memory, then down to its time
  std::vector<planner::Evaluated> f = front;
  std::sort(f.begin(), f.end(), [](const auto& a, const auto& b) { return a.metrics.peak_memory_bytes < b.metrics.peak_memory_bytes; });
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double x = static_cast<double>(f[i].metrics.peak_memory_bytes) / kGiB, y = f[i].metrics.step_time_s;
    if (i > 0) front_->append(x, front_->at(front_->count() - 1).y());
    front_->append(x, y);
  }
  chart->addSeries(front_);
  front_->attachAxis(ax);
  front_->attachAxis(ay);
  capacity_ = new QLineSeries;
  capacity_->setName(QStringLiteral("GPU memory %1 GiB").arg(static_cast<double>(capacity_bytes) / kGiB, 0, 'f', 1));
  QPen cp(QColor(200, 0, 0));
  cp.setStyle(Qt::DashLine);
  cp.setWidth(2);
  capacity_->setPen(cp);
  capacity_->append(static_cast<double>(capacity_bytes) / kGiB, ay->min());
  capacity_->append(static_cast<double>(capacity_bytes) / kGiB, ay->max());
  chart->addSeries(capacity_);
  capacity_->attachAxis(ax);
  capacity_->attachAxis(ay);
  baseline_series_ = nullptr;
  if (baseline && !baseline->metrics.failed) {
    baseline_series_ = new QScatterSeries;
    baseline_series_->setName(QStringLiteral("★ baseline"));
    baseline_series_->setMarkerShape(QScatterSeries::MarkerShapeStar);
    baseline_series_->setMarkerSize(18);
    baseline_series_->setColor(QColor(240, 140, 0));
    baseline_series_->setBorderColor(Qt::black);
    const double x = static_cast<double>(baseline->metrics.peak_memory_bytes) / kGiB;
    baseline_series_->append(x, baseline->metrics.step_time_s);
    all_.push_back({x, baseline->metrics.step_time_s, "baseline: " + planner::plan_key(baseline->plan)});
    chart->addSeries(baseline_series_);
    baseline_series_->attachAxis(ax);
    baseline_series_->attachAxis(ay);
  }
  selected_ = new QScatterSeries;
  selected_->setName(QStringLiteral("selected"));
  selected_->setMarkerSize(16);
  selected_->setColor(Qt::transparent);
  selected_->setBorderColor(Qt::black);
  QPen sp(Qt::black);
  sp.setWidth(2);
  selected_->setPen(sp);
  chart->addSeries(selected_);
  selected_->attachAxis(ax);
  selected_->attachAxis(ay);
  for (QLegendMarker* m : chart->legend()->markers(selected_)) m->setVisible(false);
}

void ParetoView::select_key(const std::string& key) {
  if (!selected_) return;
  selected_->clear();
  for (const Point& p : all_) {
    if (p.key == key) selected_->append(p.gib, p.seconds);
  }
}

QPointF ParetoView::position_of(double gib, double seconds) const {
  if (points_.empty() && !front_) return {};
  QAbstractSeries* s = front_ ? static_cast<QAbstractSeries*>(front_) : points_.front();
  const QPointF scene = chart()->mapToPosition(QPointF(gib, seconds), s);
  return mapFromScene(chart()->mapToScene(scene));
}

std::string ParetoView::nearest_key(const QPointF& pos, double max_px) const {
  double best = max_px * max_px;
  std::string key;
  for (const Point& p : all_) {
    const QPointF q = position_of(p.gib, p.seconds);
    const double d = (q.x() - pos.x()) * (q.x() - pos.x()) + (q.y() - pos.y()) * (q.y() - pos.y());
    if (d <= best) {
      best = d;
      key = p.key;
    }
  }
  return key;
}

std::unordered_set<std::string> ParetoView::keys_in_rect(const QRectF& r) const {
  std::unordered_set<std::string> out;
  for (const Point& p : all_) {
    if (r.contains(position_of(p.gib, p.seconds))) out.insert(p.key);
  }
  return out;
}

void ParetoView::mousePressEvent(QMouseEvent* e) {
  if (e->button() == Qt::LeftButton) {
    press_ = e->pos();
    dragging_ = true;
    band_->setGeometry(QRect(press_, QSize()));
  }
  QChartView::mousePressEvent(e);
}

void ParetoView::mouseMoveEvent(QMouseEvent* e) {
  if (dragging_ && (e->pos() - press_).manhattanLength() > 4) {
    band_->setGeometry(QRect(press_, e->pos()).normalized());
    band_->show();
  }
  QChartView::mouseMoveEvent(e);
}

void ParetoView::mouseReleaseEvent(QMouseEvent* e) {
  if (dragging_ && e->button() == Qt::LeftButton) {
    dragging_ = false;
    if (band_->isVisible()) {
      band_->hide();
      emit rectangle_selected(keys_in_rect(QRectF(QRect(press_, e->pos()).normalized())));
    } else {
      const std::string key = nearest_key(e->position(), 6);
      if (!key.empty()) emit plan_selected(QString::fromStdString(key));
    }
  }
  QChartView::mouseReleaseEvent(e);
}

}  // namespace stagecraft::gui
