// ParamLayout: where every parameter tensor of a contiguous range of units lives in ONE flat
// buffer (so ZeRO sharding is slicing), which ranges take weight decay, and deterministic
// initial values. It is not storage: callers own the buffers (params, grads, Adam moments).
//
// Units, the pipeline / ZeRO granularity of the Program lowering (L blocks):
//   0        embedding           wte [V x C], wpe [S x C] (learned positions only)
//   1 + 2i   block i attention   norm1.w, norm1.b?, qkv.w [C x (C+2KV)], qkv.b?, out.w [C x C], out.b?
//   2 + 2i   block i MLP         norm2.w, norm2.b?, (gate.w [C x F], gate.b?)?, up.w [C x F], up.b?,
//                                down.w [F x C], down.b?
//   2L + 1   head                normf.w, normf.b?, then the LM head: untied "head.lm_head.w" [C x V];
//                                tied: wte^T, a copy "embedding.wte" [V x C] when unit 0 is not in
//                                the range (Megatron: its gradient is all-reduced with unit 0's)
// Shapes: C hidden, F ffn_hidden, V vocab, S seq_len, KV kv_heads * head_dim. Matrices are
// row-major [in x out] so y = x . W (+ b). "?" exists iff model.bias (norm bias: LayerNorm only).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/spec/model.hpp"

namespace stagecraft::executor {

enum class UnitKind { kEmbedding, kAttention, kMlp, kHead };

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

enum class Init { kNormal, kZeros, kOnes };

struct TensorSlot {
  std::string name;    // global name, e.g. "block.3.attn.qkv.w"; the tied head copy is "embedding.wte"
  int64_t unit = 0;    // the unit that owns it in this layout
  int64_t offset = 0;  // first element in the flat buffer
  int64_t rows = 0;    // [rows x cols] row-major; vectors have rows == 1
  int64_t cols = 0;
  Init init = Init::kZeros;
  double init_std = 0;  // for Init::kNormal
  bool decay = false;   // AdamW weight decay applies (matrices; not biases or norm weights)

  int64_t size() const { return rows * cols; }
  Range range() const { return {offset, offset + size()}; }
};

class ParamLayout {
 public:
  // Units [begin, end) of `model`; throws std::invalid_argument for an empty or outside range.
  ParamLayout(const spec::Model& model, int64_t begin, int64_t end);
  // Every unit of the model.
  explicit ParamLayout(const spec::Model& model);

  const spec::Model& model() const { return model_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  bool holds(int64_t unit) const { return unit >= begin_ && unit < end_; }
  int64_t size() const { return size_; }  // elements of the flat buffer

  const std::vector<TensorSlot>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const TensorSlot& find(const std::string& name) const;  // throws std::out_of_range naming it
  Range unit_range(int64_t unit) const;                   // the unit's contiguous slice
  // True when this layout's head carries its own copy of the tied embedding table.
  bool head_has_wte_copy() const;
  // Ranges that take weight decay, merged where adjacent, in increasing order.
  std::vector<Range> decayed_ranges() const;

  // Writes the initial values of flat positions [first, first + out.size()) (a whole buffer or a
  // ZeRO shard of it). Each value depends only on (seed, tensor name, element index), so a
  // tensor starts the same whatever unit range holds it. GPT-2 init: matrices N(0, 0.02),
  // output projections (attn.out.w, mlp.down.w) N(0, 0.02 / sqrt(2L)), biases 0, norm weights 1.
  template <typename Scalar>
  void init(std::span<Scalar> out, uint64_t seed, int64_t first = 0) const;

 private:
  void add(int64_t unit, std::string name, int64_t rows, int64_t cols, Init init, double init_std, bool decay);
  void add_unit(int64_t unit);
  void add_norm(int64_t unit, const std::string& prefix);
  void add_linears(int64_t unit, const std::string& prefix, const std::string& group);

  spec::Model model_;
  int64_t begin_ = 0;
  int64_t end_ = 0;
  int64_t size_ = 0;
  std::vector<TensorSlot> tensors_;
  std::vector<Range> unit_ranges_;  // indexed by unit - begin_
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace stagecraft::executor
