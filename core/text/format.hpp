// Number formatting shared by every text report (the CLI, the planner's tables and
// explanations, and later the GUI), so one number reads the same everywhere.
#pragma once

#include <cstdint>
#include <string>

namespace stagecraft::text {

// printf-style formatting of one number: fmt("%.3f s", 1.5) -> "1.500 s".
std::string fmt(const char* format, double value);
// A number without a unit as people read it: three significant digits below 100 (0.0914, 12.3: a
// slow rate is not "0"), whole from 100 on (456, 18600).
std::string plain_number(double v);
// 1234567 -> "1,234,567"
std::string with_commas(int64_t v);
// 1.746e11 -> "174.62 B" (K, M, B, T, P, E), for counts of parameters, FLOPs and tokens; below
// 100, three significant digits (0.0914).
std::string short_count(double v);
// Bytes with a binary unit: 85899345920 -> "80.0 GiB".
std::string short_bytes(double bytes);
// Bytes as GiB with one decimal and no unit, for table columns headed "GiB": "80.0".
std::string gib(double bytes);
// Tokens per second for tables: "1.23 M", "456.7 K", "456", "89.5", "0.0914".
std::string short_rate(double per_s);

}  // namespace stagecraft::text
