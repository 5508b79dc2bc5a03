#include "core/spec/json_reader.hpp"

#include <algorithm>
#include <charconv>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/io/file.hpp"

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

namespace {

// Renders at most `budget` characters of `v`, never walking deeper than the budget allows: a value
// nested 10^6 levels deep or a 100 MB string costs no more than a short one.
void render(const json& v, std::string& out, std::size_t budget) {
  if (out.size() >= budget) return;
  switch (v.type()) {
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : v.items()) {
        if (out.size() >= budget) return;
        if (!first) out += ',';
        first = false;
        render(json(key.substr(0, budget)), out, budget);
        out += ':';
        render(value, out, budget);
      }
      out += '}';
      return;
    }
    case json::value_t::array: {
      out += '[';
      bool first = true;
      for (const json& value : v) {
        if (out.size() >= budget) return;
        if (!first) out += ',';
        first = false;
        render(value, out, budget);
      }
      out += ']';
      return;
    }
    case json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      out += json(s.size() > budget ? s.substr(0, budget) : s).dump(-1, ' ', false, json::error_handler_t::replace);
      return;
    }
    default:
      out += v.dump();
  }
}

// Builds the document from nlohmann's SAX events (its parser is iterative), enforcing the limits
// the recursive parts of a DOM cannot survive: nesting depth, and keys given twice.
class BoundedBuilder : public nlohmann::json_sax<json> {
 public:
  explicit BoundedBuilder(int max_depth) : max_depth_(max_depth) {}

  bool null() override { return put(json(nullptr)); }
  bool boolean(bool v) override { return put(json(v)); }
  bool number_integer(number_integer_t v) override { return put(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return put(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return put(json(v)); }
  bool string(string_t& v) override { return put(json(std::move(v))); }
  bool binary(binary_t& v) override { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Level& top = stack_.back();
    if (top.value->contains(k)) {
      top.key = k;
      problem_ = Problem{pointer(), "duplicate key " + describe(json(k)) + " (each key may appear only once)"};
      return false;
    }
    top.key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    syntax_ = Syntax{position, e.what(), e.id};
    return false;
  }

  struct Problem { std::string pointer, detail; };
  struct Syntax { std::size_t position; std::string what; int id; };
  json root;
  std::optional<Problem> problem_;
  std::optional<Syntax> syntax_;

 private:
  struct Level { json* value; std::string key; };

  json* slot() {
    if (stack_.empty()) return &root;
    Level& top = stack_.back();
    if (top.value->is_array()) return &top.value->emplace_back();
    return &(*top.value)[top.key];
  }
  bool put(json&& v) {
    *slot() = std::move(v);
    return true;
  }
  bool open(json&& v) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      problem_ = Problem{pointer(), "nested deeper than " + std::to_string(max_depth_) +
                                        " levels (the limit for any input file)"};
      return false;
    }
    json* at = slot();
    *at = std::move(v);
    stack_.push_back({at, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
  // The JSON pointer of the value being read, its first levels only when it is very deep.
  std::string pointer() const {
    std::string out;
    for (std::size_t i = 0; i < stack_.size(); ++i) {
      if (out.size() > 40) return out + "/...";
      const Level& l = stack_[i];
      out += "/";
      if (l.value->is_array()) {
        out += std::to_string(l.value->empty() ? 0 : l.value->size() - 1);
      } else {
        for (char c : l.key.substr(0, 60)) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
      }
    }
    return out;
  }

  int max_depth_;
  std::vector<Level> stack_;
};

}  // namespace

std::string describe(const json& v) {
  std::string text;
  render(v, text, 64);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

json parse_json_text(const std::string& text, const std::string& path, int max_depth) {
  // JSON is UTF-8 (RFC 8259): a UTF-16 or UTF-32 file (a byte-order mark, or NUL bytes among the
  // first characters, as Windows editors and PowerShell's > write) would read as a syntax error at
  // byte 0; say what it is instead.
  const std::string_view head(text.data(), std::min<std::size_t>(text.size(), 4));
  const bool bom16 = head.starts_with("\xff\xfe") || head.starts_with("\xfe\xff");
  if (bom16 || head.find('\0') != std::string_view::npos) {
    throw SpecError(path, "", "the file is encoded as UTF-16 or UTF-32 (its first bytes" +
                                  std::string(bom16 ? " are a byte-order mark" : " hold NUL bytes") +
                                  "); JSON is read as UTF-8: save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)");
  }
  BoundedBuilder builder(max_depth);
  json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/true);
  if (builder.problem_) throw SpecError(path, builder.problem_->pointer, builder.problem_->detail);
  if (builder.syntax_) {
    const BoundedBuilder::Syntax& e = *builder.syntax_;
    const std::size_t byte = e.position == 0 ? 0 : e.position - 1;
    const auto [line, column] = line_and_column(text, byte);
    std::string detail = e.what;
    for (const char* marker : {"syntax error", "number overflow"}) {
      if (auto pos = detail.find(marker); pos != std::string::npos) {
        detail = detail.substr(pos);
        break;
      }
    }
    if (detail.size() > 200) detail = detail.substr(0, 197) + "...";
    const std::string at = "line " + std::to_string(line) + ", column " + std::to_string(column);
    // truncated: the parser ran out of input (not merely failed on the last byte, as at the '}' of
    // '{"a": 1,}', which is a trailing comma)
    if (e.id == 101 && e.position >= text.size() && detail.find("end of input") != std::string::npos) {
      throw SpecError(path, "", "truncated JSON: the file ends at " + at + " (byte " + std::to_string(text.size()) +
                                    ") inside an unfinished value: " + detail);
    }
    // A closing bracket right after a comma: the most common hand-editing slip, said so.
    std::string hint;
    if (byte < text.size() && (text[byte] == '}' || text[byte] == ']')) {
      std::size_t k = byte;
      while (k > 0 && std::isspace(static_cast<unsigned char>(text[k - 1]))) --k;
      if (k > 0 && text[k - 1] == ',') hint = " (a trailing comma before '" + std::string(1, text[byte]) + "': JSON allows none; remove it)";
    }
    throw SpecError(path, "", "invalid JSON at " + at + " (byte " + std::to_string(byte) + "): " + detail + hint);
  }
  return std::move(builder.root);
}

json read_json_file(const std::string& path, std::uintmax_t max_bytes) {
  return parse_json_text(io::read_input(path, max_bytes, "a JSON file"), path);
}

std::optional<double> parse_quantity(std::string_view text, Quantity kind, bool require_unit) {
  std::string s(text);
  s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
  if (s.empty()) return std::nullopt;
  // Decimal only (from_chars takes no "0x", "inf" is refused below): "0x4" is not a count.
  double value = 0;
  const char* begin = s.data();
  const char* end = s.data() + s.size();
  if (*begin == '+') ++begin;
  const auto [ptr, ec] = std::from_chars(begin, end, value, std::chars_format::general);
  if (ec != std::errc() || !std::isfinite(value) || ptr == begin) return std::nullopt;
  std::string_view suffix(ptr, static_cast<std::size_t>(end - ptr));
  if (suffix.empty()) {
    if (require_unit) return std::nullopt;
    return value;
  }
  for (const Unit& u : kUnits) {
    if (u.suffix == suffix && u.kind == kind) {
      const double scaled = value * u.scale;
      if (!std::isfinite(scaled)) return std::nullopt;
      return scaled;
    }
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
  // One rule for numbers: a JSON number, or, for sizes and bandwidths only, a string with one of
  // the documented units ("80GiB", "25GB/s"). "4", "0x4" or "5e8" in quotes are not numbers.
  if (v.is_number()) return v.get<double>();
  if (v.is_string() && kind != Quantity::kCount) {
    auto q = parse_quantity(v.get<std::string>(), kind, /*require_unit=*/true);
    if (q) return *q;
  }
  const char* what = kind == Quantity::kBytes
                         ? "a number of bytes (a JSON number such as 85899345920, or a string with a unit such as \"80GiB\")"
                     : kind == Quantity::kBandwidth
                         ? "a bandwidth in bytes/s (a JSON number such as 25e9, or a string with a unit such as \"25GB/s\" "
                           "or \"200Gbps\")"
                         : "a number";
  if (v.is_string() && kind == Quantity::kCount) {
    throw SpecError(file_, pointer_of(key), std::string("expected ") + what + ", got " + describe(v) +
                                                " (a string: numbers are written without quotes)");
  }
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
