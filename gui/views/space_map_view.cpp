#include "gui/views/space_map_view.hpp"

#include <QHeaderView>

#include "core/text/format.hpp"

namespace stagecraft::gui {

SpaceMapView::SpaceMapView(QWidget* parent) : QTableWidget(parent) {
  setEditTriggers(QAbstractItemView::NoEditTriggers);
  setSelectionMode(QAbstractItemView::SingleSelection);
  horizontalHeader()->setDefaultSectionSize(120);
  verticalHeader()->setDefaultSectionSize(44);
  setToolTip(QStringLiteral("the fastest plan that fits for each tensor-parallel (rows) and pipeline (columns) size; click to select it"));
  connect(this, &QTableWidget::cellClicked, this, [this](int r, int c) {
    if (r < 0 || c < 0 || static_cast<std::size_t>(r) >= map_.cells.size()) return;
    const SpaceCell& cell = map_.cells[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)];
    if (!cell.best_key.empty()) emit plan_selected(QString::fromStdString(cell.best_key));
  });
}

void SpaceMapView::set_map(SpaceMap map) {
  map_ = std::move(map);
  clear();
  setRowCount(static_cast<int>(map_.tp.size()));
  setColumnCount(static_cast<int>(map_.pp.size()));
  QStringList rows, cols;
  for (int64_t t : map_.tp) rows << QStringLiteral("tp %1").arg(t);
  for (int64_t p : map_.pp) cols << QStringLiteral("pp %1").arg(p);
  setVerticalHeaderLabels(rows);
  setHorizontalHeaderLabels(cols);
  for (std::size_t r = 0; r < map_.cells.size(); ++r) {
    for (std::size_t c = 0; c < map_.cells[r].size(); ++c) {
      const SpaceCell& cell = map_.cells[r][c];
      auto* item = new QTableWidgetItem;
      item->setTextAlignment(Qt::AlignCenter);
      if (cell.best_step_s) {
        const double span = map_.slowest - map_.fastest;
        const double f = span > 0 ? (*cell.best_step_s - map_.fastest) / span : 0;   // 0 fastest .. 1 slowest
        item->setBackground(QColor(static_cast<int>(std::lround(68 + f * (221 - 68))), static_cast<int>(std::lround(170 + f * (204 - 170))),
                                   static_cast<int>(std::lround(119 + f * (119 - 119)))));
        item->setText(QString::fromStdString(text::fmt("%.3f s", *cell.best_step_s)) +
                      QStringLiteral("\n%1 of %2 fit").arg(cell.fitting).arg(cell.simulated));
        item->setToolTip(QString::fromStdString(cell.best_key));
      } else if (cell.simulated > 0) {
        item->setBackground(QColor(238, 204, 204));
        item->setText(QStringLiteral("none fits\n(%1 simulated)").arg(cell.simulated));
      } else {
        item->setBackground(QColor(238, 238, 238));
        item->setText(QStringLiteral("not simulated"));
        item->setToolTip(QStringLiteral("every plan of this shape was pruned before simulation: by its memory bound, or its step-time bound (see Why)"));
      }
      setItem(static_cast<int>(r), static_cast<int>(c), item);
    }
  }
}

}  // namespace stagecraft::gui
