#include "core/text/format.hpp"

#include <cmath>
#include <cstdio>

namespace stagecraft::text {

std::string fmt(const char* format, double value) {
  char buf[96];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string plain_number(double v) { return fmt(std::fabs(v) < 100 ? "%.3g" : "%.0f", v); }

std::string short_count(double v) {
  const char* units[] = {"", " K", " M", " B", " T", " P", " E"};
  int u = 0;
  while (std::fabs(v) >= 1000.0 && u < 6) {
    v /= 1000.0;
    ++u;
  }
  if (u == 0) return plain_number(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%s", v, units[u]);
  return buf;
}

std::string short_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 5) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string gib(double bytes) { return fmt("%.1f", bytes / (1024.0 * 1024 * 1024)); }

std::string short_rate(double v) {
  if (v >= 1e6) return fmt("%.2f M", v / 1e6);
  if (v >= 1e3) return fmt("%.1f K", v / 1e3);
  return plain_number(v);
}

}  // namespace stagecraft::text
