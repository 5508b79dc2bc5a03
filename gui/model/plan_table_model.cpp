#include "gui/model/plan_table_model.hpp"

#include <algorithm>
#include <numeric>

#include "core/spec/plan.hpp"
#include "core/text/format.hpp"
#include "planner/store.hpp"

namespace stagecraft::gui {

PlanTableModel::PlanTableModel(QObject* parent) : QAbstractTableModel(parent) {}

int PlanTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int PlanTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : kColumnCount; }

namespace {

QString q(const std::string& s) { return QString::fromStdString(s); }

double raw(const planner::Evaluated& e, int column, int rank) {
  const sim::Metrics& m = e.metrics;
  const spec::Plan& p = e.plan;
  switch (column) {
    case PlanTableModel::kRank: return rank > 0 ? rank : 1e18;   // plans that do not fit sort last
    case PlanTableModel::kStep: return m.step_time_s;
    case PlanTableModel::kTokens: return m.tokens_per_s;
    case PlanTableModel::kMfu: return m.mfu;
    case PlanTableModel::kBubble: return m.bubble_fraction;
    case PlanTableModel::kExposed: return m.time.exposed_comm_s;
    case PlanTableModel::kSplit: return m.time.compute_s;
    case PlanTableModel::kMemory: return static_cast<double>(m.peak_memory_bytes);
    case PlanTableModel::kTp: return static_cast<double>(p.tp);
    case PlanTableModel::kCp: return static_cast<double>(p.cp);
    case PlanTableModel::kEp: return static_cast<double>(p.ep);
    case PlanTableModel::kPp: return static_cast<double>(p.pp);
    case PlanTableModel::kDp: return static_cast<double>(p.dp);
    case PlanTableModel::kMicro: return static_cast<double>(p.micro_batch) * 1e6 + static_cast<double>(p.micro_batches);
    case PlanTableModel::kSchedule: return static_cast<double>(p.schedule) * 100 + static_cast<double>(p.virtual_stages);
    case PlanTableModel::kZero: return p.zero.stage;
    case PlanTableModel::kRecompute: return static_cast<double>(p.recompute);
    case PlanTableModel::kSp: return p.sequence_parallel ? 1 : 0;
    case PlanTableModel::kFits: return m.fits ? 1 : 0;
    default: return 0;
  }
}

QString text(const planner::Evaluated& e, int column, int rank) {
  const sim::Metrics& m = e.metrics;
  const spec::Plan& p = e.plan;
  switch (column) {
    case PlanTableModel::kRank: return rank > 0 ? QString::number(rank) : QStringLiteral("—");
    case PlanTableModel::kPlan: return q(e.key);
    case PlanTableModel::kStep: return q(text::fmt("%.3f", m.step_time_s));
    case PlanTableModel::kTokens: return q(text::short_rate(m.tokens_per_s));
    case PlanTableModel::kMfu: return q(text::fmt("%.1f%%", m.mfu * 100));
    case PlanTableModel::kBubble: return q(text::fmt("%.1f%%", m.bubble_fraction * 100));
    case PlanTableModel::kExposed: return q(text::fmt("%.3f", m.time.exposed_comm_s));
    case PlanTableModel::kSplit: return {};
    case PlanTableModel::kMemory:
      return q(text::gib(static_cast<double>(m.peak_memory_bytes)) + " / " + text::gib(static_cast<double>(m.capacity_bytes)));
    case PlanTableModel::kTp: return QString::number(p.tp);
    // the size and, but for the default ring, its comm type ("2", "16 all_gather", "4 a2a")
    case PlanTableModel::kCp:
      return p.cp > 1 && p.cp_comm != spec::CpComm::kP2p ? QStringLiteral("%1 %2").arg(p.cp).arg(QString::fromUtf8(spec::to_string(p.cp_comm)))
                                                        : QString::number(p.cp);
    // the size and, where set, expert tensor parallelism and the all-gather dispatcher ("8", "4 etp2", "2 ag")
    case PlanTableModel::kEp: {
      QString s = QString::number(p.ep);
      if (p.etp > 1) s += QStringLiteral(" etp%1").arg(p.etp);
      if (p.moe_dispatcher == spec::MoeDispatcher::kAllGather) s += QStringLiteral(" ag");
      if (p.moe_dispatcher == spec::MoeDispatcher::kFlex) s += QStringLiteral(" flex");
      return s;
    }
    case PlanTableModel::kPp: return QString::number(p.pp);
    case PlanTableModel::kDp: return QString::number(p.dp);
    case PlanTableModel::kMicro: return QStringLiteral("%1×%2").arg(p.micro_batch).arg(p.micro_batches);
    case PlanTableModel::kSchedule: {
      QString s = QString::fromUtf8(spec::to_string(p.schedule));
      if (p.virtual_stages > 1) s += QStringLiteral(" v%1").arg(p.virtual_stages);
      return s;
    }
    // the stage and its variant across nodes ("3 hpz8 qwz qgz", "3 shard8")
    case PlanTableModel::kZero: return QString::number(p.zero.stage) + QString::fromStdString(spec::zero_variant(p.zero, p.dp));
    case PlanTableModel::kRecompute: return QString::fromUtf8(spec::to_string(p.recompute));
    case PlanTableModel::kSp: return p.sequence_parallel ? QStringLiteral("on") : QStringLiteral("off");
    case PlanTableModel::kFits: return m.fits ? QStringLiteral("yes") : QStringLiteral("no");
    default: return {};
  }
}

}  // namespace

QVariant PlanTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const planner::Evaluated& e = rows_[static_cast<std::size_t>(index.row())];
  const int rank = rank_[static_cast<std::size_t>(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      if (index.row() == baseline_row_ && index.column() == kRank) return QStringLiteral("★");
      return text(e, index.column(), rank);
    case kRawRole:
      if (index.column() == kPlan) return q(e.key);
      return raw(e, index.column(), rank);
    case kKeyRole: return q(e.key);
    case kFitsRole: return e.metrics.fits;
    case kSplitRole:
      return QVariantList{e.metrics.time.compute_s, e.metrics.time.exposed_comm_s, e.metrics.time.bubble_s};
    case kMemoryRole:
      return QVariantList{static_cast<qlonglong>(e.metrics.peak_memory_bytes), static_cast<qlonglong>(e.metrics.capacity_bytes)};
    case Qt::ToolTipRole:
      if (index.column() == kPlan) return q(e.key);
      if (index.row() == baseline_row_) return q(e.plan.source);
      if (index.column() == kSplit) {
        const sim::TimeBreakdown& t = e.metrics.time;
        return q(text::fmt("compute %.3f s", t.compute_s) + text::fmt(" · exposed communication %.3f s", t.exposed_comm_s) +
                 text::fmt(" · bubble %.3f s", t.bubble_s));
      }
      if (index.column() == kMemory && !e.metrics.fits) return q(sim::fit_reason(e.metrics));
      return {};
    case Qt::TextAlignmentRole:
      if (index.column() == kPlan || index.column() == kSchedule || index.column() == kRecompute) {
        return QVariant::fromValue(Qt::AlignLeft | Qt::AlignVCenter);
      }
      return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
    default: return {};
  }
}

QVariant PlanTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  static const char* const names[kColumnCount] = {"#", "plan", "step s", "tokens/s", "MFU", "bubble", "exposed comm s",
                                                  "time split", "peak / capacity GiB", "tp", "cp", "ep", "pp", "dp", "mb×m",
                                                  "schedule", "ZeRO", "recompute", "sp", "fits"};
  static const char* const tips[kColumnCount] = {
      "rank by tokens/s among the plans that fit (planner::better)", "the plan key (planner::plan_key)",
      "simulated step time, seconds", "tokens per second over all GPUs", "model FLOP/s over the dtype's peak",
      "pipeline bubble as a fraction of the step", "communication the compute lane does not hide, seconds",
      "compute | exposed communication | bubble (the step's partition)", "peak memory of the peak rank against the GPU",
      "tensor parallel", "context parallel: ranks splitting a sequence, and the comm type when not the p2p ring",
      "expert parallel: ranks splitting each mixture-of-experts layer's experts (1 for a dense model); etpN: each expert's "
      "width split over N ranks (expert tensor parallelism); ag: Megatron-Core's all-gather token dispatcher", "pipeline stages", "data parallel", "micro-batch size × micro-batches", "pipeline schedule",
      "ZeRO stage", "activation recompute", "sequence parallelism", "peak memory within the GPU"};
  if (section < 0 || section >= kColumnCount) return {};
  if (role == Qt::DisplayRole) return QString::fromUtf8(names[section]);
  if (role == Qt::ToolTipRole) return QString::fromUtf8(tips[section]);
  return {};
}

void PlanTableModel::clear() {
  beginResetModel();
  rows_.clear();
  rank_.clear();
  by_key_.clear();
  front_.clear();
  baseline_row_ = -1;
  if (baseline_) {
    baseline_row_ = 0;
    by_key_[baseline_->key] = 0;
    rows_.push_back(*baseline_);
    rank_.push_back(0);
  }
  endResetModel();
}

void PlanTableModel::set_baseline(const std::optional<planner::Baseline>& b) {
  if (b) {
    planner::Evaluated e;
    e.plan = b->plan;
    e.plan.source = b->name;
    e.key = "baseline: " + planner::plan_key(b->plan);
    e.metrics = b->metrics;
    baseline_ = e;
  } else {
    baseline_.reset();
  }
  std::vector<planner::Evaluated> keep;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if (static_cast<int>(i) != baseline_row_) keep.push_back(rows_[i]);
  }
  clear();
  append(keep);
}

void PlanTableModel::append(std::span<const planner::Evaluated> rows) {
  if (rows.empty()) return;
  beginInsertRows({}, rowCount(), rowCount() + static_cast<int>(rows.size()) - 1);
  for (const planner::Evaluated& e : rows) {
    by_key_[e.key] = static_cast<int>(rows_.size());
    rows_.push_back(e);
    rank_.push_back(0);
  }
  endInsertRows();
  rerank();
}

void PlanTableModel::set_result(const planner::SearchResult& r) {
  beginResetModel();
  rows_.clear();
  baseline_row_ = -1;
  if (baseline_) {
    baseline_row_ = 0;
    rows_.push_back(*baseline_);
  }
  rows_.insert(rows_.end(), r.evaluated.begin(), r.evaluated.end());
  rank_.assign(rows_.size(), 0);
  by_key_.clear();
  for (std::size_t i = 0; i < rows_.size(); ++i) by_key_[rows_[i].key] = static_cast<int>(i);
  front_.clear();
  for (const planner::Evaluated& e : r.pareto) front_.insert(e.key);
  endResetModel();
  rerank();
}

int PlanTableModel::row_of(const std::string& key) const {
  const auto it = by_key_.find(key);
  return it == by_key_.end() ? -1 : it->second;
}

bool PlanTableModel::on_front(int row) const { return front_.count(rows_.at(static_cast<std::size_t>(row)).key) > 0; }

void PlanTableModel::rerank() {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].metrics.fits && !rows_[i].metrics.failed && static_cast<int>(i) != baseline_row_) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return planner::better(rows_[a], rows_[b]); });
  std::fill(rank_.begin(), rank_.end(), 0);
  for (std::size_t r = 0; r < order.size(); ++r) rank_[order[r]] = static_cast<int>(r) + 1;
  if (!rows_.empty()) emit dataChanged(index(0, kRank), index(rowCount() - 1, kRank));
}

std::unordered_set<std::string> keys_where(const std::vector<planner::Evaluated>& plans, const std::string& where) {
  planner::Store store(":memory:", false);
  bool resumed = false;
  // The search row's identity columns are not what the filter reads; the plans' columns are.
  const nlohmann::json inputs = {{"model", {{"name", "gui"}}}, {"cluster", {{"name", "gui"}}}, {"gpus", 0},
                                 {"training", {{"global_batch", 0}}}};
  const int64_t id = store.start_search(inputs, "gui", 1, false, &resumed);
  std::vector<const planner::Evaluated*> rows;
  rows.reserve(plans.size());
  for (const planner::Evaluated& e : plans) rows.push_back(&e);
  store.record(id, rows, planner::Counts{}, 0);
  std::unordered_set<std::string> out;
  for (const planner::StoredPlan& p : store.plans(id, where, 0)) out.insert(p.key);
  return out;
}

PlanFilterProxy::PlanFilterProxy(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(kRawRole);
  setDynamicSortFilter(true);
}

const PlanTableModel* PlanFilterProxy::table() const { return qobject_cast<const PlanTableModel*>(sourceModel()); }

void PlanFilterProxy::set_fits_only(bool on) {
  fits_only_ = on;
  invalidateFilter();
}
void PlanFilterProxy::set_front_only(bool on) {
  front_only_ = on;
  invalidateFilter();
}
void PlanFilterProxy::set_text(const QString& text) {
  text_ = text;
  invalidateFilter();
}
void PlanFilterProxy::set_keys(std::optional<std::unordered_set<std::string>> keys) {
  keys_ = std::move(keys);
  invalidateFilter();
}

QString PlanFilterProxy::evaluate_where() {
  if (where_.empty() || !table()) {
    where_keys_.reset();
    return {};
  }
  try {
    where_keys_ = keys_where(table()->plans(), where_);
  } catch (const std::exception& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

QString PlanFilterProxy::set_where(const std::string& where) {
  const std::string old = where_;
  where_ = where;
  const QString error = evaluate_where();
  if (!error.isEmpty()) {
    where_ = old;
    evaluate_where();
    return error;
  }
  invalidateFilter();
  return {};
}

void PlanFilterProxy::refresh() {
  if (!where_.empty()) evaluate_where();
  invalidateFilter();
}

bool PlanFilterProxy::filterAcceptsRow(int source_row, const QModelIndex&) const {
  const PlanTableModel* t = table();
  if (!t) return true;
  const planner::Evaluated& e = t->plan(source_row);
  if (t->is_baseline(source_row)) return true;   // pinned
  if (fits_only_ && !e.metrics.fits) return false;
  if (front_only_ && !t->on_front(source_row)) return false;
  if (!text_.isEmpty() && !QString::fromStdString(e.key).contains(text_, Qt::CaseInsensitive)) return false;
  if (where_keys_ && !where_keys_->count(e.key)) return false;
  if (keys_ && !keys_->count(e.key)) return false;
  return true;
}

bool PlanFilterProxy::lessThan(const QModelIndex& a, const QModelIndex& b) const {
  // the baseline row first in either order
  if (const PlanTableModel* t = table()) {
    if (t->is_baseline(a.row())) return sortOrder() == Qt::AscendingOrder;
    if (t->is_baseline(b.row())) return sortOrder() != Qt::AscendingOrder;
  }
  const QVariant va = sourceModel()->data(a, kRawRole), vb = sourceModel()->data(b, kRawRole);
  if (va.typeId() == QMetaType::QString) return va.toString() < vb.toString();
  const double x = va.toDouble(), y = vb.toDouble();
  if (x != y) return x < y;
  // ties: plan key ascending whatever the sort order
  const QString ka = sourceModel()->data(a, kKeyRole).toString(), kb = sourceModel()->data(b, kKeyRole).toString();
  return sortOrder() == Qt::AscendingOrder ? ka < kb : ka > kb;
}

}  // namespace stagecraft::gui
