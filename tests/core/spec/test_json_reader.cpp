#include "core/spec/json_reader.hpp"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "support.hpp"

namespace stagecraft::spec {
namespace {

using nlohmann::json;
using test::expect_spec_error;

TEST(DidYouMean, SuggestsTheClosestKnownKey) {
  std::vector<std::string> keys = {"layers", "hidden", "heads", "kv_heads", "ffn_hidden"};
  EXPECT_EQ(did_you_mean("hiden", keys), "hidden");
  EXPECT_EQ(did_you_mean("kv_head", keys), "kv_heads");
  EXPECT_EQ(did_you_mean("Layers", keys), "layers");  // case is not a typo's edit
  EXPECT_EQ(did_you_mean("optimizer", keys), std::nullopt);
}

TEST(ParseQuantity, AcceptsDocumentedUnitsOnly) {
  EXPECT_DOUBLE_EQ(*parse_quantity("5e8", Quantity::kCount), 5e8);
  EXPECT_DOUBLE_EQ(*parse_quantity("80GiB", Quantity::kBytes), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*parse_quantity("80 GB", Quantity::kBytes), 80e9);
  EXPECT_DOUBLE_EQ(*parse_quantity("200Gbps", Quantity::kBandwidth), 200e9 / 8);
  EXPECT_DOUBLE_EQ(*parse_quantity("25GB/s", Quantity::kBandwidth), 25e9);
  EXPECT_EQ(parse_quantity("80GiB", Quantity::kBandwidth), std::nullopt);  // a size is not a rate
  EXPECT_EQ(parse_quantity("80 gigs", Quantity::kBytes), std::nullopt);
  EXPECT_EQ(parse_quantity("", Quantity::kCount), std::nullopt);
  EXPECT_EQ(parse_quantity("0x4", Quantity::kCount), std::nullopt);  // decimal only
  EXPECT_EQ(parse_quantity("inf", Quantity::kBytes), std::nullopt);
  EXPECT_EQ(parse_quantity("1e400GB", Quantity::kBytes), std::nullopt);  // overflows a double
  EXPECT_EQ(parse_quantity("1e307TiB", Quantity::kBytes), std::nullopt);  // finite number, infinite bytes
  EXPECT_EQ(parse_quantity("80", Quantity::kBytes, /*require_unit=*/true), std::nullopt);
}

// One rule for numbers in every loader: JSON numbers; strings only for sizes and bandwidths, with a unit.
TEST(ObjectReader, StringsAreNotCounts) {
  json j = {{"layers", "4"}, {"hex", "0x4"}, {"mem", "80"}, {"bw", "25GB/s"}};
  ObjectReader r(j, "f.json", "");
  expect_spec_error([&] { r.integer("layers"); }, "/layers", "numbers are written without quotes");
  expect_spec_error([&] { r.integer("hex"); }, "/hex", "numbers are written without quotes");
  expect_spec_error([&] { r.number("mem", Quantity::kBytes); }, "/mem", "a string with a unit");
  EXPECT_DOUBLE_EQ(r.number("bw", Quantity::kBandwidth), 25e9);
}

TEST(ObjectReader, RejectsUnknownKeyWithSuggestion) {
  json j = {{"layers", 2}, {"hiden", 8}};
  ObjectReader r(j, "m.json", "");
  r.integer("layers");
  r.integer_or("hidden", 4);
  std::string msg = expect_spec_error([&] { r.finish(); }, "/hiden", "did you mean \"hidden\"");
  EXPECT_NE(msg.find("m.json"), std::string::npos);
}

TEST(ObjectReader, IntegersAcceptIntegralFloatsAndRejectFractions) {
  json j = {{"a", 5e8}, {"b", 2.5}, {"c", true}, {"d", "1e6"}, {"e", "2KiB"}};
  ObjectReader r(j, "f.json", "/zero");
  EXPECT_EQ(r.integer("a"), 500000000);
  EXPECT_EQ(r.integer("e", Quantity::kBytes), 2 * 1024);  // a size may carry its unit
  expect_spec_error([&] { r.integer("d"); }, "/zero/d", "expected a number, got \"1e6\" (a string");
  expect_spec_error([&] { r.integer("b"); }, "/zero/b", "expected an integer, got 2.5");
  expect_spec_error([&] { r.integer("c"); }, "/zero/c", "expected a number");
  expect_spec_error([&] { r.integer("missing"); }, "/zero/missing", "missing required key");
}

TEST(ObjectReader, ChoiceListsTheAllowedValues) {
  json j = {{"mlp", "relu"}};
  ObjectReader r(j, "f.json", "");
  expect_spec_error([&] { r.choice("mlp", {"gelu", "swiglu"}); }, "/mlp",
                    "expected one of \"gelu\", \"swiglu\", got \"relu\"");
}

TEST(ObjectReader, NonObjectIsRejected) {
  json j = json::array({1, 2});
  expect_spec_error([&] { ObjectReader r(j, "f.json", ""); }, "/", "expected a JSON object");
}

TEST(ReadJsonFile, SyntaxErrorNamesLineAndColumn) {
  const std::string path = ::testing::TempDir() + "/broken.json";
  {
    std::ofstream out(path);
    out << "{\n  \"layers\": 2,\n  \"hidden\": ,\n}\n";
  }
  std::string msg = expect_spec_error([&] { read_json_file(path); }, "", "line 3");
  EXPECT_NE(msg.find(path), std::string::npos);
  std::remove(path.c_str());
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// 200,000 levels used to overflow the stack while the error message quoted the value.
TEST(ReadJsonFile, DeepNestingIsRefusedWithItsPointer) {
  const int depth = 200'000;
  const std::string path = write_temp("deep.json", "{\"layers\": " + std::string(depth, '[') + std::string(depth, ']') + "}");
  // The pointer names the first levels only: "/layers", then "/0" per array until past 40 characters.
  auto shortened = [](std::string p) {
    while (p.size() <= 40) p += "/0";
    return p + "/...";
  };
  std::string msg = expect_spec_error([&] { read_json_file(path); }, shortened("/layers"), "nested deeper than 256 levels");
  EXPECT_LT(msg.size(), 300u);
  // kMaxJsonDepth levels in all are allowed: the object is level 1, so 255 arrays inside it.
  const std::string ok = write_temp("ok.json", "{\"a\": " + std::string(kMaxJsonDepth - 1, '[') +
                                                   std::string(kMaxJsonDepth - 1, ']') + "}");
  EXPECT_TRUE(read_json_file(ok).is_object());
  const std::string over = write_temp("over.json", "{\"a\": " + std::string(kMaxJsonDepth, '[') +
                                                     std::string(kMaxJsonDepth, ']') + "}");
  expect_spec_error([&] { read_json_file(over); }, shortened("/a"), "nested deeper");
}

TEST(ReadJsonFile, DuplicateKeysAreRefused) {
  const std::string path = write_temp("dup.json", "{\"zero\": {\"stage\": 3, \"stage\": 1}}");
  expect_spec_error([&] { read_json_file(path); }, "/zero/stage", "duplicate key \"stage\"");
  // The same key in two different objects is no duplicate.
  const std::string ok = write_temp("nodup.json", "[{\"a\": 1}, {\"a\": 2}]");
  EXPECT_EQ(read_json_file(ok)[1]["a"], 2);
}

TEST(ReadJsonFile, NumberOverflowNamesLineAndColumn) {
  const std::string path = write_temp("big.json", "{\n  \"layers\": 1e400\n}");
  std::string msg = expect_spec_error([&] { read_json_file(path); }, "", "number overflow");
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
}

TEST(ReadJsonFile, TruncatedFileSaysSo) {
  const std::string path = write_temp("cut.json", "{\"layers\": [1, 2");
  expect_spec_error([&] { read_json_file(path); }, "", "truncated JSON");
}

// '{"name": "x",}' fails on its last byte, but the file is whole: a trailing comma, said so (it was
// called "truncated JSON ... inside an unfinished value"). Byte 13 is the '}' (0-based), column 14.
TEST(ReadJsonFile, TrailingCommaIsNotTruncation) {
  const std::string path = write_temp("comma.json", "{\"name\": \"x\",}");
  const std::string msg = expect_spec_error([&] { read_json_file(path); }, "", "invalid JSON at line 1, column 14 (byte 13)");
  EXPECT_EQ(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a trailing comma before '}'"), std::string::npos) << msg;
  const std::string list = write_temp("comma-list.json", "{\"a\": [1, 2,\n ]}");
  EXPECT_NE(expect_spec_error([&] { read_json_file(list); }, "", "invalid JSON").find("a trailing comma before ']'"),
            std::string::npos);
}

TEST(ReadJsonFile, SizeLimitAndDirectories) {
  const std::string path = write_temp("size.json", "{\"name\": \"" + std::string(100, 'x') + "\"}");
  expect_spec_error([&] { read_json_file(path, 64); }, "", "above the limit of 64 bytes");
  expect_spec_error([&] { read_json_file(::testing::TempDir()); }, "", "is a directory");
}

TEST(Describe, BoundedForHugeValues) {
  json deep = json::array();
  json* at = &deep;
  for (int i = 0; i < 100'000; ++i) at = &at->emplace_back(json::array());
  EXPECT_EQ(describe(deep).size(), 60u);  // 57 characters and "..."
  EXPECT_EQ(describe(json(std::string(10'000'000, 'a'))).size(), 60u);
  EXPECT_EQ(describe(json{{"a", 1}}), "{\"a\":1}");
}

TEST(ReadJsonFile, MissingFile) {
  expect_spec_error([] { read_json_file("/nonexistent/model.json"); }, "", "cannot open file");
}

}  // namespace
}  // namespace stagecraft::spec
