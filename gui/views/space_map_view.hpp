// The space map as a table: a row per tp, a column per pp, each cell the best step time coloured
// from fastest (green) to slowest (yellow), or why there is none; a click selects the cell's plan.
#pragma once

#include <QTableWidget>

#include "gui/model/space_map.hpp"

namespace stagecraft::gui {

class SpaceMapView : public QTableWidget {
  Q_OBJECT
 public:
  explicit SpaceMapView(QWidget* parent = nullptr);
  void set_map(SpaceMap map);
  const SpaceMap& map() const { return map_; }

 signals:
  void plan_selected(QString key);

 private:
  SpaceMap map_;
};

}  // namespace stagecraft::gui
