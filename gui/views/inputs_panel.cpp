#include "gui/views/inputs_panel.hpp"

#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

#include "core/spec/bundled.hpp"
#include "core/spec/error.hpp"
#include "planner/space.hpp"

namespace stagecraft::gui {

namespace {

QLabel* info_label() {
  auto* l = new QLabel;
  l->setWordWrap(true);
  l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  return l;
}

void show_error(QLabel* l, const QString& text) {
  l->setStyleSheet(QStringLiteral("color: #b00020;"));
  l->setText(text);
}

void show_info(QLabel* l, const QString& text) {
  l->setStyleSheet(QString());
  l->setText(text);
}

}  // namespace

QComboBox* InputsPanel::picker(spec::ConfigKind kind) {
  auto* box = new QComboBox;
  box->setEditable(true);
  box->setInsertPolicy(QComboBox::NoInsert);
  for (const std::string& name : spec::bundled_names(kind)) box->addItem(QString::fromStdString(name));
  box->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  box->setMinimumContentsLength(14);
  connect(box, &QComboBox::currentTextChanged, this, [this] { reload(); });
  return box;
}

InputsPanel::InputsPanel(QWidget* parent) : QWidget(parent) {
  auto* form = new QFormLayout;
  form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  const auto with_open = [this](QComboBox* box, const QString& filter) {
    auto* row = new QHBoxLayout;
    row->addWidget(box, 1);
    auto* open = new QToolButton;
    open->setText(QStringLiteral("…"));
    open->setToolTip(QStringLiteral("open a file"));
    connect(open, &QToolButton::clicked, this, [this, box, filter] {
      const QString f = QFileDialog::getOpenFileName(this, QStringLiteral("Open"), QString(), filter);
      if (!f.isEmpty()) box->setEditText(f);
    });
    row->addWidget(open);
    return row;
  };
  model_ = picker(spec::ConfigKind::kModel);
  model_->setToolTip(QStringLiteral("a bundled model, a model.json, or a Hugging Face config.json"));
  form->addRow(QStringLiteral("Model"), with_open(model_, QStringLiteral("JSON (*.json)")));
  model_info_ = info_label();
  form->addRow(model_info_);
  cluster_ = picker(spec::ConfigKind::kCluster);
  form->addRow(QStringLiteral("Cluster"), with_open(cluster_, QStringLiteral("JSON (*.json)")));
  nodes_ = new QSpinBox;
  nodes_->setRange(1, kMaxNodes);
  nodes_->setToolTip(QStringLiteral("nodes of the cluster in use (--nodes)"));
  connect(nodes_, &QSpinBox::valueChanged, this, [this] { reload(); });
  form->addRow(QStringLiteral("Nodes"), nodes_);
  cluster_info_ = info_label();
  form->addRow(cluster_info_);
  training_ = picker(spec::ConfigKind::kTraining);
  form->addRow(QStringLiteral("Training"), with_open(training_, QStringLiteral("JSON (*.json)")));
  training_info_ = info_label();
  form->addRow(training_info_);
  deepspeed_ = new QComboBox;
  deepspeed_->setEditable(true);
  deepspeed_->setInsertPolicy(QComboBox::NoInsert);
  deepspeed_->setToolTip(QStringLiteral("a DeepSpeed ds_config.json: simulated and shown as the ★ row to compare with"));
  deepspeed_->lineEdit()->setPlaceholderText(QStringLiteral("none (a ds_config.json)"));
  connect(deepspeed_, &QComboBox::currentTextChanged, this, [this] { refresh_chip_limits(); });
  form->addRow(QStringLiteral("Baseline"), with_open(deepspeed_, QStringLiteral("DeepSpeed config (*.json)")));
  deepspeed_info_ = info_label();
  form->addRow(deepspeed_info_);

  auto* axes_title = new QLabel(QStringLiteral("<b>Plan space</b> (checked values are searched)"));
  chips_ = new QGridLayout;
  chips_->setHorizontalSpacing(2);
  chips_->setVerticalSpacing(2);
  axes_error_ = info_label();

  auto* options = new QFormLayout;
  top_ = new QSpinBox;
  top_->setRange(1, 1000);
  top_->setValue(10);
  top_->setToolTip(QStringLiteral("how many plans the search keeps exactly (--top)"));
  connect(top_, &QSpinBox::valueChanged, this, [this] { emit changed(); });
  options->addRow(QStringLiteral("Top K"), top_);
  threads_ = new QSpinBox;
  threads_->setRange(0, 256);
  threads_->setSpecialValueText(QStringLiteral("auto"));
  threads_->setToolTip(QStringLiteral("search threads (auto: cores − 1, one left for the window)"));
  connect(threads_, &QSpinBox::valueChanged, this, [this] { emit changed(); });
  options->addRow(QStringLiteral("Threads"), threads_);
  db_ = new QLineEdit;
  db_->setPlaceholderText(QStringLiteral("none (a .sqlite file)"));
  db_->setToolTip(QStringLiteral("record the search and every simulated plan in this SQLite file (--db); a stopped search can then be resumed"));
  connect(db_, &QLineEdit::editingFinished, this, [this] { emit changed(); });
  options->addRow(QStringLiteral("Results db"), db_);

  auto* v = new QVBoxLayout(this);
  v->addLayout(form);
  v->addSpacing(6);
  v->addWidget(axes_title);
  v->addLayout(chips_);
  v->addWidget(axes_error_);
  v->addSpacing(6);
  v->addLayout(options);
  v->addStretch(1);
  set_inputs(demo_inputs());
}

void InputsPanel::set_inputs(const Inputs& in) {
  loading_ = true;
  base_ = in;
  model_->setEditText(QString::fromStdString(in.model));
  cluster_->setEditText(QString::fromStdString(in.cluster));
  training_->setEditText(QString::fromStdString(in.training));
  nodes_->setValue(static_cast<int>(in.nodes > 0 ? in.nodes : 1));
  top_->setValue(static_cast<int>(in.top_k));
  threads_->setValue(in.threads);
  deepspeed_->setEditText(QString::fromStdString(in.deepspeed));
  db_->setText(QString::fromStdString(in.db));
  loading_ = false;
  axes_.clear();
  reload();
}

Inputs InputsPanel::inputs() const {
  Inputs in = base_;
  in.model = model_->currentText().toStdString();
  in.cluster = cluster_->currentText().toStdString();
  in.training = training_->currentText().toStdString();
  in.nodes = nodes_->value();
  in.top_k = top_->value();
  in.threads = threads_->value();
  in.deepspeed = deepspeed_->currentText().trimmed().toStdString();
  in.db = db_->text().trimmed().toStdString();
  in.resume = false;
  try {
    in.limits = limits_of(axes_, base_.limits);
  } catch (const spec::SpecError&) {
    // reported by error(); the search is disabled meanwhile
  }
  return in;
}

void InputsPanel::reload() {
  if (loading_) return;
  Inputs in = inputs();
  in.limits = {};
  in.deepspeed.clear();   // read with the limits, below
  std::optional<Loaded> free_space;
  error_.clear();
  const auto model_text = [](const spec::Model& m) {
    QString text = QString::fromStdString(model_summary(m));
    for (const std::string& w : m.warnings) text += QStringLiteral("\nwarning: ") + QString::fromStdString(w);
    return text;
  };
  const auto cluster_text = [this](spec::Cluster c, int64_t nodes) {
    c.nodes = nodes;
    QString text = QString::fromStdString(cluster_summary(c));
    for (const spec::Override& o : base_.overrides) text += QStringLiteral("\nwhat-if: --set ") + QString::fromStdString(o.text);
    return text;
  };
  try {
    free_space = load(in);
    show_info(model_info_, model_text(free_space->model));
    show_info(cluster_info_, cluster_text(free_space->cluster, in.nodes));
    show_info(training_info_, QString::fromStdString(training_summary(free_space->training, free_space->space->model())));
  } catch (const std::exception& whole) {
    // Each file alone, so that the error shows under its own field (or under the training, when
    // every file loads but they do not go together).
    const auto one = [&](QLabel* label, const auto& read) {
      try {
        show_info(label, read());
      } catch (const std::exception& e) {
        if (error_.isEmpty()) error_ = QString::fromStdString(e.what());
        show_error(label, QString::fromStdString(e.what()));
      }
    };
    one(model_info_, [&] { return model_text(spec::load_model(spec::resolve_config(spec::ConfigKind::kModel, in.model))); });
    one(cluster_info_, [&] {
      return cluster_text(spec::load_cluster(spec::resolve_config(spec::ConfigKind::kCluster, in.cluster), base_.overrides), in.nodes);
    });
    one(training_info_, [&] {
      const spec::Training t = spec::load_training(spec::resolve_config(spec::ConfigKind::kTraining, in.training), base_.overrides);
      return QString::fromStdString("batch " + std::to_string(t.global_batch) + " · " + spec::to_string(t.dtype) + " · " +
                                    spec::to_string(t.optimizer));
    });
    if (error_.isEmpty()) {
      error_ = QString::fromStdString(whole.what());
      show_error(training_info_, error_);
    }
  }
  if (free_space) {
    std::vector<AxisChoice> fresh = axis_choices(*free_space->space);
    // keep what the user unchecked where the value still exists
    for (AxisChoice& a : fresh) {
      for (const AxisChoice& old : axes_) {
        if (old.axis != a.axis) continue;
        for (std::size_t i = 0; i < a.values.size(); ++i) {
          const auto it = std::find(old.values.begin(), old.values.end(), a.values[i]);
          if (it != old.values.end()) a.checked[i] = old.checked[static_cast<std::size_t>(it - old.values.begin())];
        }
      }
    }
    axes_ = std::move(fresh);
  } else {
    axes_.clear();
  }
  rebuild_chips();
  refresh_chip_limits();
}

void InputsPanel::rebuild_chips() {
  while (QLayoutItem* item = chips_->takeAt(0)) {
    delete item->widget();
    delete item;
  }
  chip_buttons_.assign(axes_.size(), {});
  for (std::size_t a = 0; a < axes_.size(); ++a) {
    chips_->addWidget(new QLabel(QString::fromStdString(axes_[a].axis)), static_cast<int>(a), 0);
    auto* row = new QWidget;
    auto* h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    h->setSpacing(2);
    for (std::size_t i = 0; i < axes_[a].values.size(); ++i) {
      auto* b = new QToolButton;
      b->setText(QString::fromStdString(axes_[a].values[i]));
      b->setCheckable(true);
      b->setChecked(axes_[a].checked[i]);
      b->setAutoRaise(false);
      connect(b, &QToolButton::toggled, this, [this, a, i](bool on) {
        axes_[a].checked[i] = on;
        refresh_chip_limits();
      });
      h->addWidget(b);
      chip_buttons_[a].push_back(b);
    }
    h->addStretch(1);
    chips_->addWidget(row, static_cast<int>(a), 1);
  }
}

void InputsPanel::refresh_chip_limits() {
  if (!error_.isEmpty() && axes_.empty()) {
    loaded_.reset();
    show_info(axes_error_, {});
    emit changed();
    return;
  }
  try {
    Inputs in = inputs();
    in.limits = limits_of(axes_, base_.limits);
    show_info(deepspeed_info_, {});
    try {
      loaded_ = load(in);
    } catch (const std::exception& e) {
      if (!in.deepspeed.empty() && std::string(e.what()).find(in.deepspeed) != std::string::npos) {
        show_error(deepspeed_info_, QString::fromStdString(e.what()));
      }
      throw;
    }
    if (loaded_->baseline) {
      QString text = QString::fromStdString(planner::plan_key(loaded_->baseline->plan)) +
                     QStringLiteral(": %1 s per step").arg(loaded_->baseline->metrics.step_time_s, 0, 'f', 3);
      for (const std::string& n : loaded_->baseline_notes) text += QStringLiteral("\n") + QString::fromStdString(n);
      show_info(deepspeed_info_, text);
    }
    const std::string empty = loaded_->space->why_empty();
    if (!empty.empty()) {
      loaded_.reset();
      error_ = QString::fromStdString(empty);
      show_error(axes_error_, error_);
    } else {
      error_.clear();
      show_info(axes_error_, {});
    }
  } catch (const std::exception& e) {
    loaded_.reset();
    error_ = QString::fromStdString(e.what());
    show_error(axes_error_, error_);
  }
  emit changed();
}

void InputsPanel::set_checked(const std::string& axis, const std::string& value, bool on) {
  for (std::size_t a = 0; a < axes_.size(); ++a) {
    if (axes_[a].axis != axis) continue;
    for (std::size_t i = 0; i < axes_[a].values.size(); ++i) {
      if (axes_[a].values[i] == value) chip_buttons_[a][i]->setChecked(on);
    }
  }
}

void InputsPanel::set_enabled_inputs(bool on) {
  for (QWidget* w : std::initializer_list<QWidget*>{model_, cluster_, training_, deepspeed_, nodes_, top_, threads_, db_}) w->setEnabled(on);
  for (auto& row : chip_buttons_) {
    for (QToolButton* b : row) b->setEnabled(on);
  }
}

}  // namespace stagecraft::gui
