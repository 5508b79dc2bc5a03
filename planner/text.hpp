// printf-style formatting of one number, for the planner's tables and explanations.
#pragma once

#include <cstdio>
#include <string>

namespace stagecraft::planner::text {

inline std::string fmt(const char* format, double value) {
  char buf[96];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

}  // namespace stagecraft::planner::text
