// Exact parameter and FLOP counts of a Model, derived from the shapes of its GEMMs.
//
// Every linear layer is a GEMM  [tokens x in] . [in x out]:
//   parameters   in*out (+ out biases when the model has biases)
//   forward      2*tokens*in*out FLOPs;  backward 4*tokens*in*out (input grad + weight grad)
// A block (h hidden, f ffn_hidden, d = h/heads, kv = kv_heads*d):
//   attention    qkv: h -> h + 2kv,  out: h -> h
//   MLP          gelu: h -> f, f -> h;   swiglu: h -> f (gate), h -> f (up), f -> h (down)
//   norms        2 per block: layernorm 2h (h without bias), rmsnorm h
// Attention scores per token and block, forward: QK^T 2*s*h + (softmax.V) 2*s*h = 4*s*h, counted
// over all s keys as Narayanan et al. (SC'21) do, so the totals reproduce their formulas:
//   forward FLOPs per token = 24*L*h^2 + 4*L*s*h + 2*h*V   (GPT, 4h MLP, no GQA)
//   training = 3x forward (72 formula); full recompute adds one block forward (96 formula).
// Embedding lookups, norms, softmax and biases are memory-bound and excluded from FLOPs.
// Embedding: V*h tokens (+ s*h learned positions). Head: final norm + V*h LM head if untied;
// a tied head reuses the embedding table (no parameters) but still costs 2*h*V FLOPs per token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"

namespace stagecraft::count {

struct Linear {
  std::string name;
  int64_t in = 0;
  int64_t out = 0;
  bool bias = false;

  int64_t parameters() const { return in * out + (bias ? out : 0); }
  double forward_flops_per_token() const { return 2.0 * static_cast<double>(in) * static_cast<double>(out); }
};

// The linear layers of one transformer block, in execution order.
std::vector<Linear> block_linears(const spec::Model& m);
int64_t norm_parameters(const spec::Model& m);       // one norm layer
int64_t block_parameters(const spec::Model& m);      // one transformer block
int64_t embedding_parameters(const spec::Model& m);  // token table + learned positions
int64_t head_parameters(const spec::Model& m);       // final norm + untied LM head
int64_t parameters(const spec::Model& m);            // the whole model

double attention_flops_per_token_fwd(const spec::Model& m);  // 4*s*h per block
double block_flops_per_token_fwd(const spec::Model& m);      // linears + attention scores
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
