// The plan table (docs/gui.md "Plan table"): one row per simulated plan of a search, as the
// search streams them in (SearchOptions::on_batch) or all at once from its result.
//
//   PlanTableModel   columns of sim::Metrics and the plan's axes; Qt::DisplayRole is the text
//                    the CLI's tables print (core/text/format.hpp), kRawRole the number a column
//                    sorts by, kSplitRole the step's partition (compute, exposed communication,
//                    bubble, seconds) and kMemoryRole (peak bytes, capacity bytes) for the in-cell
//                    bars. "#" ranks the fitting plans as the search does (planner::better).
//   PlanFilterProxy  sorts by kRawRole (ties: plan key ascending, the planner's tie-break) and
//                    keeps the rows that pass every filter: fits only, Pareto only, text in the
//                    plan key, and a `stagecraft results --where` expression — evaluated by SQLite
//                    over the results store's own plans table (an in-memory planner::Store holding
//                    these rows), so an expression means exactly what it means to the CLI.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <QString>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "planner/report.hpp"
#include "planner/search.hpp"

namespace stagecraft::gui {

enum PlanRole { kRawRole = Qt::UserRole + 1, kSplitRole, kMemoryRole, kKeyRole, kFitsRole };

class PlanTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    kRank, kPlan, kStep, kTokens, kMfu, kBubble, kExposed, kSplit, kMemory,
    kTp, kCp, kEp, kPp, kDp, kMicro, kSchedule, kZero, kRecompute, kSp, kFits, kColumnCount
  };

  explicit PlanTableModel(QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

  void clear();
  // Appends a batch (search streaming); ranks are recomputed.
  void append(std::span<const planner::Evaluated> rows);
  // Replaces every row with the result's `evaluated`, marks its Pareto front.
  void set_result(const planner::SearchResult& r);
  // The ★ row: a user's plan (a DeepSpeed config), pinned first whatever the sort, never ranked.
  // Its key is "baseline: " + its plan key. nullopt removes it.
  void set_baseline(const std::optional<planner::Baseline>& b);
  bool is_baseline(int row) const { return row == baseline_row_; }

  const planner::Evaluated& plan(int row) const { return rows_.at(static_cast<std::size_t>(row)); }
  const std::vector<planner::Evaluated>& plans() const { return rows_; }
  int row_of(const std::string& key) const;        // -1 when absent
  int rank_of(int row) const { return rank_.at(static_cast<std::size_t>(row)); }  // 0: does not fit
  bool on_front(int row) const;

 private:
  void rerank();

  std::vector<planner::Evaluated> rows_;
  std::vector<int> rank_;
  std::unordered_map<std::string, int> by_key_;
  std::unordered_set<std::string> front_;
  std::optional<planner::Evaluated> baseline_;
  int baseline_row_ = -1;
};

class PlanFilterProxy : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit PlanFilterProxy(QObject* parent = nullptr);

  void set_fits_only(bool on);
  void set_front_only(bool on);
  void set_text(const QString& text);
  // Empty clears it. Returns "" when accepted, else SQLite's complaint (the filter is unchanged).
  QString set_where(const std::string& where);
  const std::string& where() const { return where_; }
  // Restricts the rows to these keys (a rectangle selection on the scatter); nullopt: all.
  void set_keys(std::optional<std::unordered_set<std::string>> keys);
  // Re-evaluates the where expression (after rows were appended).
  void refresh();

 protected:
  bool filterAcceptsRow(int source_row, const QModelIndex& parent) const override;
  bool lessThan(const QModelIndex& a, const QModelIndex& b) const override;

 private:
  QString evaluate_where();
  const PlanTableModel* table() const;

  bool fits_only_ = false, front_only_ = false;
  QString text_;
  std::string where_;
  std::optional<std::unordered_set<std::string>> where_keys_, keys_;
};

// The keys of `plans` that satisfy a `stagecraft results --where` expression (SQLite, over the
// store's plans table). Throws planner::StoreError with SQLite's message for a bad expression.
std::unordered_set<std::string> keys_where(const std::vector<planner::Evaluated>& plans, const std::string& where);

}  // namespace stagecraft::gui
