// "Why this plan" (planner::explain, what `stagecraft search` prints under the table): what limits
// the best plan, its memory against the GPU, then per axis each other value with its verdict
// (simulated, bound, memory, not fitting), its step time and difference, and the reason.
// Double-clicking an alternative that was simulated selects its plan.
#pragma once

#include <QTreeWidget>

#include <optional>

#include "planner/explain.hpp"
#include "planner/report.hpp"

namespace stagecraft::gui {

class ExplainView : public QTreeWidget {
  Q_OBJECT
 public:
  explicit ExplainView(QWidget* parent = nullptr);
  // With a baseline, its comparison with the best plan comes first (planner::compare_with_baseline).
  void set_result(const planner::SearchResult& r, const std::optional<planner::Baseline>& baseline = std::nullopt);
  void clear_result(const QString& why);

 signals:
  void plan_selected(QString key);
};

}  // namespace stagecraft::gui
