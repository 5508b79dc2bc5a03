#include "core/spec/json_reader.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

namespace stagecraft::spec {

using nlohmann::json;

namespace {

// JSON pointer escaping (RFC 6901): '~' -> "~0", '/' -> "~1".
std::string escape_pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::pair<int, int> line_and_column(const std::string& text, std::size_t byte) {
  int line = 1, column = 1;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
  }
  return {line, column};
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

struct Unit { std::string_view suffix; double scale; Quantity kind; };

// Decimal prefixes are powers of 1000, binary (Ki, Mi, ...) powers of 1024; "bps" is bits/s.
constexpr Unit kUnits[] = {
    {"TiB", 1099511627776.0, Quantity::kBytes}, {"GiB", 1073741824.0, Quantity::kBytes},
    {"MiB", 1048576.0, Quantity::kBytes},       {"KiB", 1024.0, Quantity::kBytes},
    {"TB", 1e12, Quantity::kBytes},             {"GB", 1e9, Quantity::kBytes},
    {"MB", 1e6, Quantity::kBytes},              {"KB", 1e3, Quantity::kBytes},
    {"kB", 1e3, Quantity::kBytes},              {"B", 1.0, Quantity::kBytes},
    {"TB/s", 1e12, Quantity::kBandwidth},       {"GB/s", 1e9, Quantity::kBandwidth},
    {"MB/s", 1e6, Quantity::kBandwidth},        {"B/s", 1.0, Quantity::kBandwidth},
    {"Tbps", 1e12 / 8, Quantity::kBandwidth},   {"Gbps", 1e9 / 8, Quantity::kBandwidth},
    {"Mbps", 1e6 / 8, Quantity::kBandwidth},
};

}  // namespace

std::string describe(const json& v) {
  std::string text = v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(path, "", "cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  try {
    return json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    auto [line, column] = line_and_column(text, e.byte == 0 ? 0 : e.byte - 1);
    std::string what = e.what();
    auto pos = what.find("syntax error");
    throw SpecError(path, "", "invalid JSON at line " + std::to_string(line) + ", column " +
                                  std::to_string(column) + ": " +
                                  (pos == std::string::npos ? what : what.substr(pos)));
  }
}

std::optional<double> parse_quantity(std::string_view text, Quantity kind) {
  std::string s(text);
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  if (s.empty()) return std::nullopt;
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string_view suffix = std::string_view(s).substr(used);
  if (suffix.empty()) return value;
  for (const Unit& u : kUnits) {
    if (u.suffix == suffix && u.kind == kind) return value * u.scale;
  }
  return std::nullopt;
}

std::optional<std::string> did_you_mean(std::string_view key, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const std::string& c : candidates) {
    std::size_t d = edit_distance(key, c);
    if (!best || d < best_distance) { best = c; best_distance = d; }
  }
  // A typo changes a few characters; a short key needs a closer match than a long one.
  const std::size_t limit = std::max<std::size_t>(2, key.size() / 3);
  if (best && best_distance <= limit) return best;
  return std::nullopt;
}

ObjectReader::ObjectReader(const json& value, std::string file, std::string pointer)
    : value_(value), file_(std::move(file)), pointer_(std::move(pointer)) {
  if (!value_.is_object()) {
    throw SpecError(file_, pointer_.empty() ? "/" : pointer_,
                    "expected a JSON object, got " + describe(value_));
  }
}

std::string ObjectReader::pointer_of(std::string_view key) const {
  return pointer_ + "/" + escape_pointer_token(key);
}

void ObjectReader::fail(std::string_view key, const std::string& expected) const {
  throw SpecError(file_, pointer_of(key), "expected " + expected);
}

void ObjectReader::fail_value(std::string_view key, const std::string& expected) const {
  auto it = value_.find(std::string(key));
  std::string got = it == value_.end() ? "nothing" : describe(*it);
  throw SpecError(file_, pointer_of(key), "expected " + expected + ", got " + got);
}

const json* ObjectReader::lookup(std::string_view key) {
  known_.emplace(key);
  auto it = value_.find(std::string(key));
  return it == value_.end() ? nullptr : &*it;
}

const json& ObjectReader::require(std::string_view key) {
  const json* v = lookup(key);
  if (!v) throw SpecError(file_, pointer_of(key), "missing required key");
  return *v;
}

bool ObjectReader::has(std::string_view key) { return lookup(key) != nullptr; }

double ObjectReader::to_number(std::string_view key, const json& v, Quantity kind) const {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    auto q = parse_quantity(v.get<std::string>(), kind);
    if (q && std::isfinite(*q)) return *q;
  }
  const char* what = kind == Quantity::kBytes       ? "a number of bytes (e.g. 85899345920 or \"80GiB\")"
                     : kind == Quantity::kBandwidth ? "a bandwidth in bytes/s (e.g. 25e9, \"25GB/s\" or \"200Gbps\")"
                                                    : "a number";
  fail_value(key, what);
}

int64_t ObjectReader::to_integer(std::string_view key, const json& v, Quantity kind) const {
  if (v.is_number_integer()) return v.get<int64_t>();
  double d = to_number(key, v, kind);
  if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) {
    fail_value(key, "an integer");
  }
  return static_cast<int64_t>(d);
}

int64_t ObjectReader::integer(std::string_view key, Quantity kind) {
  return to_integer(key, require(key), kind);
}

int64_t ObjectReader::integer_or(std::string_view key, int64_t fallback, Quantity kind) {
  const json* v = lookup(key);
  return v ? to_integer(key, *v, kind) : fallback;
}

double ObjectReader::number(std::string_view key, Quantity kind) {
  return to_number(key, require(key), kind);
}

double ObjectReader::number_or(std::string_view key, double fallback, Quantity kind) {
  const json* v = lookup(key);
  return v ? to_number(key, *v, kind) : fallback;
}

bool ObjectReader::boolean(std::string_view key) {
  const json& v = require(key);
  if (!v.is_boolean()) fail_value(key, "true or false");
  return v.get<bool>();
}

bool ObjectReader::boolean_or(std::string_view key, bool fallback) {
  return has(key) ? boolean(key) : fallback;
}

std::string ObjectReader::string(std::string_view key) {
  const json& v = require(key);
  if (!v.is_string()) fail_value(key, "a string");
  return v.get<std::string>();
}

std::string ObjectReader::string_or(std::string_view key, std::string fallback) {
  return has(key) ? string(key) : fallback;
}

std::string ObjectReader::choice(std::string_view key, std::initializer_list<std::string_view> choices) {
  std::string s = string(key);
  for (std::string_view c : choices) {
    if (c == s) return s;
  }
  std::string list;
  for (std::string_view c : choices) list += (list.empty() ? "\"" : ", \"") + std::string(c) + "\"";
  fail_value(key, "one of " + list);
}

std::string ObjectReader::choice_or(std::string_view key, std::initializer_list<std::string_view> choices,
                                    std::string fallback) {
  return has(key) ? choice(key, choices) : fallback;
}

ObjectReader ObjectReader::object(std::string_view key) {
  const json& v = require(key);
  if (!v.is_object()) fail_value(key, "a JSON object");
  return ObjectReader(v, file_, pointer_of(key));
}

const json& ObjectReader::raw(std::string_view key) { return require(key); }

void ObjectReader::finish() const {
  std::vector<std::string> known(known_.begin(), known_.end());
  for (const auto& [key, _] : value_.items()) {
    if (known_.count(key)) continue;
    std::string detail = "unknown key \"" + key + "\"";
    if (auto hint = did_you_mean(key, known)) detail += " (did you mean \"" + *hint + "\"?)";
    throw SpecError(file_, pointer_of(key), detail);
  }
}

}  // namespace stagecraft::spec
