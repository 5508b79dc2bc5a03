// The safetensors format (Hugging Face, github.com/huggingface/safetensors, README "Format"): a
// file is
//   8 bytes    N, the header's length, unsigned little-endian
//   N bytes    a JSON object: per tensor name {"dtype": "F32" | "BF16" | "F16" | ..., "shape": [d0, ...],
//              "data_offsets": [begin, end]} (byte offsets into the data, end exclusive), and an
//              optional "__metadata__" object of strings
//   the rest   the tensors' bytes, little-endian, row-major, each at its offsets
// A model too large for one file is several such files and `model.safetensors.index.json`
// ({"metadata": {...}, "weight_map": {tensor name: file name}}).
//
// Reading checks the whole header before any tensor is read, as the reference implementation
// does: the length fits the file, the JSON parses, every entry has a known dtype, a non-negative
// shape and offsets with end - begin = elements x dtype size, the entries cover the data exactly
// (no overlap, no hole, nothing past the end). A tensor's values are then read by element range
// (pread-like: only those bytes are read) and converted to float. Every error throws
// spec::SpecError naming the file and, where one is at fault, the tensor ("/<name>/shape").
//
// Writing: fp32 or bf16 (round to nearest even, as torch's float -> bfloat16 conversion), tensors
// in the order given, through io::AtomicFile so a failed write leaves no partial file.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace stagecraft::io::safetensors {

enum class Dtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

const char* to_string(Dtype d);
int64_t dtype_bytes(Dtype d);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0;  // byte offsets into the data section
  int64_t end = 0;
  int64_t elems() const;
  std::string shape_text() const;  // "[768, 2304]"
};

// One .safetensors file, its header read and checked; the file stays open for reads.
class File {
 public:
  explicit File(std::string path);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in offset order
  const TensorInfo* find(const std::string& name) const;               // null when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Elements [first, first + out.size()) of a floating-point tensor (F32, BF16, F16, F64), as float.
  void read(const TensorInfo& t, int64_t first, std::span<float> out);
  int64_t bytes_read() const { return bytes_read_; }

 private:
  std::string path_;
  std::ifstream in_;
  int64_t data_start_ = 0;
  int64_t bytes_read_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint folder: `model.safetensors`, or the files `model.safetensors.index.json` names
// (each opened when first needed, and checked whole then).
class Folder {
 public:
  explicit Folder(std::string dir);  // throws SpecError when neither form is there, or the index is bad

  const std::string& dir() const { return dir_; }
  // Every tensor name the checkpoint has, sorted.
  std::vector<std::string> names();
  // The file holding `name` (opened and checked), or null when the checkpoint has no such tensor.
  File* file_of(const std::string& name);
  // Where a missing tensor would have been looked for (the index, or the one file), for messages.
  std::string where() const;
  int64_t bytes_read() const;

 private:
  File& open(const std::string& file);

  std::string dir_;
  std::string index_path_;                               // empty: one model.safetensors
  std::map<std::string, std::string> weight_map_;        // tensor -> file name (index form)
  std::map<std::string, std::unique_ptr<File>> files_;   // by file name
};

struct WriteTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> values;  // elements of shape, row-major
};

// Writes `tensors` (in this order) to `path` as `dtype` (kF32 or kBF16), with `metadata`.
void write(const std::string& path, const std::vector<WriteTensor>& tensors, Dtype dtype,
           const std::map<std::string, std::string>& metadata = {});

// float -> bfloat16 bits, round to nearest even (NaN stays NaN); and back.
uint16_t to_bf16(float v);
float from_bf16(uint16_t bits);

}  // namespace stagecraft::io::safetensors
