#include "core/io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/io/file.hpp"
#include "core/spec/error.hpp"
#include "core/spec/json_reader.hpp"

namespace stagecraft::io::safetensors {

using nlohmann::json;
using spec::SpecError;

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; this reader assumes a little-endian host");

namespace {

// The reference implementation's limit (safetensors/src/tensor.rs, MAX_HEADER_SIZE): 100 MB.
constexpr int64_t kMaxHeader = 100'000'000;

struct DtypeName {
  const char* name;
  Dtype dtype;
  int64_t bytes;
};
constexpr DtypeName kDtypes[] = {{"F64", Dtype::kF64, 8},  {"F32", Dtype::kF32, 4}, {"F16", Dtype::kF16, 2},
                                 {"BF16", Dtype::kBF16, 2}, {"I64", Dtype::kI64, 8}, {"I32", Dtype::kI32, 4},
                                 {"I16", Dtype::kI16, 2},   {"I8", Dtype::kI8, 1},   {"U8", Dtype::kU8, 1},
                                 {"BOOL", Dtype::kBool, 1}};

std::string pointer(const std::string& name, const char* field = nullptr) {
  std::string p = "/" + name;
  if (field != nullptr) p += std::string("/") + field;
  return p;
}

float from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign != 0 ? -v : v;
  }
  uint32_t bits = 0;
  if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | (static_cast<uint32_t>(exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

}  // namespace

const char* to_string(Dtype d) {
  for (const DtypeName& n : kDtypes) {
    if (n.dtype == d) return n.name;
  }
  return "?";
}

int64_t dtype_bytes(Dtype d) {
  for (const DtypeName& n : kDtypes) {
    if (n.dtype == d) return n.bytes;
  }
  return 0;
}

int64_t TensorInfo::elems() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_text() const {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

uint16_t to_bf16(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  if (std::isnan(v)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // a quiet NaN
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float from_bf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

namespace {
// A regular file (not a device or FIFO: io::check_input) before anything is opened or read; its
// values are then read by offset, so the size bound is only the format's (offsets are uint64).
std::string regular_file(std::string path) {
  check_input(path, std::numeric_limits<int64_t>::max(), "a safetensors file");
  return path;
}
}  // namespace

File::File(std::string path) : path_(regular_file(std::move(path))), in_(path_, std::ios::binary) {
  if (!in_) throw SpecError(path_, "", "cannot open the safetensors file: " + std::string(std::strerror(errno)));
  std::error_code ec;
  const auto size = static_cast<int64_t>(std::filesystem::file_size(path_, ec));
  if (ec) throw SpecError(path_, "", "cannot read the file's size: " + ec.message());
  if (size < 8) {
    throw SpecError(path_, "", "truncated: " + std::to_string(size) + " bytes, fewer than the 8 of the header length");
  }
  unsigned char len_bytes[8];
  in_.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > static_cast<uint64_t>(kMaxHeader) || static_cast<int64_t>(n) > size - 8) {
    throw SpecError(path_, "", "the header length says " + std::to_string(n) + " bytes, but the file has " +
                                   std::to_string(size - 8) + " after it (truncated, or not a safetensors file)");
  }
  std::string header(n, '\0');
  in_.read(header.data(), static_cast<std::streamsize>(n));
  if (!in_) throw SpecError(path_, "", "cannot read the " + std::to_string(n) + "-byte header");
  data_start_ = 8 + static_cast<int64_t>(n);
  const int64_t data_size = size - data_start_;
  json j;
  try {
    j = json::parse(header);
  } catch (const json::parse_error& e) {
    throw SpecError(path_, "", std::string("the header is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw SpecError(path_, "", "the header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) throw SpecError(path_, "/__metadata__", "expected an object of strings");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) throw SpecError(path_, "/__metadata__/" + m.key(), "expected a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!e.is_object()) throw SpecError(path_, pointer(name), "expected {\"dtype\", \"shape\", \"data_offsets\"}");
    TensorInfo t;
    t.name = name;
    if (!e.contains("dtype") || !e["dtype"].is_string()) throw SpecError(path_, pointer(name, "dtype"), "expected a dtype string");
    const std::string dt = e["dtype"].get<std::string>();
    const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const DtypeName& d) { return dt == d.name; });
    if (known == std::end(kDtypes)) {
      throw SpecError(path_, pointer(name, "dtype"), "expected F64, F32, F16, BF16, I64, I32, I16, I8, U8 or BOOL, got \"" + dt + "\"");
    }
    t.dtype = known->dtype;
    if (!e.contains("shape") || !e["shape"].is_array()) throw SpecError(path_, pointer(name, "shape"), "expected an array");
    int64_t elems = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned()) throw SpecError(path_, pointer(name, "shape"), "expected non-negative integers, got " + e["shape"].dump());
      const int64_t v = d.get<int64_t>();
      if (v != 0 && elems > std::numeric_limits<int64_t>::max() / 16 / v) {
        throw SpecError(path_, pointer(name, "shape"), "the shape " + e["shape"].dump() + " overflows");
      }
      t.shape.push_back(v);
      elems *= v;
    }
    const json* off = e.contains("data_offsets") ? &e["data_offsets"] : nullptr;
    if (off == nullptr || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      throw SpecError(path_, pointer(name, "data_offsets"), "expected [begin, end], two byte offsets");
    }
    t.begin = (*off)[0].get<int64_t>();
    t.end = (*off)[1].get<int64_t>();
    const int64_t want = elems * known->bytes;
    if (t.end < t.begin || t.end - t.begin != want) {
      throw SpecError(path_, pointer(name, "data_offsets"),
                      "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") does not hold " + t.shape_text() +
                          " " + dt + " (" + std::to_string(want) + " bytes)");
    }
    if (t.end > data_size) {
      throw SpecError(path_, pointer(name, "data_offsets"),
                      "ends at byte " + std::to_string(t.end) + " of the data, which has " + std::to_string(data_size) +
                          " (the file is truncated or the header lies)");
    }
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t at = 0;
  for (const TensorInfo& t : tensors_) {
    if (t.begin != at) {
      throw SpecError(path_, pointer(t.name, "data_offsets"),
                      t.begin < at ? "overlaps the tensor before it (starts at byte " + std::to_string(t.begin) +
                                         ", the previous one ends at " + std::to_string(at) + ")"
                                   : "leaves a hole: starts at byte " + std::to_string(t.begin) + ", the previous tensor ends at " +
                                         std::to_string(at));
    }
    at = t.end;
  }
  if (at != data_size) {
    throw SpecError(path_, "", "the tensors cover " + std::to_string(at) + " bytes of data, the file holds " +
                                   std::to_string(data_size) + " after the header");
  }
}

const TensorInfo* File::find(const std::string& name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void File::read(const TensorInfo& t, int64_t first, std::span<float> out) {
  const auto count = static_cast<int64_t>(out.size());
  if (first < 0 || first + count > t.elems()) {
    throw SpecError(path_, pointer(t.name), "elements [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                                ") are outside its " + std::to_string(t.elems()));
  }
  const int64_t width = dtype_bytes(t.dtype);
  if (t.dtype != Dtype::kF32 && t.dtype != Dtype::kBF16 && t.dtype != Dtype::kF16 && t.dtype != Dtype::kF64) {
    throw SpecError(path_, pointer(t.name, "dtype"), std::string("expected a floating-point tensor (F32, BF16, F16, F64), got ") +
                                                         to_string(t.dtype));
  }
  if (count == 0) return;
  std::vector<char> raw(static_cast<std::size_t>(count * width));
  in_.clear();
  in_.seekg(data_start_ + t.begin + first * width);
  in_.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  if (!in_) throw SpecError(path_, pointer(t.name), "cannot read its bytes (the file changed or is truncated)");
  bytes_read_ += static_cast<int64_t>(raw.size());
  for (int64_t i = 0; i < count; ++i) {
    const char* p = raw.data() + i * width;
    switch (t.dtype) {
      case Dtype::kF32: std::memcpy(&out[static_cast<std::size_t>(i)], p, 4); break;
      case Dtype::kF64: {
        double d;
        std::memcpy(&d, p, 8);
        out[static_cast<std::size_t>(i)] = static_cast<float>(d);
        break;
      }
      case Dtype::kBF16:
      case Dtype::kF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        out[static_cast<std::size_t>(i)] = t.dtype == Dtype::kBF16 ? from_bf16(h) : from_f16(h);
        break;
      }
      default: break;
    }
  }
}

Folder::Folder(std::string dir) : dir_(std::move(dir)) {
  namespace fs = std::filesystem;
  const fs::path index = fs::path(dir_) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir_) / "model.safetensors";
  if (fs::exists(index)) {
    index_path_ = index.string();
    const json j = spec::read_json_file(index_path_);  // a regular file within the spec limit
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw SpecError(index_path_, "/weight_map", "expected an object of tensor name -> file name");
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw SpecError(index_path_, "/weight_map/" + it.key(), "expected a file name");
      const std::string file = it.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
        throw SpecError(index_path_, "/weight_map/" + it.key(), "expected a file name in the same folder, got \"" + file + "\"");
      }
      weight_map_[it.key()] = file;
    }
    return;
  }
  if (!fs::exists(single)) {
    throw SpecError(dir_, "", "holds neither model.safetensors nor model.safetensors.index.json");
  }
}

File& Folder::open(const std::string& file) {
  auto it = files_.find(file);
  if (it != files_.end()) return *it->second;
  const std::string path = (std::filesystem::path(dir_) / file).string();
  auto f = std::make_unique<File>(path);
  File& ref = *f;
  files_.emplace(file, std::move(f));
  return ref;
}

std::vector<std::string> Folder::names() {
  std::vector<std::string> out;
  if (index_path_.empty()) {
    for (const TensorInfo& t : open("model.safetensors").tensors()) out.push_back(t.name);
    std::sort(out.begin(), out.end());
    return out;
  }
  for (const auto& [name, file] : weight_map_) out.push_back(name);
  return out;
}

File* Folder::file_of(const std::string& name) {
  if (index_path_.empty()) {
    File& f = open("model.safetensors");
    return f.find(name) != nullptr ? &f : nullptr;
  }
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) return nullptr;
  File& f = open(it->second);
  if (f.find(name) == nullptr) {
    throw SpecError(f.path(), pointer(name), "is missing, though " + index_path_ + " places it in this file");
  }
  return &f;
}

std::string Folder::where() const {
  return index_path_.empty() ? (std::filesystem::path(dir_) / "model.safetensors").string() : index_path_;
}

int64_t Folder::bytes_read() const {
  int64_t total = 0;
  for (const auto& [name, f] : files_) total += f->bytes_read();
  return total;
}

void write(const std::string& path, const std::vector<WriteTensor>& tensors, Dtype dtype,
           const std::map<std::string, std::string>& metadata) {
  if (dtype != Dtype::kF32 && dtype != Dtype::kBF16) {
    throw SpecError(path, "", std::string("writes F32 or BF16, not ") + to_string(dtype));
  }
  const int64_t width = dtype_bytes(dtype);
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t at = 0;
  for (const WriteTensor& t : tensors) {
    int64_t elems = 1;
    for (int64_t d : t.shape) elems *= d;
    if (elems != static_cast<int64_t>(t.values.size())) {
      throw std::logic_error("safetensors::write: tensor " + t.name + " has " + std::to_string(t.values.size()) +
                             " values for " + std::to_string(elems) + " elements");
    }
    header[t.name] = {{"dtype", to_string(dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + elems * width}}};
    at += elems * width;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writer pads
  AtomicFile out(path);
  unsigned char len[8];
  uint64_t n = text.size();
  for (unsigned char& b : len) {
    b = static_cast<unsigned char>(n & 0xff);
    n >>= 8;
  }
  out.write(len, 8);
  out.write(text);
  std::vector<char> buf;
  for (const WriteTensor& t : tensors) {
    if (dtype == Dtype::kF32) {
      out.write(t.values.data(), t.values.size() * sizeof(float));
      continue;
    }
    buf.resize(t.values.size() * 2);
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      const uint16_t b = to_bf16(t.values[i]);
      std::memcpy(buf.data() + 2 * i, &b, 2);
    }
    out.write(buf.data(), buf.size());
  }
  out.commit();
}

}  // namespace stagecraft::io::safetensors
