// Exact parameter and FLOP counts of a Model, derived from the shapes of its GEMMs.
//
// Every linear layer is a GEMM  [tokens x in] . [in x out]:
//   parameters   in*out (+ out biases when the model has biases)
//   forward      2*tokens*in*out FLOPs;  backward 4*tokens*in*out (input grad + weight grad)
// A block (h hidden, f ffn_hidden, d = head_dim, q = heads*d (h unless head_dim says otherwise),
// kv = kv_heads*d):
//   attention    qkv: h -> q + 2kv,  out: q -> h  (biases: qkv_bias, out_bias)
//   MLP          gelu / relu: h -> f, f -> h;   swiglu / geglu: h -> f (gate), h -> f (up), f -> h
//                (down)  (biases: mlp_bias)
//   norms        attn_norms + mlp_norms per block (2 in most, 1 when a parallel block shares one,
//                4 in Gemma-2), each layernorm 2h (h without norm_bias), rmsnorm h; qk_norm adds
//                two norms of d (of q and kv with qk_norm_whole, OLMoE); attention_sinks adds H
//                logits (gpt-oss), part of the softmax and so of no FLOPs
// Mixture of experts (Megatron-Core's MoE layer): a MoE layer's MLP unit is the router h -> E (E
// more with DeepSeek-V3's score correction or gpt-oss's logit bias), E routed experts each an MLP of
// width f_e (gated as the model's MLP, biased when mlp_bias), shared experts of width f_s together,
// and Qwen2-MoE's shared gate h -> 1. Parameters count every expert; a token's forward
// computes the router, k experts and the shared ones: per token 2hE + k·F_e + F_s FLOPs (F_x the
// expert MLP's GEMM FLOPs, 2·h·f·matrices). Active parameters = all but the (E - k) routed experts
// a token does not reach, per MoE layer: embedding, head and router included (Mixtral's 12.9B and
// Qwen3-30B-A3B's 3.3B count them so).
// MLA (DeepSeek-V2/V3): the linears of model.hpp's MLA; scores q.k^T 2·s·H·(d_nope + d_rope) and
// p.v 2·s·H·d_v per token.
// Attention scores per token and block, forward: QK^T 2*s*q + (softmax.V) 2*s*q = 4*s*q, counted
// over all s keys as Narayanan et al. (SC'21) do (not the causal half), so the totals reproduce
// their formulas; a layer of sliding_window w (Mistral's every layer, gpt-oss's and Gemma-2's
// "sliding_attention" ones: sliding_window_layers) reaches back min(s, w) keys, 4*min(s, w)*q, as
// the windowed kernels (FlashAttention's window_size) compute:
//   forward FLOPs per token = 24*L*h^2 + 4*L*s*h + 2*h*V   (GPT, 4h MLP, no GQA)
//   training = 3x forward (72 formula); full recompute adds one block forward (96 formula).
// Embedding lookups, norms, softmax and biases are memory-bound and excluded from FLOPs.
// Embedding: V*h tokens (+ rows*h learned positions, rows = max_positions + position_offset; + a
// norm when embedding_norm). Head: final norm + V*h LM head if untied (+ V with lm_head_bias); a
// tied head reuses the embedding table (no parameters) but still costs 2*h*V FLOPs per token.
// Tensor parallelism (Megatron, Shoeybi et al. 2019) splits each linear over t ranks by its Split:
//   column (qkv's q, mlp up/gate): out/t columns and out/t bias;  row (out, down): in/t rows, the
//   bias whole;  the QKV's K and V: kv_heads/t heads each, or 1 when t > kv_heads (replicated).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"

namespace stagecraft::count {

// How tensor parallelism splits a tensor: a linear (above), or, for the other tensors
// (count/tensors.hpp), replicated on every rank or cut by vocabulary rows / columns.
enum class Split : uint8_t { kColumn, kRow, kQkv, kReplicated, kVocabRows, kVocabColumns };

struct Linear {
  std::string name;
  int64_t in = 0;
  int64_t out = 0;
  bool bias = false;
  Split split = Split::kColumn;

  int64_t parameters() const { return in * out + (bias ? out : 0); }
  double forward_flops_per_token() const { return 2.0 * static_cast<double>(in) * static_cast<double>(out); }
};

// A linear's shape on one of t tensor-parallel ranks: weight in x out, and its bias elements.
struct Shard {
  int64_t in = 0;
  int64_t out = 0;
  int64_t bias = 0;
  int64_t weight() const { return in * out; }
};
Shard shard(const spec::Model& m, const Linear& l, int64_t tp);
// K/V heads on one of t ranks: kv_heads / t, or 1 when t > kv_heads (each rank keeps a copy).
int64_t kv_heads_per_rank(const spec::Model& m, int64_t tp);

// The linear layers of one transformer block, in execution order (a dense MLP of ffn_hidden).
std::vector<Linear> block_linears(const spec::Model& m);
std::vector<Linear> attention_linears(const spec::Model& m);
// An MLP of width f named prefix.gate / .up / .down.
std::vector<Linear> mlp_linears(const spec::Model& m, const std::string& prefix, int64_t f);
int64_t norm_parameters(const spec::Model& m);       // one norm layer of h
int64_t qk_norm_parameters(const spec::Model& m);    // the q and k norms of d (0 without qk_norm)
int64_t block_parameters(const spec::Model& m, int64_t layer = 0);  // transformer block `layer`
int64_t embedding_parameters(const spec::Model& m);  // token table + learned positions
int64_t head_parameters(const spec::Model& m);       // final norm + untied LM head
int64_t parameters(const spec::Model& m);            // the whole model
int64_t expert_parameters(const spec::Model& m);     // one routed expert's MLP
int64_t moe_layers(const spec::Model& m);            // layers whose MLP is a mixture of experts
int64_t active_parameters(const spec::Model& m);     // what one token's forward reaches (all, dense)

// Whether block `layer` attends over a sliding window (sliding_window on it: sliding_window_layers,
// or every layer when that list is empty); the keys a query of it is costed over: s, or min(s, w).
bool windowed_layer(const spec::Model& m, int64_t layer);
int64_t attention_keys(const spec::Model& m, int64_t layer);
double attention_flops_per_token_fwd(const spec::Model& m, int64_t layer);  // 4*keys*q per block
double block_flops_per_token_fwd(const spec::Model& m, int64_t layer = 0);  // linears + scores, active experts
double head_flops_per_token_fwd(const spec::Model& m);       // 2*h*V
double flops_per_token_fwd(const spec::Model& m);            // the whole model
// Model FLOPs of forward + backward per token (3x forward), what MFU counts.
double model_flops_per_token_train(const spec::Model& m);
// Hardware FLOPs: model FLOPs plus what recompute re-runs (full: a block forward per block;
// selective: the attention scores).
double hardware_flops_per_token_train(const spec::Model& m, spec::Recompute r);

struct LayerCount {
  std::string name;           // "embedding", "block.0" ... "block.L-1", "head"
  int64_t parameters = 0;
  double flops_per_token_fwd = 0;
};
// Embedding, every block, head: the units a pipeline splits into stages.
std::vector<LayerCount> layer_counts(const spec::Model& m);

}  // namespace stagecraft::count
