// The inputs dock (docs/gui.md "Inputs and search"): model, cluster (and nodes), training — each a
// bundled name or a file, with its summary line and, when it does not load, the loader's error
// (file, JSON pointer, what was expected) under the field — then the plan-space axes as checkable
// chips, and the search options. Every change reloads (cheap) and emits changed(); the panel's
// inputs() are what Search runs and what "Copy as command" prints.
#pragma once

#include <QWidget>

#include <optional>
#include <vector>

#include "core/spec/bundled.hpp"
#include "gui/model/inputs.hpp"

class QComboBox;
class QGridLayout;
class QLabel;
class QLineEdit;
class QSpinBox;
class QToolButton;
class QVBoxLayout;

namespace stagecraft::gui {

class InputsPanel : public QWidget {
  Q_OBJECT
 public:
  // The most nodes the panel's spin box takes (the command line refuses more, never clamps).
  static constexpr int kMaxNodes = 100000;
  explicit InputsPanel(QWidget* parent = nullptr);

  void set_inputs(const Inputs& in);
  Inputs inputs() const;
  // The loaded inputs, or nullopt with error() saying why.
  const std::optional<Loaded>& loaded() const { return loaded_; }
  QString error() const { return error_; }
  const std::vector<AxisChoice>& axes() const { return axes_; }
  // Checks or unchecks one chip (what a click does).
  void set_checked(const std::string& axis, const std::string& value, bool on);
  void set_enabled_inputs(bool on);

 signals:
  void changed();

 private:
  void reload();
  void rebuild_chips();
  void refresh_chip_limits();
  QComboBox* picker(spec::ConfigKind kind);

  QComboBox *model_ = nullptr, *cluster_ = nullptr, *training_ = nullptr, *deepspeed_ = nullptr;
  QLabel* deepspeed_info_ = nullptr;
  QSpinBox *nodes_ = nullptr, *top_ = nullptr, *threads_ = nullptr;
  QLineEdit* db_ = nullptr;
  QLabel *model_info_ = nullptr, *cluster_info_ = nullptr, *training_info_ = nullptr, *axes_error_ = nullptr;
  QGridLayout* chips_ = nullptr;
  std::vector<std::vector<QToolButton*>> chip_buttons_;
  std::vector<AxisChoice> axes_;
  Inputs base_;
  std::optional<Loaded> loaded_;
  QString error_;
  bool loading_ = false;
};

}  // namespace stagecraft::gui
