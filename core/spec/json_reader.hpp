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

// Reads and parses a JSON file; a missing file or a syntax error is a SpecError with line:column.
nlohmann::json read_json_file(const std::string& path);

// What a quantity written as a string may carry as its unit.
enum class Quantity { kCount, kBytes, kBandwidth };

// Parses "5e8", "80GiB", "80 GB", "200Gbps", "25GB/s" into the base unit (elements, bytes,
// bytes/s). Returns nullopt when the text is not a number with a unit allowed for `kind`.
std::optional<double> parse_quantity(std::string_view text, Quantity kind);

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
