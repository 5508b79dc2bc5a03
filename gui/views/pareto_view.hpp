// Step time against peak memory per GPU for every simulated plan (docs/gui.md "Pareto scatter"):
// one scatter series per ZeRO stage (plans that do not fit drawn hollow), the Pareto front of the
// search (SearchResult::pareto) as a step line, the GPU's capacity as a vertical line, and a ring
// on the selected plan. Click a point to select its plan; drag a rectangle to keep only the plans
// inside it in the table (keys_in_rect).
#pragma once

#include <QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QScatterSeries>

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "planner/report.hpp"
#include "planner/search.hpp"

namespace stagecraft::gui {

class ParetoView : public QChartView {
  Q_OBJECT
 public:
  explicit ParetoView(QWidget* parent = nullptr);

  void set_plans(const std::vector<planner::Evaluated>& plans, const std::vector<planner::Evaluated>& front,
                 int64_t capacity_bytes, const std::optional<planner::Baseline>& baseline = std::nullopt);
  // Which plan axis gives the points their colour (a series per value): "zero", "tp", "pp",
  // "schedule", "recompute". Redraws.
  void set_colour_by(const std::string& axis);
  const std::string& colour_by() const { return colour_by_; }
  QScatterSeries* baseline_series() const { return baseline_series_; }
  void select_key(const std::string& key);

  // For tests and exports.
  const std::vector<QScatterSeries*>& point_series() const { return points_; }
  QLineSeries* front_series() const { return front_; }
  QLineSeries* capacity_series() const { return capacity_; }
  QScatterSeries* selection_series() const { return selected_; }
  // Plans whose point lies inside a rectangle in widget coordinates.
  std::unordered_set<std::string> keys_in_rect(const QRectF& widget_rect) const;
  // The widget position of a (GiB, seconds) value.
  QPointF position_of(double gib, double seconds) const;

 signals:
  void plan_selected(QString key);
  void rectangle_selected(std::unordered_set<std::string> keys);

 protected:
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;

 private:
  std::string nearest_key(const QPointF& widget_pos, double max_px) const;

  struct Point {
    double gib, seconds;
    std::string key;
  };
  std::vector<Point> all_;
  std::string colour_by_ = "zero";
  std::vector<planner::Evaluated> plans_, front_plans_;
  int64_t capacity_bytes_ = 0;
  std::optional<planner::Baseline> baseline_;
  QScatterSeries* baseline_series_ = nullptr;
  std::vector<QScatterSeries*> points_;
  QLineSeries* front_ = nullptr;
  QLineSeries* capacity_ = nullptr;
  QScatterSeries* selected_ = nullptr;
  QPoint press_;
  bool dragging_ = false;
  class QRubberBand* band_ = nullptr;
};

}  // namespace stagecraft::gui
