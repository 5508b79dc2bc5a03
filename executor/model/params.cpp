#include "executor/model/params.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/count/count.hpp"
#include "executor/model/random.hpp"

namespace stagecraft::executor {

namespace {

constexpr double kInitStd = 0.02;  // GPT-2

bool is_output_projection(const std::string& linear) { return linear == "attn.out" || linear == "mlp.down"; }

}  // namespace

int64_t unit_count(const spec::Model& m) { return 2 * m.layers + 2; }

UnitKind unit_kind(const spec::Model& m, int64_t unit) {
  if (unit < 0 || unit >= unit_count(m)) {
    throw std::out_of_range("unit " + std::to_string(unit) + " is outside [0, " + std::to_string(unit_count(m)) +
                            ") for model '" + m.name + "'");
  }
  if (unit == 0) return UnitKind::kEmbedding;
  if (unit == unit_count(m) - 1) return UnitKind::kHead;
  return unit % 2 == 1 ? UnitKind::kAttention : UnitKind::kMlp;
}

int64_t unit_block(const spec::Model& m, int64_t unit) {
  const UnitKind k = unit_kind(m, unit);
  if (k == UnitKind::kEmbedding || k == UnitKind::kHead) return -1;
  return (unit - 1) / 2;
}

std::string unit_name(const spec::Model& m, int64_t unit) {
  switch (unit_kind(m, unit)) {
    case UnitKind::kEmbedding: return "embedding";
    case UnitKind::kHead: return "head";
    case UnitKind::kAttention: return "block." + std::to_string(unit_block(m, unit)) + ".attn";
    case UnitKind::kMlp: return "block." + std::to_string(unit_block(m, unit)) + ".mlp";
  }
  return "";
}

const char* to_string(UnitKind k) {
  switch (k) {
    case UnitKind::kEmbedding: return "embedding";
    case UnitKind::kAttention: return "attention";
    case UnitKind::kMlp: return "mlp";
    case UnitKind::kHead: return "head";
  }
  return "?";
}

ParamLayout::ParamLayout(const spec::Model& model) : ParamLayout(model, 0, unit_count(model)) {}

ParamLayout::ParamLayout(const spec::Model& model, int64_t begin, int64_t end) : model_(model), begin_(begin), end_(end) {
  if (model.layers <= 0 || model.hidden <= 0 || model.vocab <= 0) {
    throw std::invalid_argument("ParamLayout: model '" + model.name + "' has no layers, hidden or vocab");
  }
  if (begin < 0 || end > unit_count(model) || begin >= end) {
    throw std::invalid_argument("ParamLayout: unit range [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") is empty or outside [0, " + std::to_string(unit_count(model)) + ") of model '" +
                                model.name + "'");
  }
  for (int64_t u = begin; u < end; ++u) {
    const int64_t first = size_;
    add_unit(u);
    unit_ranges_.push_back({first, size_});
  }
}

void ParamLayout::add(int64_t unit, std::string name, int64_t rows, int64_t cols, Init init, double init_std,
                      bool decay) {
  index_.emplace(name, tensors_.size());
  tensors_.push_back({std::move(name), unit, size_, rows, cols, init, init_std, decay});
  size_ += rows * cols;
}

void ParamLayout::add_norm(int64_t unit, const std::string& prefix) {
  add(unit, prefix + ".w", 1, model_.hidden, Init::kOnes, 0, false);
  if (model_.norm_has_bias()) add(unit, prefix + ".b", 1, model_.hidden, Init::kZeros, 0, false);
}

// The linears of one sublayer, taken from count::block_linears so shapes and counts agree.
void ParamLayout::add_linears(int64_t unit, const std::string& prefix, const std::string& group) {
  const double out_std = kInitStd / std::sqrt(2.0 * static_cast<double>(model_.layers));
  for (const count::Linear& l : count::block_linears(model_)) {
    if (l.name.rfind(group, 0) != 0) continue;
    const double std = is_output_projection(l.name) ? out_std : kInitStd;
    add(unit, prefix + l.name + ".w", l.in, l.out, Init::kNormal, std, true);
    if (l.bias) add(unit, prefix + l.name + ".b", 1, l.out, Init::kZeros, 0, false);
  }
}

void ParamLayout::add_unit(int64_t unit) {
  const int64_t h = model_.hidden;
  switch (unit_kind(model_, unit)) {
    case UnitKind::kEmbedding:
      add(unit, "embedding.wte", model_.vocab, h, Init::kNormal, kInitStd, true);
      if (model_.position == spec::Position::kLearned) {
        add(unit, "embedding.wpe", model_.position_rows(), h, Init::kNormal, kInitStd, true);
      }
      return;
    case UnitKind::kAttention: {
      const std::string prefix = "block." + std::to_string(unit_block(model_, unit)) + ".";
      add_norm(unit, prefix + "attn.norm1");
      add_linears(unit, prefix, "attn.");
      return;
    }
    case UnitKind::kMlp: {
      const std::string prefix = "block." + std::to_string(unit_block(model_, unit)) + ".";
      add_norm(unit, prefix + "mlp.norm2");
      add_linears(unit, prefix, "mlp.");
      return;
    }
    case UnitKind::kHead:
      add_norm(unit, "head.normf");
      if (!model_.tied_embeddings) {
        add(unit, "head.lm_head.w", h, model_.vocab, Init::kNormal, kInitStd, true);
      } else if (!holds(0)) {
        add(unit, "embedding.wte", model_.vocab, h, Init::kNormal, kInitStd, true);
      }
      return;
  }
}

const TensorSlot& ParamLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    throw std::out_of_range("ParamLayout: no tensor '" + name + "' in units [" + std::to_string(begin_) + ", " +
                            std::to_string(end_) + ") of model '" + model_.name + "'");
  }
  return tensors_[it->second];
}

Range ParamLayout::unit_range(int64_t unit) const {
  if (!holds(unit)) {
    throw std::out_of_range("ParamLayout: unit " + std::to_string(unit) + " is not in [" + std::to_string(begin_) +
                            ", " + std::to_string(end_) + ")");
  }
  return unit_ranges_[static_cast<std::size_t>(unit - begin_)];
}

bool ParamLayout::head_has_wte_copy() const {
  return model_.tied_embeddings && holds(unit_count(model_) - 1) && !holds(0);
}

std::vector<Range> ParamLayout::decayed_ranges() const {
  std::vector<Range> out;
  for (const TensorSlot& t : tensors_) {
    if (!t.decay) continue;
    if (!out.empty() && out.back().end == t.offset) {
      out.back().end = t.offset + t.size();
    } else {
      out.push_back(t.range());
    }
  }
  return out;
}

template <typename Scalar>
void ParamLayout::init(std::span<Scalar> out, uint64_t seed, int64_t first) const {
  const int64_t last = first + static_cast<int64_t>(out.size());
  if (first < 0 || last > size_) {
    throw std::out_of_range("ParamLayout::init: positions [" + std::to_string(first) + ", " + std::to_string(last) +
                            ") exceed the layout's " + std::to_string(size_) + " elements");
  }
  for (const TensorSlot& t : tensors_) {
    const int64_t lo = std::max(first, t.offset), hi = std::min(last, t.offset + t.size());
    if (lo >= hi) continue;
    const uint64_t key = rng::combine(seed, rng::hash_name(t.name));
    for (int64_t p = lo; p < hi; ++p) {
      double value = t.init == Init::kOnes ? 1.0 : 0.0;
      if (t.init == Init::kNormal) value = t.init_std * rng::normal(key, static_cast<uint64_t>(p - t.offset));
      out[static_cast<std::size_t>(p - first)] = static_cast<Scalar>(value);
    }
  }
}

template void ParamLayout::init<float>(std::span<float>, uint64_t, int64_t) const;
template void ParamLayout::init<double>(std::span<double>, uint64_t, int64_t) const;

}  // namespace stagecraft::executor
