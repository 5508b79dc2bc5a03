// Drawing traces/timeline.hpp's panels into a PNG for `stagecraft compare --png`: each panel a
// title with a legend of its kinds, one row per rank and lane (or stream), one bar per event in
// its kind's colour (render/colours.hpp), and a time axis shared by all panels. Two libraries
// define these functions and a program links one of them:
//   stagecraft_render       render/timeline_png.cpp, with Qt Gui (QImage + QPainter), offscreen
//                           (QT_QPA_PLATFORM=offscreen unless the caller set a platform); built
//                           only with STAGECRAFT_WITH_GUI
//   stagecraft_render_none  render/timeline_png_none.cpp, without Qt: png_available() is false
//                           and write_timeline_png throws
// The layout itself (which bars, which rows) is traces::timeline_panel; this is only paint.
#pragma once

#include <string>
#include <vector>

#include "traces/timeline.hpp"

namespace stagecraft::render {

bool png_available();
// Writes the panels as a PNG of `width` pixels; throws std::runtime_error when the program has
// no Qt, or the file cannot be written.
void write_timeline_png(const std::vector<traces::TimelinePanel>& panels, const std::string& path, int width = 1600);

}  // namespace stagecraft::render
