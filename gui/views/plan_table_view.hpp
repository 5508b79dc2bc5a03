// The plan table's widget: a filter row (text in the key, fits only, Pareto only, and a
// `stagecraft results --where` expression whose SQLite error shows beside it), the sortable
// table with in-cell bars for the time split and memory against capacity, and the selection as
// plan keys.
#pragma once

#include <QStyledItemDelegate>
#include <QWidget>

#include <string>

#include "gui/model/plan_table_model.hpp"

class QCheckBox;
class QLabel;
class QLineEdit;
class QTableView;

namespace stagecraft::gui {

// Compute | exposed communication | bubble as a bar whose segments are proportional to the
// seconds (kSplitRole), the full width being the step.
class SplitBarDelegate : public QStyledItemDelegate {
  Q_OBJECT
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  void paint(QPainter* g, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
  static QColor colour(int segment);   // 0 compute, 1 exposed communication, 2 bubble
};

// Peak memory as a bar against capacity (kMemoryRole), with the text over it; red when it does
// not fit.
class MemoryBarDelegate : public QStyledItemDelegate {
  Q_OBJECT
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  void paint(QPainter* g, const QStyleOptionViewItem& option, const QModelIndex& index) const override;
};

class PlanTableView : public QWidget {
  Q_OBJECT
 public:
  explicit PlanTableView(PlanTableModel* model, QWidget* parent = nullptr);

  PlanFilterProxy* proxy() const { return proxy_; }
  QTableView* table() const { return table_; }
  QLineEdit* where_edit() const { return where_; }
  QLabel* where_error() const { return where_error_; }
  // Selects (and scrolls to) the row of `key`, if it passes the filters.
  void select_key(const std::string& key);
  std::string selected_key() const;

 signals:
  void plan_selected(QString key);

 private:
  PlanTableModel* model_;
  PlanFilterProxy* proxy_;
  QTableView* table_;
  QLineEdit *text_, *where_;
  QLabel* where_error_;
  QCheckBox *fits_, *front_;
};

}  // namespace stagecraft::gui
