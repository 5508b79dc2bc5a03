// ParamLayout: where every parameter tensor of a contiguous range of units lives in ONE flat
// buffer (so ZeRO sharding is slicing), which ranges take weight decay, and deterministic
// initial values. It is not storage: callers own the buffers (params, grads, Adam moments).
//
// The tensors, their names, shapes, tensor-parallel splits and initialisation are the tensor
// table's (core/count/tensors.hpp), in its order, as tp rank `tp_index` of `tp` holds them. A
// tied head whose layout lacks unit 0 also holds a copy "embedding.wte" of the (vocab-parallel)
// table (Megatron: its gradient is all-reduced with unit 0's over the embedding group).
// Expert parallelism (ep ranks, this one `ep_index`): a MoE unit's stacked routed experts
// "mlp.experts.*" [E·in x out] keep only experts [ep_index·E/ep, (ep_index + 1)·E/ep), their rows
// [ep_index·E/ep·in, ...) (the shard map's row0), as Megatron-Core's expert-parallel ranks do.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/count/tensors.hpp"
#include "core/program/units.hpp"
#include "core/spec/model.hpp"

namespace stagecraft::executor {

using UnitKind = program::UnitKind;  // one unit numbering (core/program/units.hpp)

int64_t unit_count(const spec::Model& m);                    // 2L + 2
UnitKind unit_kind(const spec::Model& m, int64_t unit);      // throws std::out_of_range
int64_t unit_block(const spec::Model& m, int64_t unit);      // block index; -1 for embedding/head
std::string unit_name(const spec::Model& m, int64_t unit);   // "embedding", "block.3.attn", "block.3.mlp", "head"
const char* to_string(UnitKind k);

// A half-open range [begin, end) of positions in a flat buffer.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

using Init = count::Init;

struct TensorSlot {
  std::string name;    // global name, e.g. "block.3.attn.qkv.w"; the tied head copy is "embedding.wte"
  int64_t unit = 0;    // the unit that owns it in this layout
  int64_t offset = 0;  // first element in the flat buffer
  int64_t rows = 0;    // [rows x cols] row-major; vectors have rows == 1
  int64_t cols = 0;
  Init init = Init::kZeros;
  double init_std = 0;  // for Init::kNormal
  bool decay = false;   // AdamW weight decay applies (matrices; not biases or norm weights)
  bool replicated = true;  // the same on every tp rank (norms, row-parallel biases, positions)
  count::TensorSpec spec;  // the table's row (an expert-parallel shard: its rows)
  count::ShardMap map;     // where this rank's shard sits in the unsharded tensor
  bool expert = false;     // a routed experts' stacked tensor (mlp.experts.*)

  int64_t size() const { return rows * cols; }
  Range range() const { return {offset, offset + size()}; }
};

// Initial parameter values from elsewhere than the seeded initialisation (a Hugging Face
// checkpoint, hf_weights.hpp): fills positions [lo, hi) of one tensor as `t` holds it (its tp
// shard, local row-major positions; padding 0). Called only for the positions a rank keeps.
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  virtual void read(const TensorSlot& t, int64_t lo, int64_t hi, std::span<float> out) = 0;
};

class ParamLayout {
 public:
  // Units [begin, end) of `model` on tp rank `tp_index` of `tp`, holding the routed experts of
  // expert-parallel rank `ep_index` of `ep` at expert tensor-parallel rank `etp_index` of `etp`
  // (gate and up by columns, down by rows, down's bias whole); throws std::invalid_argument for
  // an empty or outside range or a rank outside its group.
  ParamLayout(const spec::Model& model, int64_t begin, int64_t end, int64_t tp = 1, int64_t tp_index = 0, int64_t ep = 1,
              int64_t ep_index = 0, int64_t etp = 1, int64_t etp_index = 0);
  // Every unit of the model, unsharded.
  explicit ParamLayout(const spec::Model& model);

  const spec::Model& model() const { return model_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  bool holds(int64_t unit) const { return unit >= begin_ && unit < end_; }
  int64_t size() const { return size_; }  // elements of the flat buffer
  int64_t tp() const { return tp_; }
  int64_t tp_index() const { return tp_index_; }
  int64_t ep() const { return ep_; }
  int64_t ep_index() const { return ep_index_; }
  int64_t etp() const { return etp_; }
  int64_t etp_index() const { return etp_index_; }
  // The routed experts' tensors (merged, increasing); empty for a dense model.
  std::vector<Range> expert_ranges() const;

  const std::vector<TensorSlot>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const TensorSlot& find(const std::string& name) const;  // throws std::out_of_range naming it
  Range unit_range(int64_t unit) const;                   // the unit's contiguous slice
  // True when this layout's head carries its own copy of the tied embedding table.
  bool head_has_wte_copy() const;
  // Ranges that take weight decay, merged where adjacent, in increasing order.
  std::vector<Range> decayed_ranges() const;
  // Ranges of the tensors every tp rank holds whole (merged, increasing); empty when tp = 1.
  std::vector<Range> replicated_ranges() const;

  // Writes the initial values of flat positions [first, first + out.size()) (a whole buffer or a
  // ZeRO shard of it). Each value depends only on (seed, tensor name, element index in the
  // unsharded tensor), so a tensor starts the same whatever unit range or tp rank holds it, and
  // tp shards are slices of the unsharded values; padding is 0. The table's init (GPT-2's).
  template <typename Scalar>
  void init(std::span<Scalar> out, uint64_t seed, int64_t first = 0) const;

 private:
  void add(int64_t unit, const count::TensorSpec& t);

  spec::Model model_;
  int64_t begin_ = 0;
  int64_t end_ = 0;
  int64_t size_ = 0;
  int64_t tp_ = 1, tp_index_ = 0, ep_ = 1, ep_index_ = 0, etp_ = 1, etp_index_ = 0;
  std::vector<TensorSlot> tensors_;
  std::vector<Range> unit_ranges_;  // indexed by unit - begin_
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace stagecraft::executor
