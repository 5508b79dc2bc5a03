// The process's resident-memory high-water mark (VmHWM), for the benchmarks' memory targets.
#pragma once

#include <fstream>
#include <string>

namespace stagecraft::bench {

inline double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  return 0;
}

}  // namespace stagecraft::bench
