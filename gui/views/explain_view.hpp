// "Why this plan" (planner::explain, what `stagecraft search` prints under the table): what limits
// the best plan, its memory against the GPU, then per axis each other value with its verdict
// (simulated, bound, memory, not fitting), its step time and difference, and the reason.
// Double-clicking an alternative that was simulated selects its plan.
#pragma once

#include <QTreeWidget>

#include "planner/explain.hpp"

namespace stagecraft::gui {

class ExplainView : public QTreeWidget {
  Q_OBJECT
 public:
  explicit ExplainView(QWidget* parent = nullptr);
  void set_result(const planner::SearchResult& r);   // empty when r.top is
  void clear_result(const QString& why);

 signals:
  void plan_selected(QString key);
};

}  // namespace stagecraft::gui
