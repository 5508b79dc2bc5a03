// The tensor table: every parameter tensor of a model, unit by unit, with its shape, how tensor
// parallelism splits it, the module that owns it and how it is initialised. It is the one
// description of a model's parameters: the counts (count.hpp), the Program's units
// (program/units.hpp: sizes, modules, ZeRO buckets) and the executor's flat layout
// (executor/model/params.hpp) all derive from it.
//
// Units (program/units.hpp numbers them): 0 embedding, 1+2i block i attention, 2+2i block i MLP,
// 2L+1 head. Names, in order within each unit ("?" when the model has it):
//   embedding   embedding.wte [V x h], embedding.wpe [rows x h]? (learned positions),
//               embedding.norm.w/.b?
//   attention   block.i.attn.norm1.w/.b, block.i.attn.q_norm.w/.b? and k_norm [1 x d] (qk_norm; [1 x q]
//               and [1 x kv] with qk_norm_whole, replicated), block.i.attn.qkv.w [h x (q + 2kv)], .b?,
//               block.i.attn.out.w [q x h], .b?, block.i.attn.sinks [1 x H]? (attention_sinks, cut
//               by heads as the queries are), block.i.attn.post_norm.w/.b? (attn_norms == 2)
//   MLP         block.i.mlp.norm2.w/.b? (mlp_norms >= 1), block.i.mlp.gate.w [h x f]/.b? (gated),
//               block.i.mlp.up.w [h x f]/.b?, block.i.mlp.down.w [f x h]/.b?,
//               block.i.mlp.post_norm.w/.b? (mlp_norms == 2); a MoE layer's MLP: block.i.mlp.norm2,
//               block.i.mlp.router.w [h x E], .b [1 x E]? (router_bias), .logit_b [1 x E]?
//               (router_logit_bias), block.i.mlp.experts.{gate,up,down}.w [E·in x out] and .b [E x out]?
//               (mlp_bias), the shared experts block.i.mlp.shared.* and block.i.mlp.shared_gate.w
//   head        head.normf.w/.b?, head.lm_head.w [h x V] and head.lm_head.b [1 x V]? (untied; a tied
//               head multiplies by embedding.wte^T and owns no table)
// Matrices are row-major [in x out] (y = x . W + b); vectors are [1 x n]. A norm's bias exists
// for LayerNorm with norm_bias.
//
// Tensor parallelism over t ranks (Megatron-LM, Shoeybi et al. 2019), rank r:
//   column    (mlp gate/up, their biases): columns [r*out/t, (r+1)*out/t)
//   row       (attn.out, mlp.down weights): rows [r*in/t, (r+1)*in/t); their biases replicated
//   qkv       (attn.qkv and its bias): query heads [r*H/t, (r+1)*H/t) and key/value heads
//             [r*KV/t, (r+1)*KV/t) — columns q | k | v each cut by heads; with t > KV each rank
//             keeps the one K/V head its queries use (count::kv_heads_per_rank)
//   vocab rows    (embedding.wte): rows [r*Vp, (r+1)*Vp), Vp = ceil(V/t); rows past V are padding
//   vocab columns (head.lm_head.w/.b): columns [r*Vp, (r+1)*Vp), likewise padded
//   replicated    norms, row-parallel biases, wpe: whole on every rank
// Initialisation (GPT-2's): matrices and tables N(0, 0.02), the output projections attn.out.w
// and mlp.down.w N(0, 0.02 / sqrt(2L)), biases 0, norm weights 1; weight decay on matrices and
// tables only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/count/count.hpp"
#include "core/spec/model.hpp"

namespace stagecraft::count {

enum class Init : uint8_t { kNormal, kZeros, kOnes };

struct TensorSpec {
  std::string name;          // e.g. "block.3.attn.qkv.w"
  int32_t unit = 0;
  int8_t module = 0;         // the nn.Module owning it within its unit (0, 1, ...): a norm, a Linear, a table
  int64_t rows = 0;          // shape on one tp rank (padding included)
  int64_t cols = 0;
  int64_t global_rows = 0;   // the unsharded shape
  int64_t global_cols = 0;
  Split split = Split::kReplicated;
  Init init = Init::kZeros;
  double init_std = 0;       // Init::kNormal
  bool decay = false;        // AdamW weight decay applies
  bool norm = false;         // a norm's weight or bias (sequence parallelism computes its gradient per
                             // sequence shard, so it is summed over tp once per step)

  int64_t elems() const { return rows * cols; }
  bool replicated() const { return split == Split::kReplicated; }
};

// Unit `unit`'s tensors on one of `tp` ranks, in layout order.
std::vector<TensorSpec> unit_tensors(const spec::Model& m, int32_t unit, int64_t tp);

// Where tp rank `tp_index`'s shard of a tensor sits in the unsharded tensor: shard rows
// [0, valid_rows) are unsharded rows [row0, row0 + valid_rows) (later rows are padding) — or, with
// row_block > 0, blocks of row_block rows row_stride apart from row0 (an expert tensor-parallel
// slice of stacked experts' rows) —, and shard columns map piece by piece (columns no piece
// covers are padding).
struct ColumnPiece {
  int64_t local = 0;   // first shard column
  int64_t global = 0;  // its unsharded column
  int64_t count = 0;
};
struct ShardMap {
  int64_t row0 = 0;
  int64_t valid_rows = 0;
  std::vector<ColumnPiece> cols;
  int64_t row_block = 0, row_stride = 0;
  // The unsharded element of shard element (row, col), or -1 for padding.
  int64_t global_index(const TensorSpec& t, int64_t row, int64_t col) const;
};
ShardMap shard_map(const spec::Model& m, const TensorSpec& t, int64_t tp, int64_t tp_index);

// Vocabulary rows (or columns) of the LM tables on one of t ranks: ceil(V / t), Megatron's padding.
int64_t vocab_per_rank(const spec::Model& m, int64_t tp);

// Elements of the norms' weights and biases in units [unit_begin, unit_end) (one tp rank holds them
// whole); `qk_only`: the query and key norms' alone (qk_norm).
int64_t norm_elems(const spec::Model& m, int32_t unit_begin, int32_t unit_end, bool qk_only = false);
// Whether a tensor (TensorSpec::name) is a query or key norm's weight or bias.
bool is_qk_norm(const std::string& name);

}  // namespace stagecraft::count
