// Model: the transformer being trained (SCHEMAS.md, model.json). A dense decoder-only stack of L
// blocks, each an attention unit and an MLP unit, described by the choices that change its shapes:
//   MLP        gelu / relu: h -> f -> h (2 matrices); swiglu / geglu: gate and up h -> f, down f -> h
//   norm       layernorm (weight, and a bias when norm_bias), rmsnorm (weight)
//   position   learned (a (max_positions + position_offset) x h table), rope, alibi (no parameters)
//   attention  heads of head_dim() (hidden / heads unless head_size says otherwise), kv_heads K/V
//              heads (grouped-query), optional q/k norms (qk_norm: per head, of head_dim; or, with
//              qk_norm_whole, over the whole q and k projections, of q_dim and kv_dim: OLMoE), optional
//              learned sinks (attention_sinks: one logit per query head joining each softmax's
//              denominator, gpt-oss)
//   block      sequential (x += attn(norm(x)); x += mlp(norm(x))) or parallel (x += attn(norm(x)) +
//              mlp(norm'(x)), the MLP sharing the attention's norm when mlp_norms == 0); a second,
//              post-sublayer norm per unit when attn_norms / mlp_norms == 2 (Gemma-2)
//   biases     per kind of linear: the QKV projection, the attention output, the MLP, the norms, an
//              untied LM head
//   experts    (moe, Megatron-Core's MoE layer, docs/program.md "Mixture of experts") an MLP unit
//              of E routed experts (each an MLP of expert ffn width, gated as `mlp` says), a router
//              h -> E choosing k of them per token, optionally shared experts every token passes
//              (DeepSeek, Qwen2-MoE, with Qwen2-MoE's sigmoid gate on them); the layers in
//              moe.dense_layers keep a dense MLP of ffn_hidden; the experts' linears carry biases
//              when mlp_bias (gpt-oss), the router a logit bias when moe.router_logit_bias (gpt-oss)
//   MLA        (mla, DeepSeek-V2/V3's multi-head latent attention) queries through a rank-q_lora
//              bottleneck (or straight when q_lora_rank is 0), keys and values from one rank-kv_lora
//              latent plus a shared RoPE key: q_a h -> r_q, q_b r_q -> H(d_nope + d_rope),
//              kv_a h -> r_kv + d_rope, kv_b r_kv -> H(d_nope + d_v), out H·d_v -> h, RMSNorms on
//              the two latents
// load_model() also accepts a Hugging Face config.json of the families hf_import.cpp lists (GPT-2,
// LLaMA, Mistral, Qwen2/2.5/3, Gemma/Gemma-2, GPT-NeoX, Falcon, GPT-J, OPT, BLOOM, Phi-2, Phi-3;
// the mixtures of experts Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DBRX, gpt-oss, DeepSeek-V2/V3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace stagecraft::spec {

enum class Mlp { kGelu, kSwiglu, kRelu, kGeglu };  // 2 matrices h->f->h (gelu, relu), or 3 (gate, up, down)
enum class Norm { kLayerNorm, kRmsNorm };          // weight + bias (if norm_bias), or weight only
enum class Position { kLearned, kRope, kAlibi };   // a table of rows x h, or no parameters

// True for the MLPs with a gate (SwiGLU, GeGLU): three matrices instead of two.
inline bool gated(Mlp m) { return m == Mlp::kSwiglu || m == Mlp::kGeglu; }

// Mixture of experts (model.json "moe"); experts == 0: a dense model.
struct Moe {
  int64_t experts = 0;             // E routed experts per MoE layer
  int64_t top_k = 0;               // experts each token is routed to
  int64_t ffn_hidden = 0;          // one routed expert's MLP width
  int64_t shared_ffn_hidden = 0;   // the shared experts' MLP width, all of them together (0: none)
  bool shared_gate = false;        // Qwen2-MoE: sigmoid(x . w), w h -> 1, scales the shared expert
  std::vector<int64_t> dense_layers;  // layers whose MLP is dense (ffn_hidden), increasing
  std::string router = "softmax";  // the routing score: "softmax" (Mixtral, Qwen) or "sigmoid" (DeepSeek-V3)
  bool router_bias = false;        // DeepSeek-V3's per-expert score correction (E values, bias-based balancing)
  // gpt-oss: the router is a linear with a learned bias of E, added to the logits before the top-k (a
  // parameter trained by its gradient, unlike router_bias, which only shifts the selection).
  bool router_logit_bias = false;
  // The k chosen scores renormalised to sum to 1 (Mixtral's softmax over the top-k logits, Megatron-Core's
  // default, Qwen's norm_topk_prob true), or the softmax's own values (Qwen2-MoE's default).
  bool normalize_top_k = true;
  // The gates times this (DeepSeek-V3's routed_scaling_factor 2.5, Megatron-Core's
  // --moe-router-topk-scaling-factor); 1: none.
  double router_scaling = 1.0;
  // Group-limited routing (DeepSeek-V3's n_group 8, topk_group 4; Megatron-Core's
  // --moe-router-num-groups / --moe-router-group-topk): the experts in `router_groups` equal groups,
  // a group scored by the sum of its top (top_k / router_group_top_k) selection scores, each token's
  // top k taken from its router_group_top_k best groups. 0: every expert is a candidate.
  int64_t router_groups = 0, router_group_top_k = 0;
  bool on() const { return experts > 0; }
  bool operator==(const Moe&) const = default;
};

// Multi-head latent attention (model.json "mla"); kv_lora_rank == 0: standard attention.
struct Mla {
  int64_t q_lora_rank = 0;   // 0: queries projected straight from h
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool on() const { return kv_lora_rank > 0; }
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool operator==(const Mla&) const = default;
};

struct Model {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;       // == heads without grouped-query attention
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  // The training sequence length in tokens: model.json's seq_len (or, for a Hugging Face config,
  // min(max_position_embeddings, kDefaultHfSeqLen)) until a training file's seq_len or --seq-len
  // replaces it (with_training_length).
  int64_t seq_len = 0;
  // The longest sequence the model takes (Hugging Face max_position_embeddings / n_positions;
  // model.json's max_positions): a limit on seq_len, and the rows of a learned position table.
  // 0: no limit declared (RoPE models built in code or from a model.json without the key).
  int64_t max_positions = 0;
  Mlp mlp = Mlp::kGelu;
  Norm norm = Norm::kLayerNorm;
  Position position = Position::kLearned;
  bool tied_embeddings = true;
  // Biases, per kind of linear (model.json's "bias" sets the first four at once).
  bool qkv_bias = true;       // the QKV projection (Qwen2 has it while every other linear has none)
  bool out_bias = true;       // the attention output projection
  bool mlp_bias = true;       // every MLP linear
  bool norm_bias = true;      // LayerNorm's beta (RMSNorm has none whatever this says)
  bool lm_head_bias = false;  // an untied LM head's bias (GPT-J, Phi-2)
  // Attention head width when it is not hidden / heads (Gemma: 256 with hidden 3072 and 16 heads;
  // Mistral-NeMo: 128 with 5120 and 32); 0: hidden / heads.
  int64_t head_size = 0;
  bool qk_norm = false;        // a norm of head_dim on the queries and one on the keys (Qwen3)
  // With qk_norm: the two norms span the whole projections, q_dim() and kv_dim() wide (OLMoE normalizes
  // the concatenated heads), not one head_dim (model.json "qk_norm_span": "projection").
  bool qk_norm_whole = false;
  // gpt-oss: a learned logit per query head that joins the softmax's denominator (heads parameters a
  // layer; no GEMM, so no FLOPs counted, like the softmax itself).
  bool attention_sinks = false;
  double rotary_fraction = 1;  // the share of each head's dimensions RoPE rotates (GPT-NeoX: 0.25)
  // Block layout (see the top of this file).
  bool parallel_attention = false;
  int64_t attn_norms = 1;      // norms in the attention unit: 1 (pre), 2 (pre and post)
  int64_t mlp_norms = 1;       // in the MLP unit: 0 (parallel, shares the attention's), 1, 2
  bool embedding_norm = false; // a norm on the token embeddings (BLOOM)
  int64_t position_offset = 0; // extra rows of a learned table before position 0 (OPT: 2)
  // Numerics that change no shape or cost, only what the executor computes (Hugging Face:
  // layer_norm_epsilon / rms_norm_eps, rope_theta, activation_function, rope_scaling, sliding_window).
  double norm_eps = 1e-5;        // the norms' epsilon: rstd = 1 / sqrt(var + eps)
  double rope_theta = 10000;     // RoPE's base: pair i of a head turns by t * theta^(-2i / head_dim)
  bool gelu_exact = false;       // GELU as 0.5 x (1 + erf(x / sqrt 2)), not the tanh approximation
  std::string rope_scaling;      // a RoPE scaling's type ("linear", "llama3", ...); "" when none
  int64_t sliding_window = 0;    // tokens each query attends back (Mistral); 0: the whole sequence
  // The layers sliding_window applies to, increasing (gpt-oss's "sliding_attention" layer_types: the even
  // ones); empty: every layer. Like sliding_window itself it changes no count: attention is costed over
  // the whole sequence on every layer (hf_import.cpp warns how much that over-counts).
  std::vector<int64_t> sliding_window_layers;
  Moe moe;                       // experts (top of this file); dense when moe.experts == 0
  Mla mla;                       // latent attention; standard when mla.kv_lora_rank == 0
  std::string source;         // where the values come from
  std::string file;           // the file it was loaded from ("" when built in code)
  // What the source file says that Stagecraft reads but does not model (Hugging Face keys such as
  // sliding_window); the command line prints each as a warning.
  std::vector<std::string> warnings;
  // What the source file implies about the training length when nothing else sets one (a Hugging
  // Face config planned at min(max_position_embeddings, kDefaultHfSeqLen)); the command line prints
  // it only when neither the training file's seq_len nor --seq-len sets the length.
  std::string length_note;

  int64_t head_dim() const { return head_size > 0 ? head_size : hidden / heads; }
  // Whether layer `layer`'s MLP is a mixture of experts.
  bool moe_layer(int64_t layer) const;
  int64_t q_dim() const { return heads * head_dim(); }  // the attention's width: hidden unless head_size says
  int64_t kv_dim() const { return kv_heads * head_dim(); }
  // The widths of the q and k norms (qk_norm): one head, or the whole projection (qk_norm_whole).
  int64_t q_norm_width() const { return qk_norm_whole ? q_dim() : head_dim(); }
  int64_t k_norm_width() const { return qk_norm_whole ? kv_dim() : head_dim(); }
  // Rows of the learned position table: max_positions when declared, else seq_len, plus the offset.
  int64_t position_rows() const { return (max_positions > 0 ? max_positions : seq_len) + position_offset; }
  // Sets the QKV, attention-output, MLP and norm biases together (model.json's "bias").
  void set_biases(bool on) { qkv_bias = out_bias = mlp_bias = norm_bias = on; }
  // Whether norms carry a bias (LayerNorm with norm_bias).
  bool norm_has_bias() const { return norm == Norm::kLayerNorm && norm_bias; }
  bool operator==(const Model&) const = default;
};

// Loads a Stagecraft model.json or a Hugging Face config.json (detected by its keys).
Model load_model(const std::string& path);
// Parses and validates; `file` names the origin in error messages.
Model model_from_json(const nlohmann::json& j, const std::string& file);
// Hugging Face config.json, by model_type (hf_import.cpp lists the families and their keys).
bool is_hf_config(const nlohmann::json& j);
Model model_from_hf_config(const nlohmann::json& j, const std::string& file);
// The key each field was read from, so a validation error points at the user's own key.
struct ModelKeys {
  std::string layers = "layers", hidden = "hidden", heads = "heads", kv_heads = "kv_heads",
              ffn_hidden = "ffn_hidden", vocab = "vocab", seq_len = "seq_len", max_positions = "max_positions",
              head_size = "head_dim", norm_eps = "norm_eps", moe = "moe", mla = "mla";
};
// The training length a Hugging Face config is planned at when nothing sets one: its
// max_position_embeddings when at most this, else this (with a warning naming --seq-len).
inline constexpr int64_t kDefaultHfSeqLen = 8192;
// Checks the invariants of a Model (positivity, divisibility); throws SpecError naming m.file.
void validate_model(const Model& m, const ModelKeys& keys = {});

struct Training;
// The model as a training run sees it: seq_len replaced by the training's seq_len when that is set
// (the training file's "seq_len" or --seq-len). Throws SpecError naming the training file when the
// length exceeds max_positions (for a learned table without max_positions: its seq_len rows).
Model with_training_length(Model m, const Training& t);

nlohmann::json to_json(const Model& m);
// One line naming the block's choices: "mlp swiglu, norm rmsnorm, position rope, untied embeddings,
// biases on qkv", then head_dim, q/k norms, parallel blocks, post-norms, ... where they apply.
std::string architecture_text(const Model& m);
const char* to_string(Mlp v);
const char* to_string(Norm v);
const char* to_string(Position v);

}  // namespace stagecraft::spec
