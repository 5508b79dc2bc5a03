// The Compare workspace (docs/gui.md "Compare"): a measured trace (a Stagecraft run's trace, or
// PyTorch profiler files, one per rank) against the selected plan's simulated step — the two steps
// on one time axis (simulated above, measured below, the measured step chosen), the step time and
// per-kind errors, each rank's compute / exposed communication / bubble side by side, the rank x
// kind error grid with the culprit marked, the worst items (a click selects them in both
// timelines); then Calibrate (the profile fitted from the measured trace, as `stagecraft
// calibrate` fits it) and "Use calibrated", which re-simulates the plan on the fitted profile and
// compares again, showing the step-time error before and after.
#pragma once

#include <QWidget>

#include <optional>
#include <string>
#include <vector>

#include "gui/model/comparison.hpp"

class QCheckBox;
class QChartView;
class QLabel;
class QListWidget;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTabWidget;

namespace stagecraft::gui {

class TimeAxis;
class TimelineView;

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);

  // The plan whose simulated step is compared (the selected plan), and its training.
  void set_simulated(PlanViewPtr simulated);
  // Loads measured trace files (traces::read_trace_files); false with error() when they do not
  // load or do not match the plan, and nothing else changes.
  bool load_measured(const std::vector<std::string>& files);
  bool set_measured(traces::Trace measured);
  void set_step(int32_t step);
  // Calibrates from the measured trace; false with error() when it cannot.
  bool calibrate();
  // Re-simulates on the calibrated profile and compares again.
  bool use_calibrated();

  const std::optional<CompareData>& data() const { return data_; }
  const std::optional<traces::Calibration>& calibration() const { return calibration_; }
  const QString& error() const { return error_; }
  const std::vector<std::string>& measured_files() const { return files_; }
  QTableWidget* kinds_table() const { return kinds_; }
  QTableWidget* grid_table() const { return grid_; }
  QListWidget* worst_list() const { return worst_; }
  TimelineView* simulated_timeline() const { return sim_view_; }
  // Each rank's compute | exposed communication | bubble, simulated above measured (the step's
  // partition, as Holistic Trace Analysis draws its temporal breakdown).
  QChartView* breakdown_chart() const { return breakdown_; }
  QTabWidget* tables() const { return tabs_; }
  TimelineView* measured_timeline() const { return meas_view_; }
  double error_before() const { return error_before_; }
  void set_overlay(bool on);   // step-time error before "Use calibrated"

 signals:
  void compared();

 private:
  bool refresh();
  void fill();
  void select_item(int index);
  void apply_overlay();

  PlanViewPtr simulated_;
  std::optional<traces::Trace> measured_;
  std::vector<std::string> files_;
  std::optional<CompareData> data_;
  std::optional<traces::Calibration> calibration_;
  QString error_;
  double error_before_ = NAN;
  TimeAxis* axis_ = nullptr;
  TimelineView *sim_view_ = nullptr, *meas_view_ = nullptr;
  QLabel *banner_ = nullptr, *summary_ = nullptr, *calibration_text_ = nullptr;
  QSpinBox* step_ = nullptr;
  QTableWidget *kinds_ = nullptr, *ranks_ = nullptr, *grid_ = nullptr, *params_ = nullptr;
  QListWidget* worst_ = nullptr;
  QChartView* breakdown_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QPushButton *calibrate_ = nullptr, *use_ = nullptr;
  QCheckBox* overlay_ = nullptr;
};

}  // namespace stagecraft::gui
