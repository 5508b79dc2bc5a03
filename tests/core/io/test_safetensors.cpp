// io::safetensors: what write() puts on disk is the format's bytes (header length, JSON header,
// little-endian data), read() gives the values back (fp32 exactly, bf16 rounded to nearest even),
// and a file whose header lies is refused naming the file and the tensor.
#include "core/io/safetensors.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/spec/error.hpp"
#include "support.hpp"

namespace stagecraft::io::safetensors {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir = test::temp_path("safetensors");
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A file of `header` (as given) and `data` bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << data;
}

TEST(Safetensors, WritesTheFormatsBytes) {
  Scratch s;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-0.5f};
  write(s.file("m.safetensors"), {{"a", {2, 3}, a}, {"b", {1}, b}}, Dtype::kF32, {{"format", "pt"}});
  const std::string raw = slurp(s.file("m.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(raw[static_cast<std::size_t>(i)]);
  ASSERT_EQ((8 + n) % 8, 0u);  // padded with spaces so the data starts 8-byte aligned
  const nlohmann::json h = nlohmann::json::parse(raw.substr(8, n));
  EXPECT_EQ(h["a"]["dtype"], "F32");
  EXPECT_EQ(h["a"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(h["a"]["data_offsets"], nlohmann::json({0, 24}));  // 6 floats x 4 bytes
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::json({24, 28}));
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  ASSERT_EQ(raw.size(), 8 + n + 28);
  float third;
  std::memcpy(&third, raw.data() + 8 + n + 2 * 4, 4);
  EXPECT_EQ(third, 3.0f);
}

TEST(Safetensors, ReadsBackRangesAndConvertsBf16) {
  Scratch s;
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  // bf16 keeps 8 significand bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 and goes to the even 1;
  // 1 + 3 * 2^-8 is a tie going up to 1 + 2^-6; 1 + 2^-8 + 2^-12 is above the tie: 1 + 2^-7.
  const std::vector<float> b = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-12f, -2.5f};
  write(s.file("f32.safetensors"), {{"a", {2, 3}, a}}, Dtype::kF32);
  write(s.file("bf16.safetensors"), {{"b", {4}, b}}, Dtype::kBF16);
  File f(s.file("f32.safetensors"));
  std::vector<float> out(3);
  f.read(*f.find("a"), 2, out);  // elements 2..4
  EXPECT_EQ(out, (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(f.bytes_read(), 12);  // only those 3 x 4 bytes
  File g(s.file("bf16.safetensors"));
  EXPECT_EQ(g.find("b")->dtype, Dtype::kBF16);
  std::vector<float> back(4);
  g.read(*g.find("b"), 0, back);
  EXPECT_EQ(back, (std::vector<float>{1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -2.5f}));
}

TEST(Safetensors, RefusesAHeaderLongerThanTheFile) {
  Scratch s;
  write_raw(s.file("x"), "{}", "");
  std::string raw = slurp(s.file("x"));
  raw[0] = 100;  // the header length now says 100 bytes; 2 follow
  std::ofstream(s.file("x"), std::ios::binary) << raw;
  test::expect_spec_error([&] { File f(s.file("x")); }, "", "header length says 100 bytes");
}

TEST(Safetensors, RefusesLyingOffsets) {
  Scratch s;
  const std::string data(16, '\0');  // room for 4 floats
  // end - begin must be the shape's bytes
  write_raw(s.file("size"), R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", data.substr(0, 12));
  test::expect_spec_error([&] { File f(s.file("size")); }, "/w/data_offsets", "does not hold [2, 2] F32 (16 bytes)");
  // past the end of the data (a truncated file)
  write_raw(s.file("past"), R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data.substr(0, 8));
  test::expect_spec_error([&] { File f(s.file("past")); }, "/w/data_offsets", "which has 8");
  // two tensors over the same bytes
  write_raw(s.file("overlap"),
            R"({"u":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
            data.substr(0, 12));
  test::expect_spec_error([&] { File f(s.file("overlap")); }, "/v/data_offsets", "overlaps");
  // a hole before a tensor
  write_raw(s.file("hole"), R"({"u":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data);
  test::expect_spec_error([&] { File f(s.file("hole")); }, "/u/data_offsets", "leaves a hole");
  // an unknown dtype
  write_raw(s.file("dtype"), R"({"u":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", data.substr(0, 2));
  test::expect_spec_error([&] { File f(s.file("dtype")); }, "/u/dtype", "got \"F8\"");
}

TEST(Safetensors, FolderReadsTheShardedForm) {
  Scratch s;
  const std::vector<float> a = {1, 2}, b = {3, 4, 5};
  write(s.file("model-00001-of-00002.safetensors"), {{"a", {2}, a}}, Dtype::kF32);
  write(s.file("model-00002-of-00002.safetensors"), {{"b", {3}, b}}, Dtype::kF32);
  std::ofstream(s.file("model.safetensors.index.json"))
      << R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  Folder f(s.dir.string());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  File* fb = f.file_of("b");
  ASSERT_NE(fb, nullptr);
  std::vector<float> out(1);
  fb->read(*fb->find("b"), 2, out);
  EXPECT_EQ(out[0], 5.0f);
  EXPECT_EQ(f.file_of("c"), nullptr);
  // an index naming a tensor its file lacks
  std::ofstream(s.file("model.safetensors.index.json"))
      << R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})";
  Folder g(s.dir.string());
  test::expect_spec_error([&] { g.file_of("a"); }, "/a", "places it in this file");
}

TEST(Safetensors, FolderWithoutWeightsIsRefused) {
  Scratch s;
  test::expect_spec_error([&] { Folder f(s.dir.string()); }, "", "holds neither model.safetensors");
}

}  // namespace
}  // namespace stagecraft::io::safetensors
