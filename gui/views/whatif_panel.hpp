// The what-if dock (docs/gui.md "What-if"): the selected plan re-simulated as cluster fields
// change (gui/model/whatif.hpp), 150 ms after the last edit, on a pool thread (a newer edit drops
// an older result); baseline -> modified with the step's partition; the modified step on the
// timeline on request; "Re-plan" searches again with the edits; and a sweep of one field for the
// top plans, drawn as step time against the field with the points where the fastest plan changes.
#pragma once

#include <QWidget>

#include <optional>
#include <vector>

#include "gui/model/whatif.hpp"

class QChartView;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineSeries;
class QSpinBox;
class QTimer;

namespace stagecraft::gui {

class WhatIfPanel : public QWidget {
  Q_OBJECT
 public:
  explicit WhatIfPanel(QWidget* parent = nullptr);

  // The search's inputs and cluster, the selected plan and the plans a sweep draws.
  void set_context(const Inputs& inputs, const spec::Cluster& cluster, const planner::Evaluated& plan,
                   std::vector<planner::SweepPlan> sweep_plans);
  // A user's edit of one field, in its unit (what the spin box does).
  void set_value(const std::string& key, double shown);
  std::vector<spec::Override> edits() const;
  PlanEdits plan_edits() const;
  // A user's edit of the plan: "micro_batch", "reduce_bucket", "prefetch_bucket", "max_live_parameters".
  void set_plan_value(const std::string& field, int64_t value);
  void reset();
  void run_sweep(const std::string& key, double lo, double hi, int points);

  int evaluations() const { return evaluations_; }
  const std::optional<WhatIfResult>& result() const { return result_; }
  const std::optional<planner::Sweep>& sweep() const { return sweep_; }
  QChartView* sweep_chart() const { return chart_; }
  // The x (in the field's unit) of the marker drawn for each change of the fastest plan.
  const std::vector<double>& change_markers() const { return markers_; }
  QLabel* summary() const { return summary_; }

 signals:
  void evaluated();
  void sweep_done();
  void show_step(PlanViewPtr view);     // the modified step (null: back to the plan's own)
  void replan(std::vector<spec::Override> edits, int64_t nodes);

 private:
  void schedule();
  void evaluate();
  void show_result();
  void draw_sweep(const WhatIfField& f);

  Inputs inputs_;
  spec::Cluster cluster_;
  std::optional<planner::Evaluated> plan_;
  std::vector<planner::SweepPlan> sweep_plans_;
  std::vector<QDoubleSpinBox*> boxes_;
  std::vector<double> base_;
  std::vector<std::pair<std::string, QDoubleSpinBox*>> plan_boxes_;
  std::vector<double> plan_base_;
  QLabel *title_ = nullptr, *summary_ = nullptr, *sweep_note_ = nullptr;
  QCheckBox* show_modified_ = nullptr;
  QComboBox* sweep_field_ = nullptr;
  QDoubleSpinBox *sweep_lo_ = nullptr, *sweep_hi_ = nullptr;
  QSpinBox* sweep_points_ = nullptr;
  QChartView* chart_ = nullptr;
  QTimer* debounce_ = nullptr;
  int64_t generation_ = 0, sweep_generation_ = 0;
  int evaluations_ = 0;
  bool loading_ = false;
  std::optional<WhatIfResult> result_;
  std::optional<planner::Sweep> sweep_;
  std::vector<double> markers_;
};

}  // namespace stagecraft::gui
