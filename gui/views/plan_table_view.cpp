#include "gui/views/plan_table_view.hpp"

#include <QCheckBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QTableView>
#include <QVBoxLayout>

namespace stagecraft::gui {

QColor SplitBarDelegate::colour(int segment) {
  switch (segment) {
    case 0: return QColor(68, 119, 170);    // compute
    case 1: return QColor(238, 102, 119);   // exposed communication
    default: return QColor(204, 187, 68);   // bubble
  }
}

void SplitBarDelegate::paint(QPainter* g, const QStyleOptionViewItem& option, const QModelIndex& index) const {
  QStyledItemDelegate::paint(g, option, index);
  const QVariantList v = index.data(kSplitRole).toList();
  if (v.size() != 3) return;
  double total = 0;
  for (const QVariant& x : v) total += x.toDouble();
  if (total <= 0) return;
  const QRect r = option.rect.adjusted(2, 4, -2, -4);
  double x = r.left();
  for (int i = 0; i < 3; ++i) {
    const double w = v[i].toDouble() / total * r.width();
    const int x0 = static_cast<int>(std::lround(x)), x1 = static_cast<int>(std::lround(x + w));
    if (x1 > x0) g->fillRect(QRect(x0, r.top(), x1 - x0, r.height()), colour(i));
    x += w;
  }
}

void MemoryBarDelegate::paint(QPainter* g, const QStyleOptionViewItem& option, const QModelIndex& index) const {
  const QVariantList v = index.data(kMemoryRole).toList();
  if (v.size() == 2 && v[1].toLongLong() > 0) {
    const double peak = static_cast<double>(v[0].toLongLong()), cap = static_cast<double>(v[1].toLongLong());
    const QRect r = option.rect.adjusted(2, 3, -2, -3);
    const double scale = std::max(peak, cap) * 1.05;
    const int w = static_cast<int>(std::lround(peak / scale * r.width()));
    g->fillRect(QRect(r.left(), r.top(), w, r.height()), peak <= cap ? QColor(187, 221, 187) : QColor(238, 170, 170));
    const int xc = r.left() + static_cast<int>(std::lround(cap / scale * r.width()));
    g->fillRect(QRect(xc, r.top() - 1, 1, r.height() + 2), QColor(120, 0, 0));
  }
  QStyleOptionViewItem o = option;
  o.backgroundBrush = Qt::NoBrush;
  QStyledItemDelegate::paint(g, o, index);
}

PlanTableView::PlanTableView(PlanTableModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  proxy_ = new PlanFilterProxy(this);
  proxy_->setSourceModel(model_);
  table_ = new QTableView;
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(PlanTableModel::kRank, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(20);
  table_->setItemDelegateForColumn(PlanTableModel::kSplit, new SplitBarDelegate(table_));
  table_->setItemDelegateForColumn(PlanTableModel::kMemory, new MemoryBarDelegate(table_));
  table_->horizontalHeader()->setStretchLastSection(false);
  table_->setColumnWidth(PlanTableModel::kRank, 36);
  table_->setColumnWidth(PlanTableModel::kPlan, 330);
  for (int c : {PlanTableModel::kStep, PlanTableModel::kTokens, PlanTableModel::kMfu, PlanTableModel::kBubble}) table_->setColumnWidth(c, 72);
  table_->setColumnWidth(PlanTableModel::kExposed, 112);
  table_->setColumnWidth(PlanTableModel::kSplit, 120);
  table_->setColumnWidth(PlanTableModel::kMemory, 140);
  for (int c = PlanTableModel::kTp; c < PlanTableModel::kColumnCount; ++c) table_->setColumnWidth(c, 58);
  table_->setColumnWidth(PlanTableModel::kZero, 110);       // "3 hpz8 qwz qgz", ZeRO across nodes
  table_->setColumnWidth(PlanTableModel::kRecompute, 76);   // its header and "selective"
  table_->setTextElideMode(Qt::ElideMiddle);

  text_ = new QLineEdit;
  text_->setPlaceholderText(QStringLiteral("key contains…"));
  text_->setClearButtonEnabled(true);
  connect(text_, &QLineEdit::textChanged, proxy_, &PlanFilterProxy::set_text);
  where_ = new QLineEdit;
  where_->setPlaceholderText(QStringLiteral("where (stagecraft results --where), e.g. pp >= 2 and zero_stage = 1"));
  where_->setClearButtonEnabled(true);
  where_error_ = new QLabel;
  where_error_->setStyleSheet(QStringLiteral("color: #b00020;"));
  where_error_->setWordWrap(true);
  connect(where_, &QLineEdit::editingFinished, this, [this] {
    const QString error = proxy_->set_where(where_->text().trimmed().toStdString());
    where_error_->setText(error);
    where_error_->setVisible(!error.isEmpty());
  });
  where_error_->hide();
  fits_ = new QCheckBox(QStringLiteral("fits only"));
  connect(fits_, &QCheckBox::toggled, proxy_, &PlanFilterProxy::set_fits_only);
  front_ = new QCheckBox(QStringLiteral("Pareto only"));
  connect(front_, &QCheckBox::toggled, proxy_, &PlanFilterProxy::set_front_only);

  auto* filters = new QHBoxLayout;
  filters->addWidget(text_, 1);
  filters->addWidget(where_, 3);
  filters->addWidget(fits_);
  filters->addWidget(front_);
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(0, 0, 0, 0);
  v->addLayout(filters);
  v->addWidget(where_error_);
  v->addWidget(table_, 1);

  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    if (current.isValid()) emit plan_selected(proxy_->data(proxy_->index(current.row(), 0), kKeyRole).toString());
  });
  connect(model_, &QAbstractItemModel::rowsInserted, proxy_, [this] { proxy_->refresh(); });
  connect(model_, &QAbstractItemModel::modelReset, proxy_, [this] { proxy_->refresh(); });
}

void PlanTableView::select_key(const std::string& key) {
  const int row = model_->row_of(key);
  if (row < 0) return;
  const QModelIndex p = proxy_->mapFromSource(model_->index(row, 0));
  if (!p.isValid()) return;
  if (table_->currentIndex().row() == p.row()) return;
  table_->setCurrentIndex(p);
  table_->scrollTo(p);
}

std::string PlanTableView::selected_key() const {
  const QModelIndex i = table_->currentIndex();
  if (!i.isValid()) return {};
  return proxy_->data(proxy_->index(i.row(), 0), kKeyRole).toString().toStdString();
}

}  // namespace stagecraft::gui
