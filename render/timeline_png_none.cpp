// render/timeline_png.hpp in a program without Qt (library stagecraft_render_none).
#include <stdexcept>

#include "render/timeline_png.hpp"

namespace stagecraft::render {

bool png_available() { return false; }

void write_timeline_png(const std::vector<traces::TimelinePanel>&, const std::string& path, int) {
  throw std::runtime_error("cannot write " + path + ": this build has no Qt (configure with STAGECRAFT_WITH_GUI=ON)");
}

}  // namespace stagecraft::render
