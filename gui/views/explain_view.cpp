#include "gui/views/explain_view.hpp"

#include <QHeaderView>

#include "core/text/format.hpp"

namespace stagecraft::gui {

ExplainView::ExplainView(QWidget* parent) : QTreeWidget(parent) {
  setColumnCount(5);
  setHeaderLabels({QStringLiteral("axis / value"), QStringLiteral("verdict"), QStringLiteral("step s"), QStringLiteral("vs best"),
                   QStringLiteral("reason")});
  header()->setStretchLastSection(true);
  setColumnWidth(0, 200);
  setColumnWidth(1, 90);
  setColumnWidth(2, 70);
  setColumnWidth(3, 70);
  setWordWrap(true);
  connect(this, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem* item, int) {
    const QString key = item->data(0, Qt::UserRole).toString();
    if (!key.isEmpty()) emit plan_selected(key);
  });
}

void ExplainView::clear_result(const QString& why) {
  clear();
  auto* item = new QTreeWidgetItem(this);
  item->setText(0, why);
  item->setFirstColumnSpanned(true);
}

void ExplainView::set_result(const planner::SearchResult& r, const std::optional<planner::Baseline>& baseline) {
  clear();
  if (r.top.empty()) {
    clear_result(QString::fromStdString(r.reason.empty() ? "no plan" : r.reason));
    return;
  }
  const planner::Explanation e = planner::explain(r);
  std::vector<std::string> head = {e.limit, e.memory};
  if (baseline) head.insert(head.begin(), planner::compare_with_baseline(r, *baseline));
  for (const std::string& line : head) {
    auto* item = new QTreeWidgetItem(this);
    item->setText(0, QString::fromStdString(line));
    item->setToolTip(0, QString::fromStdString(line));
    item->setFirstColumnSpanned(true);
  }
  for (const planner::AxisExplanation& a : e.axes) {
    auto* axis = new QTreeWidgetItem(this);
    axis->setText(0, QString::fromStdString(a.axis + " = " + a.best_value + " (best)"));
    axis->setFirstColumnSpanned(true);
    for (const planner::AxisAlternative& alt : a.alternatives) {
      auto* item = new QTreeWidgetItem(axis);
      item->setText(0, QString::fromStdString(a.axis + " = " + alt.value));
      item->setText(1, QString::fromStdString(alt.verdict));
      if (alt.step_time_s > 0) item->setText(2, QString::fromStdString(text::fmt("%.3f", alt.step_time_s)));
      if (alt.verdict == "simulated") item->setText(3, QString::fromStdString(text::fmt("%+.1f%%", alt.delta * 100)));
      item->setText(4, QString::fromStdString(alt.reason));
      item->setToolTip(4, QString::fromStdString(alt.reason));
      item->setData(0, Qt::UserRole, QString::fromStdString(alt.plan));
    }
    axis->setExpanded(true);
  }
}

}  // namespace stagecraft::gui
