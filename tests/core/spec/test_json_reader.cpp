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
  json j = {{"a", 5e8}, {"b", 2.5}, {"c", true}, {"d", "1e6"}};
  ObjectReader r(j, "f.json", "/zero");
  EXPECT_EQ(r.integer("a"), 500000000);
  EXPECT_EQ(r.integer("d"), 1000000);
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

TEST(ReadJsonFile, MissingFile) {
  expect_spec_error([] { read_json_file("/nonexistent/model.json"); }, "", "cannot open file");
}

}  // namespace
}  // namespace stagecraft::spec
