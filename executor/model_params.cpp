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

}  // namespace

// Records (name, first element, values) of the parts of this rank's shard inside each tensor.
std::string own_records(const StageLayout& layout, std::span<const float> params) {
  std::string blob;
  for (int64_t c = 0; c < layout.chunk_count(); ++c) {
    const ParamLayout& chunk = layout.chunk(c);
    for (const TensorSlot& t : chunk.tensors()) {
      const Range tr{layout.chunk_offset(c) + t.offset, layout.chunk_offset(c) + t.offset + t.size()};
      for (const Range& mine : clip(layout.counted(), tr)) {
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
  }
  return blob;
}

namespace {

// Places one rank's records; `shards` is the whole model as that rank's tp index holds it, whose
// shard maps say where each shard element sits in the unsharded tensor (padding is dropped).
void place_records(const std::string& blob, const ParamLayout& full, const ParamLayout& shards, ModelParams& out) {
  std::size_t at = 0;
  while (at < blob.size()) {
    const uint64_t len = get<uint64_t>(blob, at);
    std::string name = blob.substr(at, len);
    at += len;
    const int64_t first = get<int64_t>(blob, at), count = get<int64_t>(blob, at);
    const bool copy = name.size() > std::strlen(kCopySuffix) && name.ends_with(kCopySuffix);
    if (copy) name.resize(name.size() - std::strlen(kCopySuffix));
    const TensorSlot& t = full.find(name);
    const TensorSlot& shard = shards.find(name);
    if (copy && out.tied_copy.empty()) out.tied_copy.assign(static_cast<std::size_t>(t.size()), std::numeric_limits<float>::quiet_NaN());
    float* dst = copy ? out.tied_copy.data() : out.values.data() + t.offset;
    if (at + static_cast<std::size_t>(count) * sizeof(float) > blob.size()) throw ExecutorError("gather_model_params: truncated record");
    for (int64_t k = 0; k < count; ++k) {
      const int64_t local = first + k;
      const int64_t g = shard.map.global_index(shard.spec, local / shard.cols, local % shard.cols);
      if (g >= 0) std::memcpy(dst + g, blob.data() + at + static_cast<std::size_t>(k) * sizeof(float), sizeof(float));
    }
    at += static_cast<std::size_t>(count) * sizeof(float);
  }
}

}  // namespace

ModelParams gather_model_params(Runner& runner) {
  const std::vector<float> params = runner.backend().params_host();
  const std::vector<std::string> all = runner.comm().gather_to_root(own_records(runner.layout(), params));
  if (runner.comm().rank() != 0) return {};
  return assemble_model_params(runner.program(), all);
}

ModelParams assemble_model_params(const program::Program& prog, const std::vector<std::string>& all) {
  ModelParams out;
  const ParamLayout full(prog.model);
  const int64_t ep = prog.model.moe.on() ? prog.placement.ep : 1, etp = prog.model.moe.on() ? prog.placement.etp : 1;
  std::vector<ParamLayout> shards;  // by tp index x ep index x etp index
  for (int64_t t = 0; t < prog.plan.tp; ++t) {
    for (int64_t e = 0; e < ep; ++e) {
      for (int64_t x = 0; x < etp; ++x) shards.emplace_back(prog.model, 0, unit_count(prog.model), prog.plan.tp, t, ep, e, etp, x);
    }
  }
  out.values.assign(static_cast<std::size_t>(full.size()), std::numeric_limits<float>::quiet_NaN());
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto rank = static_cast<int64_t>(r);
    const int64_t e = ep > 1 ? prog.placement.ep_index_of(rank) : 0, x = etp > 1 ? prog.placement.etp_index_of(rank) : 0;
    const std::size_t shard = static_cast<std::size_t>((prog.placement.tp_index_of(rank) * ep + e) * etp + x);
    place_records(all[r], full, shards[shard], out);
  }
  return out;
}

std::string checksum(std::span<const float> values) {
  return text::hex16(text::fnv1a(values.data(), values.size() * sizeof(float)));
}

}  // namespace stagecraft::executor
