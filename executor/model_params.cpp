#include "executor/model_params.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/text/hash.hpp"
#include "executor/errors.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor {

namespace {

constexpr const char* kCopySuffix = "#tied-copy";

template <typename T>
void put(std::string& blob, const T& v) {
  blob.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
T get(const std::string& blob, std::size_t& at) {
  T v;
  if (at + sizeof(T) > blob.size()) throw ExecutorError("gather_model_params: truncated record");
  std::memcpy(&v, blob.data() + at, sizeof(T));
  at += sizeof(T);
  return v;
}

// Records (name, first element, values) of the parts of this rank's shard inside each tensor.
std::string own_records(Runner& runner) {
  const StageLayout& layout = runner.layout();
  const std::span<const float> params = runner.state().params();
  std::string blob;
  for (int64_t c = 0; c < layout.chunk_count(); ++c) {
    const ParamLayout& chunk = layout.chunk(c);
    for (const TensorSlot& t : chunk.tensors()) {
      const Range tr{layout.chunk_offset(c) + t.offset, layout.chunk_offset(c) + t.offset + t.size()};
      const Range mine = intersect(tr, layout.own_shard());
      if (mine.size() == 0) continue;
      const bool copy = t.name == "embedding.wte" && chunk.head_has_wte_copy();
      const std::string name = copy ? t.name + kCopySuffix : t.name;
      put<uint64_t>(blob, name.size());
      blob += name;
      put<int64_t>(blob, mine.begin - tr.begin);
      put<int64_t>(blob, mine.size());
      blob.append(reinterpret_cast<const char*>(params.data() + mine.begin), static_cast<std::size_t>(mine.size()) * sizeof(float));
    }
  }
  return blob;
}

void place_records(const std::string& blob, const ParamLayout& full, ModelParams& out) {
  std::size_t at = 0;
  while (at < blob.size()) {
    const uint64_t len = get<uint64_t>(blob, at);
    std::string name = blob.substr(at, len);
    at += len;
    const int64_t first = get<int64_t>(blob, at), count = get<int64_t>(blob, at);
    const bool copy = name.size() > std::strlen(kCopySuffix) && name.ends_with(kCopySuffix);
    if (copy) name.resize(name.size() - std::strlen(kCopySuffix));
    const TensorSlot& t = full.find(name);
    if (copy && out.tied_copy.empty()) out.tied_copy.assign(static_cast<std::size_t>(t.size()), std::numeric_limits<float>::quiet_NaN());
    float* dst = copy ? out.tied_copy.data() + first : out.values.data() + t.offset + first;
    if (count > 0) std::memcpy(dst, blob.data() + at, static_cast<std::size_t>(count) * sizeof(float));
    at += static_cast<std::size_t>(count) * sizeof(float);
  }
}

}  // namespace

ModelParams gather_model_params(Runner& runner) {
  const std::vector<std::string> all = runner.comm().gather_to_root(own_records(runner));
  ModelParams out;
  if (runner.comm().rank() != 0) return out;
  const ParamLayout full(runner.program().model);
  out.values.assign(static_cast<std::size_t>(full.size()), std::numeric_limits<float>::quiet_NaN());
  for (const std::string& blob : all) place_records(blob, full, out);
  return out;
}

std::string checksum(std::span<const float> values) {
  return text::hex16(text::fnv1a(values.data(), values.size() * sizeof(float)));
}

}  // namespace stagecraft::executor
