#include "executor/model/params.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/count/count.hpp"
#include "executor/model/random.hpp"

namespace stagecraft::executor {


int64_t unit_count(const spec::Model& m) { return program::unit_count(m); }

UnitKind unit_kind(const spec::Model& m, int64_t unit) {
  if (unit < 0 || unit >= unit_count(m)) {
    throw std::out_of_range("unit " + std::to_string(unit) + " is outside [0, " + std::to_string(unit_count(m)) +
                            ") for model '" + m.name + "'");
  }
  if (unit == 0) return UnitKind::kEmbedding;
  if (unit == unit_count(m) - 1) return UnitKind::kHead;
  if (unit % 2 == 1) return UnitKind::kAttention;
  return m.moe_layer((unit - 1) / 2) ? UnitKind::kMoe : UnitKind::kMlp;
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
    case UnitKind::kMlp:
    case UnitKind::kMoe: return "block." + std::to_string(unit_block(m, unit)) + ".mlp";
  }
  return "";
}

const char* to_string(UnitKind k) {
  switch (k) {
    case UnitKind::kEmbedding: return "embedding";
    case UnitKind::kAttention: return "attention";
    case UnitKind::kMlp: return "mlp";
    case UnitKind::kHead: return "head";
    case UnitKind::kMoe: return "moe";
  }
  return "?";
}

ParamLayout::ParamLayout(const spec::Model& model) : ParamLayout(model, 0, unit_count(model)) {}

ParamLayout::ParamLayout(const spec::Model& model, int64_t begin, int64_t end, int64_t tp, int64_t tp_index, int64_t ep,
                         int64_t ep_index, int64_t etp, int64_t etp_index)
    : model_(model), begin_(begin), end_(end), tp_(tp), tp_index_(tp_index), ep_(ep), ep_index_(ep_index), etp_(etp),
      etp_index_(etp_index) {
  if (model.layers <= 0 || model.hidden <= 0 || model.vocab <= 0) {
    throw std::invalid_argument("ParamLayout: model '" + model.name + "' has no layers, hidden or vocab");
  }
  if (begin < 0 || end > unit_count(model) || begin >= end) {
    throw std::invalid_argument("ParamLayout: unit range [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") is empty or outside [0, " + std::to_string(unit_count(model)) + ") of model '" +
                                model.name + "'");
  }
  if (tp < 1 || tp_index < 0 || tp_index >= tp) {
    throw std::invalid_argument("ParamLayout: tp rank " + std::to_string(tp_index) + " is outside [0, " +
                                std::to_string(tp) + ")");
  }
  if (ep < 1 || ep_index < 0 || ep_index >= ep || (ep > 1 && (!model.moe.on() || model.moe.experts % ep != 0))) {
    throw std::invalid_argument("ParamLayout: ep rank " + std::to_string(ep_index) + " of " + std::to_string(ep) +
                                " needs 0 <= rank < ep and ep dividing the model's " + std::to_string(model.moe.experts) +
                                " experts");
  }
  if (etp < 1 || etp_index < 0 || etp_index >= etp || (etp > 1 && (!model.moe.on() || model.moe.ffn_hidden % etp != 0))) {
    throw std::invalid_argument("ParamLayout: etp rank " + std::to_string(etp_index) + " of " + std::to_string(etp) +
                                " needs 0 <= rank < etp and etp dividing the experts' width " +
                                std::to_string(model.moe.ffn_hidden));
  }
  for (int64_t u = begin; u < end; ++u) {
    const int64_t first = size_;
    for (const count::TensorSpec& t : count::unit_tensors(model, static_cast<int32_t>(u), tp)) add(u, t);
    // a tied head without unit 0 keeps its own copy of the (vocab-parallel) table
    if (u == unit_count(model) - 1 && model.tied_embeddings && !holds(0)) add(u, count::unit_tensors(model, 0, tp).front());
    unit_ranges_.push_back({first, size_});
  }
}

void ParamLayout::add(int64_t unit, const count::TensorSpec& whole) {
  count::TensorSpec t = whole;
  count::ShardMap map = count::shard_map(model_, t, tp_, tp_index_);
  const bool expert = t.name.find(".mlp.experts.") != std::string::npos;
  if (expert && ep_ > 1) {  // this rank's experts: a band of the stacked rows
    t.rows /= ep_;
    map.row0 = ep_index_ * t.rows;
    map.valid_rows = t.rows;
  }
  const bool down = t.name.find(".down.") != std::string::npos, bias = t.name.ends_with(".b");
  if (expert && etp_ > 1 && down && !bias) {  // each expert's rows [etp_index·f/etp, +f/etp) of its f
    const int64_t f = model_.moe.ffn_hidden, part = f / etp_;
    t.rows /= etp_;
    map.row0 += etp_index_ * part;
    map.valid_rows = t.rows;
    map.row_block = part;
    map.row_stride = f;
  } else if (expert && etp_ > 1 && !down) {  // gate, up (and their biases): columns of each expert
    t.cols /= etp_;
    map.cols = {{0, etp_index_ * t.cols, t.cols}};
  }
  index_.emplace(t.name, tensors_.size());
  TensorSlot slot{t.name, unit, size_, t.rows, t.cols, t.init, t.init_std, t.decay, t.replicated(), t, map, expert};
  tensors_.push_back(std::move(slot));
  size_ += t.elems();
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

namespace {
// The tensors `keep` selects, as ranges merged where adjacent, in increasing order.
template <typename F>
std::vector<Range> merged_ranges(const std::vector<TensorSlot>& tensors, F keep) {
  std::vector<Range> out;
  for (const TensorSlot& t : tensors) {
    if (!keep(t)) continue;
    if (!out.empty() && out.back().end == t.offset) {
      out.back().end = t.offset + t.size();
    } else {
      out.push_back(t.range());
    }
  }
  return out;
}
}  // namespace

std::vector<Range> ParamLayout::replicated_ranges() const {
  if (tp_ == 1) return {};
  return merged_ranges(tensors_, [](const TensorSlot& t) { return t.replicated; });
}

std::vector<Range> ParamLayout::decayed_ranges() const {
  return merged_ranges(tensors_, [](const TensorSlot& t) { return t.decay; });
}

std::vector<Range> ParamLayout::expert_ranges() const {
  return merged_ranges(tensors_, [](const TensorSlot& t) { return t.expert; });
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
      const int64_t local = p - t.offset;
      const int64_t global = t.map.global_index(t.spec, local / t.cols, local % t.cols);
      double value = 0.0;  // padding rows and columns of a vocab-parallel table
      if (global >= 0 && t.init == Init::kOnes) value = 1.0;
      if (global >= 0 && t.init == Init::kNormal) value = t.init_std * rng::normal(key, static_cast<uint64_t>(global));
      out[static_cast<std::size_t>(p - first)] = static_cast<Scalar>(value);
    }
  }
}

template void ParamLayout::init<float>(std::span<float>, uint64_t, int64_t) const;
template void ParamLayout::init<double>(std::span<double>, uint64_t, int64_t) const;

}  // namespace stagecraft::executor
