// Small helpers the chart views share (Qt Charts).
#pragma once

#include <QtCharts/QAbstractAxis>
#include <QtCharts/QChart>

namespace stagecraft::gui {

// Removes every series and axis of a chart, to draw it anew.
inline void clear_chart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
}

}  // namespace stagecraft::gui
