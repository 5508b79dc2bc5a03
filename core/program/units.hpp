// Units: the pieces a model is cut into for pipelining, ZeRO bucketing and tensor-parallel
// collectives, with each unit's parameter tensors and FLOPs per token on one tp rank.
//   unit 0          embedding: wte V*h/t (vocab-parallel), wpe rows*h (replicated) if learned,
//                   the embedding norm if any
//   unit 1+2i       block i attention: norm1, q/k norms of d (qk_norm), qkv h*(q/t + 2*kv_r*d),
//                   out (q/t)*h (+ biases), a post-norm (attn_norms == 2)
//   unit 2+2i       block i MLP: norm2 (none when a parallel block shares norm1), up (and gate)
//                   h*f/t, down (f/t)*h (+ biases), a post-norm (mlp_norms == 2)
//   unit 2L+1       head: final norm, LM head V*h/t (+ V/t bias) (untied; tied: shares wte)
//   a MoE layer's MLP unit (kMoe): norm2, the router h*E (replicated), the routed experts stacked,
//                   E/ep of them on the rank, each split over etp ranks like a tensor-parallel
//                   MLP (gate/up by columns, down by rows, down's bias whole), the shared
//                   experts split over t like a dense MLP
// Mixture of experts (Megatron-Core, with sequence parallelism when t > 1): each tp rank routes
// its own 1/t of the tokens through the router and its top-k experts, whole, so per token of the
// micro-batch a rank does router 2hE/t + k·(routed expert GEMMs)/t + shared experts/t, whatever
// ep (the mean over the expert-parallel group: a rank computes, for its E/ep experts, the tokens
// every rank of its group sends them; with expert tensor parallelism etp times the tokens, each
// over 1/etp of the expert's width: the same FLOPs). Multi-head latent attention: the scores over the query/key
// head size and the value head size (count::attention_flops_per_token_fwd).
// The tensors, their shapes and splits are the tensor table's (count/tensors.hpp): one description
// of the parameters for the counts, the units and the executor's layout. q = heads * head_dim.
// Modules (what DeepSpeed fetches one by one): each norm, each Linear (weight and bias; QKV is one
// fused Linear, as Megatron and GPT-2 write it; Hugging Face LLaMA has three), each table.
// kv_r = kv_heads/t key/value heads per rank, or 1 when t > kv_heads (replicated, as Megatron).
// Column-parallel biases split over t; row-parallel biases and norms are replicated.
// FLOPs per token per rank: forward 2*k*n per GEMM (+ 4*s*q/t attention scores); backward
// input grads 2*k*n (+ 8*s*q/t scores), weight grads 2*k*n (count/count.hpp for the full model).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/spec/model.hpp"

namespace stagecraft::program {

enum class UnitKind : uint8_t { kEmbedding, kAttention, kMlp, kHead, kMoe };

struct Unit {
  UnitKind kind = UnitKind::kEmbedding;
  int32_t block = -1;                  // transformer block index, -1 for embedding/head
  std::vector<int64_t> tensors;        // elements of each parameter tensor on one tp rank
  std::vector<int8_t> module;          // per tensor: the nn.Module owning it (0, 1, ... within the unit):
                                       // a norm, a Linear with its bias, an embedding table
  std::vector<int64_t> dims;           // per tensor: a matrix's larger dimension on the tp rank, 0 for a vector
  int64_t params = 0;                  // sum of tensors
  double fwd_flops_per_token = 0;      // GEMMs + attention scores
  double bwd_input_flops_per_token = 0;
  double bwd_weight_flops_per_token = 0;
  double score_flops_per_token = 0;    // attention scores (part of forward), what selective recompute re-runs
  // kMoe: which tensors are routed experts' (1) — reduced over the expert data-parallel group —,
  // their elements, and the routed experts' share of each pass's FLOPs per token (forward, input
  // and weight gradients alike: GEMMs only)
  std::vector<uint8_t> expert;
  int64_t expert_params = 0;
  double expert_flops_per_token = 0;
  // elements of the unit's norm weights (and biases), whole, and of its query and key norms alone
  // (count::norm_elems: what sequence parallelism's, or qk_norm's, tp all-reduce sums)
  int64_t norm_elems = 0, qk_norm_elems = 0;
};

inline int32_t unit_count(const spec::Model& m) { return static_cast<int32_t>(2 * m.layers + 2); }
inline int32_t head_unit(const spec::Model& m) { return static_cast<int32_t>(2 * m.layers + 1); }
inline int32_t block_first_unit(int64_t block) { return static_cast<int32_t>(1 + 2 * block); }

std::vector<Unit> model_units(const spec::Model& m, int64_t tp, int64_t ep = 1, int64_t etp = 1);
// The same units, built once per thread for each (model, tp) asked for and shared: a search lowers
// and simulates thousands of plans of one model, and each lowering and simulation reads its units
// several times. Keyed by the model's whole JSON (spec::to_json), so any field that changes a
// shape changes the key.
std::shared_ptr<const std::vector<Unit>> shared_model_units(const spec::Model& m, int64_t tp, int64_t ep = 1,
                                                           int64_t etp = 1);
// Elements of the embedding table a tied head keeps on its own stage when the embedding is elsewhere.
int64_t tied_head_copy(const spec::Model& m, int64_t tp);

}  // namespace stagecraft::program
