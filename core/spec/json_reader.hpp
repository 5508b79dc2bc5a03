// ObjectReader: strict, typed access to one JSON object of a spec file.
// Every key a loader asks for (present or not) becomes "known"; finish() then rejects any other
// key with a "did you mean" suggestion. Numbers are checked for type and integrality; ranges are
// the caller's, via fail(). Sizes, bandwidths and counts also accept documented human forms
// (see parse_quantity) and never guess a unit.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/error.hpp"

namespace stagecraft::spec {

// Limits that hold for every JSON input (docs/reliability.md): no document nests deeper than
// kMaxJsonDepth; a spec file (model, cluster, training, plan, Hugging Face or DeepSpeed config,
// checkpoint manifest) is at most kMaxSpecFileBytes, a trace at most kMaxTraceFileBytes.
inline constexpr int kMaxJsonDepth = 256;
inline constexpr std::uintmax_t kMaxSpecFileBytes = std::uintmax_t{64} << 20;
inline constexpr std::uintmax_t kMaxTraceFileBytes = std::uintmax_t{4} << 30;

// Parses JSON text (comments allowed) into a document. Every failure is a SpecError naming `path`:
// a syntax error or a number too large for a double (line, column and byte), a key given twice or
// nesting deeper than `max_depth` (JSON pointer).
nlohmann::json parse_json_text(const std::string& text, const std::string& path, int max_depth = kMaxJsonDepth);

// Reads and parses a JSON file with parse_json_text; a missing file, a directory or a file above
// `max_bytes` is a SpecError too.
nlohmann::json read_json_file(const std::string& path, std::uintmax_t max_bytes = kMaxSpecFileBytes);

// What a quantity written as a string may carry as its unit.
enum class Quantity { kCount, kBytes, kBandwidth };

// Parses "5e8", "80GiB", "80 GB", "200Gbps", "25GB/s" into the base unit (elements, bytes,
// bytes/s). Returns nullopt when the text is not a finite decimal number with a unit allowed for
// `kind` (or, with `require_unit`, has no unit at all).
std::optional<double> parse_quantity(std::string_view text, Quantity kind, bool require_unit = false);

// The closest candidate by edit distance, if it is close enough to be a plausible typo.
std::optional<std::string> did_you_mean(std::string_view key, const std::vector<std::string>& candidates);

class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& value, std::string file, std::string pointer);

  bool has(std::string_view key);
  int64_t integer(std::string_view key, Quantity kind = Quantity::kCount);
  int64_t integer_or(std::string_view key, int64_t fallback, Quantity kind = Quantity::kCount);
  double number(std::string_view key, Quantity kind = Quantity::kCount);
  double number_or(std::string_view key, double fallback, Quantity kind = Quantity::kCount);
  bool boolean(std::string_view key);
  bool boolean_or(std::string_view key, bool fallback);
  std::string string(std::string_view key);
  std::string string_or(std::string_view key, std::string fallback);
  // A string that must be one of `choices`.
  std::string choice(std::string_view key, std::initializer_list<std::string_view> choices);
  std::string choice_or(std::string_view key, std::initializer_list<std::string_view> choices,
                        std::string fallback);
  ObjectReader object(std::string_view key);
  // The raw value (for arrays); marks the key known. Throws if absent.
  const nlohmann::json& raw(std::string_view key);

  // Throws SpecError for the first key that no accessor asked for.
  void finish() const;

  [[noreturn]] void fail(std::string_view key, const std::string& expected) const;
  [[noreturn]] void fail_value(std::string_view key, const std::string& expected) const;
  std::string pointer_of(std::string_view key) const;
  const std::string& file() const { return file_; }
  const std::string& pointer() const { return pointer_; }

 private:
  const nlohmann::json* lookup(std::string_view key);
  const nlohmann::json& require(std::string_view key);
  double to_number(std::string_view key, const nlohmann::json& v, Quantity kind) const;
  int64_t to_integer(std::string_view key, const nlohmann::json& v, Quantity kind) const;

  const nlohmann::json& value_;
  std::string file_;
  std::string pointer_;
  std::set<std::string, std::less<>> known_;
};

// A short rendering of a JSON value for error messages ("got ...").
std::string describe(const nlohmann::json& v);

}  // namespace stagecraft::spec
