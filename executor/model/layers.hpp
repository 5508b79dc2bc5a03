// Forward and backward of one unit (embedding, block attention sublayer, block MLP sublayer,
// head; see params.hpp) for one micro-batch, on caller-provided activation buffers: the pieces a
// distributed executor calls per Program instruction. It is the CPU oracle (Eigen, float or
// double); it owns no parameters and does no communication.
//
// Shape legend: B sequences, T tokens each, N = B*T rows, C hidden, V vocab.
//   embedding  tokens [N]          -> x [N, C]     x = wte[token] + wpe[position]
//   attention  x [N, C]            -> x + attn(norm1(x))
//   mlp        x [N, C]            -> x + mlp(norm2(x))
//   head       x [N, C], targets   -> loss [1]     mean over the N tokens of the cross-entropy
// Gradient accumulation: the head's loss is the mean over the micro-batch's tokens; to train on
// the mean over m micro-batches, pass dy = {1/m} to the head's backward. Parameter gradients are
// ADDED to the grad buffer (zero it once per step), so m backward calls accumulate.
//
// Tensor parallelism (a layout of tp rank r of t > 1; Megatron-LM, Shoeybi et al. 2019): a unit
// computes with its shard and leaves, where Megatron's f/g operators sit, a partial result for
// the caller to sum over the tp ranks (the Program's TpAllReduce):
//   forward    embedding: the rows of the tokens in r's vocabulary slice (+ wpe on rank 0);
//              attention, MLP: the row-parallel output's partial product (+ x + bias on rank 0);
//              head: per row the local max m, sum of exp(z - m) and the target's logit (0 when the
//              target is another rank's), [3N] — the caller all-reduces max(m) and the target
//              logit, rescales the sums (vocab_parallel_rescale), all-reduces them, and
//              finish_loss turns the three into the loss
//   backward   attention, MLP, head: backward_input leaves dL/d(norm output), partial over the
//              ranks' shards, in dx; once summed, finish_input_grad runs the norm's backward (dx
//              = residual + d norm) and the norm's weight gradient; the embedding needs none
// Replicated tensors (norms, row-parallel biases, wpe) get the same full gradient on every rank.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "executor/model/host_kernels.hpp"
#include "executor/model/params.hpp"

namespace stagecraft::executor {

// The phases of an expert-parallel MoE pass (LayerT::moe_*), each ending where an all-to-all over
// the expert-parallel group takes over.
enum class MoePhase : uint8_t { kDispatch, kExperts, kCombine, kBackwardSend, kExpertsBackward, kBackwardFinish };

// The phases of a context-parallel attention pass (LayerT::cp_*), each ending where a cp
// collective takes over.
enum class CpPhase : uint8_t { kProject, kAttend, kFinishForward, kBackwardSend, kBackwardAttend, kBackwardFinish };
struct CpSizes {
  int64_t in = 0, out = 0;
};

// Context parallelism: each of the micro-batch's sequences split over `size` ranks, this one
// `rank`, which holds the load-balanced pair of causal chunks (ops::cp_positions), its rows in that
// order; `comm` is how attention exchanges what it needs (LayerT::cp_*).
struct CpSplit {
  int64_t size = 1, rank = 0;
  spec::CpComm comm = spec::CpComm::kP2p;
};

struct Dims {
  int64_t batch = 0;  // B sequences
  int64_t seq = 0;    // T tokens per sequence (<= model.seq_len): with cp > 1 this rank's, seq_len / cp
  CpSplit cp{};
  int64_t rows() const { return batch * seq; }
  int64_t full_seq() const { return seq * cp.size; }  // the sequence's tokens over the cp ranks
  // The sequence positions of a sequence's T rows: 0 .. T − 1, or the rank's chunks under cp.
  std::vector<int64_t> positions() const {
    return cp.size > 1 ? ops::cp_positions(full_seq(), cp.size, cp.rank) : ops::natural_positions(seq);
  }
};

// The micro-batch's token ids. Only the embedding reads `inputs` and only the head reads
// `targets`; the stages in between may leave them empty.
struct TokenBatch {
  Dims dims;
  std::span<const int32_t> inputs;   // [N]
  std::span<const int32_t> targets;  // [N], the next token of each input
  // Mixture of experts: d(objective)/d(a MoE layer's load-balancing loss) for this micro-batch:
  // training.moe_aux_loss_coeff times the weight its loss has in the step's objective (the
  // head's dy); 0 adds no balancing gradient.
  double moe_aux_grad = 0;
};

enum class CacheMode {
  kFull,       // keep every intermediate backward needs
  kInputOnly,  // keep only the unit input (activation recompute); backward re-runs forward first
};

// What one unit's forward leaves for its backward, per micro-batch (the caller keeps one per
// in-flight micro-batch). Buffers unused by a unit kind stay empty. They are the kernel set K's
// vectors: host memory for HostKernels, a device's for a device kernel set.
template <typename Scalar, typename K>
struct UnitCacheT {
  template <typename T>
  using Vec = typename K::template Vec<T>;
  Dims dims;
  bool full = false;             // intermediates present; otherwise backward recomputes them
  bool input_grad_done = false;  // backward_input ran, backward_weight may run
  bool input_grad_partial = false;  // tp > 1: d_a is this rank's part; finish_input_grad completes it
  bool norm_grad_pending = false;   // tp > 1: backward_weight ran before d_a was complete
  int64_t norm_row0 = 0;            // sequence parallelism: the rows [norm_row0, + d_a rows) the norm's
                                    // backward covers (its shard); all rows otherwise
  Vec<int32_t> tokens;   // embedding: inputs; head: targets [N]
  Vec<Scalar> input;     // the unit input x [N, C] (kInputOnly)
  Vec<Scalar> xhat;      // normalised input [N, C]
  Vec<Scalar> rstd;      // 1 / std (or 1 / rms) per row [N]
  Vec<Scalar> a;         // norm output, the first linear's input [N, C]
  Vec<Scalar> qkv;       // attention: q | k | v after RoPE [N, C + 2KV]
  Vec<Scalar> probs;     // attention: softmax [B, H, T, T]; head: softmax [N, V]
  Vec<Scalar> mid;       // attention: head outputs [N, C]; MLP: activation output [N, F]
  Vec<Scalar> pre;       // MLP: gelu input, or swiglu gate [N, F]
  Vec<Scalar> pre2;      // MLP swiglu: up [N, F]
  // Written by backward_input, read by backward_weight:
  Vec<Scalar> d_out;     // dL/d(last linear output): the unit's dy [N, C]; head: dlogits [N, V]
  Vec<Scalar> d_pre;     // attention: dL/d(qkv before RoPE) [N, C + 2KV]; MLP: dL/d(pre) [N, F]
  Vec<Scalar> d_pre2;    // MLP swiglu: dL/d(up) [N, F]
  Vec<Scalar> d_a;       // dL/d(norm output) [N, C]
  Vec<Scalar> lse;       // tp > 1 head: log of the sum of exp(logits) over the whole vocabulary [N]
  // Query and key norms (qk_norm; units_impl.hpp): each norm's input normalised and 1/rms per
  // normalised row (per head, or per token with qk_norm_whole), and d(its output), for the weights
  Vec<Scalar> qn_hat, qn_rstd, kn_hat, kn_rstd, qn_dy, kn_dy;
  // Context parallelism, attention: a2a's q | k | v of this rank's head group over the whole
  // sequence [B·T·cp, (Q + 2KV) / cp]; whether the pass keeps only the input (full recompute).
  Vec<Scalar> cp_qkv;
  bool cp_input_only = false;
  // Mixture of experts (moe_impl.hpp), R = N·k routed copies: `probs` holds the router's softmax
  // [N, E], pre | pre2 | mid | d_pre | d_pre2 the routed experts' [rows received, f], expert-major.
  // Source side (this rank's tokens):
  Vec<int32_t> moe_route;    // the expert of copy n·k + j [R]
  Vec<int32_t> moe_order;    // send order (by expert, stably by copy): row r is copy moe_order[r] [R]
  Vec<int32_t> moe_offsets;  // expert e's rows of the send order [offsets[e], offsets[e + 1]) [E + 1]
  Vec<Scalar> moe_gate;      // the weight of copy n·k + j in the combine [R]
  Vec<Scalar> moe_x;         // the copies' inputs (norm output rows), send order [R, C], until sent
  Vec<Scalar> moe_y;         // the experts' outputs, send order [R, C]
  Vec<Scalar> moe_dy;        // d(expert outputs), send order [R, C], until sent
  // Expert side (the rows this rank's experts receive; ep 1: its own), expert-major:
  Vec<int32_t> moe_eperm;    // expert-major row r is received row moe_eperm[r]
  Vec<int32_t> moe_eoffsets; // local expert e's rows [eoffsets[e], eoffsets[e + 1])
  Vec<Scalar> moe_xe, moe_dye;  // their inputs and d(outputs); pre | pre2 | mid | d_pre | d_pre2 theirs
  Vec<Scalar> moe_dlogits;   // d(router logits) [N, E]
  Vec<Scalar> sh_pre, sh_pre2, sh_mid, sh_out;  // shared experts: their MLP's [N, F_s] and output [N, C]
  Vec<Scalar> sh_gate;       // Qwen2-MoE: sigmoid of the shared gate [N]
  Vec<Scalar> sh_dout, sh_d_pre, sh_d_pre2, sh_dgate;  // their gradients
  double moe_aux_grad = 0;   // TokenBatch::moe_aux_grad of the forward
  double moe_aux_loss = 0;   // the forward's load-balancing loss term (without the coefficient)
  // The balancing loss's routed copies per expert [E] (its own top k of the scores) and the tokens
  // they count: this rank's after the route, the tp·cp group's once the Program's counts
  // all-reduce replaced them (LayerT::set_moe_loss_counts)
  std::vector<double> moe_loss_counts;
  double moe_loss_tokens = 0;

  void release_intermediates();  // keeps tokens and input only
  void clear();                  // releases everything
  // Every buffer's elements, for memory accounting.
  template <typename F>
  void for_each_buffer(F f) const {
    f(tokens);
    for (const Vec<int32_t>* v : {&moe_route, &moe_order, &moe_offsets, &moe_eperm, &moe_eoffsets}) f(*v);
    for (const Vec<Scalar>* v :
         {&input, &xhat, &rstd, &a, &qkv, &probs, &mid, &pre, &pre2, &d_out, &d_pre, &d_pre2, &d_a, &lse, &cp_qkv,
          &moe_gate, &moe_x, &moe_y, &moe_dy, &moe_xe, &moe_dye, &moe_dlogits, &sh_pre, &sh_pre2, &sh_mid, &sh_out,
          &sh_gate, &sh_dout, &sh_d_pre, &sh_d_pre2, &sh_dgate}) {
      f(*v);
    }
  }
};

template <typename Scalar>
using UnitCache = UnitCacheT<Scalar, HostKernels>;

// Offsets of one unit's tensors inside the layout's flat buffer (-1 when absent).
struct LinearSlot {
  int64_t w = -1, b = -1, in = 0, out = 0;
};
// What of a model this executor does not run, one phrase each; empty when it runs the model as
// written (any MLP, norm, head width, bias choice, learned or rotary positions). The simulator models
// all of these; Layer's constructor and `stagecraft run` refuse a model with any of them.
std::vector<std::string> unsupported_features(const spec::Model& m);

struct UnitSlots {
  int64_t norm_w = -1, norm_b = -1;
  int64_t q_norm_w = -1, q_norm_b = -1, k_norm_w = -1, k_norm_b = -1;  // attention's qk_norm
  int64_t window = 0;  // attention: its sliding window (count::attention_keys), 0: the whole sequence
  std::vector<LinearSlot> linears;  // attention: qkv, out; gelu: up, down; swiglu: gate, up, down
  int64_t wte = -1, wpe = -1;       // embedding; the head reads wte when tied
  int64_t lm_head = -1;             // untied head [C x vocab_rows]
  // This tp rank's share (the whole model when tp = 1):
  int64_t tp = 1;
  int64_t heads = 0, kv_heads = 0;  // attention heads
  int64_t ffn = 0;                  // MLP width
  int64_t vocab0 = 0, vocab = 0;    // vocabulary ids [vocab0, vocab0 + vocab) of its table rows / head columns
  int64_t vocab_rows = 0;           // rows of its table (columns of its LM head), padding included
  bool adds_residual = true;        // rank 0 adds the residual, row-parallel biases and wpe (summed once)
  int64_t tp_index = 0;
  // Mixture of experts: the router [C x E]; the routed experts' linears (their stacked tensors:
  // expert e's weight at w + e·in·out, bias at b + e·out), `experts` of them from expert `expert0`,
  // each of width `expert_ffn`; the shared experts' linears (width `shared_ffn`, 0: none) and
  // Qwen2-MoE's shared gate [C x 1].
  int64_t router = -1;
  int64_t router_bias = -1;        // DeepSeek-V3's selection bias [E] (moe.router_bias)
  int64_t router_logit_bias = -1;  // gpt-oss's logit bias [E] (moe.router_logit_bias)
  std::vector<LinearSlot> expert_linears;
  int64_t experts = 0, expert0 = 0, expert_ffn = 0;
  std::vector<LinearSlot> shared_linears;
  int64_t shared_ffn = 0;
  int64_t shared_gate = -1;
};

namespace detail {
// The rows a MoE unit routes among the `rows` it takes: all of them, or with tp > 1 and shared
// experts (their MLP tp-split, so the unit takes the tp group's whole rows, gathered by the
// Program's collective before it) this rank's own 1/tp, rows [row0, row0 + n), the sequence shard
// Megatron-Core's router gets under sequence parallelism.
struct RoutedRows {
  int64_t row0 = 0, n = 0;
};
inline RoutedRows routed_rows(const UnitSlots& s, int64_t rows) {
  if (s.tp > 1 && s.shared_ffn > 0) return {s.tp_index * (rows / s.tp), rows / s.tp};
  return {0, rows};
}
}  // namespace detail

// The sums of exp(z - m) rescaled to the global max M: out[i] = s[i] * exp(m[i] - M[i]), from a
// tp > 1 head's forward output [m | s | t] (3N) and the all-reduced maxima M (N).
template <typename Scalar>
void vocab_parallel_rescale(std::span<const Scalar> local_stats, std::span<const Scalar> global_max,
                            std::span<Scalar> out);

// One unit over the kernel set K (host_kernels.hpp; a device's in executor/cuda). Spans are K's
// memory; TokenBatch ids are host memory, which K copies where it computes.
template <typename Scalar, typename K>
class LayerT {
 public:
  using Cache = UnitCacheT<Scalar, K>;
  // The unit `unit` of `layout` (which must hold it). `params` and `grads` below are whole flat
  // buffers of that layout (layout.size() elements). A tied head uses the layout's one wte, so
  // when unit 0 is in the same layout its gradient receives both contributions. `kernels` must
  // outlive the layer.
  LayerT(const ParamLayout& layout, int64_t unit, K& kernels);

  UnitKind kind() const { return kind_; }
  int64_t unit() const { return unit_; }
  int64_t tp() const { return slots_.tp; }
  int64_t input_size(Dims d) const;   // 0 for the embedding (it reads tokens), else N*C
  int64_t output_size(Dims d) const;  // 1 for the head (the loss; 3N with tp > 1), else N*C
  // tp > 1: whether this unit's backward leaves a partial input gradient for finish_input_grad.
  // A MoE unit (without shared experts) routes its own rows (sequence parallelism): nothing to sum.
  bool reduces_input_grad() const {
    return slots_.tp > 1 && kind_ != UnitKind::kEmbedding && !(kind_ == UnitKind::kMoe && slots_.shared_ffn == 0);
  }

  // y = unit(x). The head writes the mean loss to y[0].
  void forward(const TokenBatch& batch, std::span<const Scalar> params, std::span<const Scalar> x,
               std::span<Scalar> y, Cache& cache, CacheMode mode = CacheMode::kFull) const;
  // Re-runs forward from the cached input so the cache holds every intermediate again.
  void recompute(std::span<const Scalar> params, Cache& cache) const;

  // dx = dL/dx from dy = dL/dy (head: dy = {dL/dloss}); the embedding takes an empty dx. Adds
  // the parameter gradients to `grads`. Equals backward_input followed by backward_weight.
  void backward(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> dx,
                std::span<Scalar> grads, Cache& cache) const;
  // Zero-bubble split: the input gradient now, keeping in `cache` what the weight gradient needs.
  void backward_input(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> dx,
                      Cache& cache) const;
  // Adds the parameter gradients; needs a cache on which backward_input ran. With tp > 1, before
  // finish_input_grad, the norm's weight gradient waits for it.
  void backward_weight(std::span<Scalar> grads, Cache& cache) const;

  // tp > 1 (reduces_input_grad): `d_a` is backward_input's output summed over the tp ranks; writes
  // dx = dL/dx and, if backward_weight already ran, the norm's weight gradient. Returns true when
  // the cache is spent (every gradient of this micro-batch written). Sequence parallelism: `d_a`
  // is rows [row0, row0 + R) of the sum (a reduce-scatter's piece), dx those rows of dL/dx, and the
  // norm's weight gradient that of those rows only (summed over tp once per step).
  bool finish_input_grad(std::span<const Scalar> params, std::span<const Scalar> d_a, std::span<Scalar> dx,
                         std::span<Scalar> grads, Cache& cache, int64_t row0 = 0) const;
  // tp > 1 head: the loss (mean over rows) from the all-reduced [max | sum of exp | target logit]
  // (3N); keeps log(sum exp) per row for backward.
  Scalar finish_loss(std::span<const Scalar> reduced, Cache& cache) const;

  // Context parallelism (dims.cp.size > 1), attention units, host kernels only: a pass in the
  // phases its cp collectives separate (docs/program.md, "Context parallelism"; units in
  // attention_cp_impl.hpp). B sequences, T = dims.seq rows each on this rank, cp ranks, Q | K | V
  // this tp rank's query and K/V widths, W = Q + 2K; "member order": cp blocks, block j for (or
  // from) cp rank j, each [B·T, width]:
  //   all_gather, p2p (K/V gathered, dK/dV reduce-scattered to their owners):
  //     forward   cp_project(x)          -> send: this rank's k | v [B·T, 2K]
  //               cp_attend(gathered)    -> y [B·T, C]           (gathered: member order of k | v)
  //     backward  cp_backward_send(dy)   -> send: k | v again
  //               cp_backward_attend(g)  -> send: dk | dv of the whole sequence in member order
  //               cp_backward_finish(r)  -> dx                   (r: this rank's summed dk | dv)
  //   a2a (Ulysses: the sequence's rows for a group of H/cp heads, and back):
  //     forward   cp_project(x)          -> send: block j = head group j's q | k | v [B·T, W/cp]
  //               cp_attend(received)    -> send: block j = rank j's rows of this head group's output
  //               cp_finish_forward(r)   -> y                    (r: block j = head group j's output)
  //     backward  cp_backward_send(dy)   -> send: block j = head group j's d(out)
  //               cp_backward_attend(r)  -> send: block j = rank j's rows of d(q | k | v), this group
  //               cp_backward_finish(r)  -> dx
  // cp_project takes the unit input (empty: the cache's, for a Recompute) and keeps it for the
  // residual; `input_only` keeps only it once the forward is done (full recompute). The finish
  // leaves dx, or with tp > 1 this rank's part of d(norm output) for finish_input_grad, and adds
  // the parameter gradients unless `input_only` (zero-bubble: backward_weight follows).
  // Elements a phase reads (x, dy or what its collective delivered) and writes (its send buffer, y or dx).
  CpSizes cp_sizes(const Dims& d, CpPhase phase) const;

  // Expert parallelism (ep > 1 in the layout), MoE units, host kernels only: a pass in the phases
  // its all-to-alls over the expert-parallel group separate (moe_impl.hpp has the math). R = N·k
  // routed copies of this rank's N tokens, sorted by expert and so by the rank holding it (rank j
  // of the group holds experts [j·E/ep, (j+1)·E/ep)); "received" rows come from each member in
  // member order, each member's by local expert (`counts` [ep x E/ep] rows):
  //   forward   moe_dispatch(x)             -> send: the copies' inputs [R, C]; expert_counts [E]
  //             moe_experts(received)       -> send back: the experts' outputs, received order
  //             moe_combine(received)       -> y
  //   backward  moe_backward_send(dy)       -> send: d(the experts' outputs) [R, C]
  //             moe_experts_backward(recv)  -> send back: d(their inputs), received order
  //             moe_backward_finish(recv)   -> dx
  // `weights`: the phase adds its weight gradients (the experts', or the router's, shared experts'
  // and norm's); without (zero-bubble), backward_weight adds them all.
  int64_t moe_rows(const Dims& d) const { return detail::routed_rows(slots_, d.rows()).n * model_.moe.top_k; }
  // `recompute` (full recompute): the route again from the input the forward kept (x is ignored),
  // not counted by take_routed.
  void moe_dispatch(const TokenBatch& batch, std::span<const Scalar> params, std::span<const Scalar> x,
                    std::span<Scalar> send, std::span<int64_t> expert_counts, Cache& cache, bool recompute = false) const;
  void moe_experts(std::span<const Scalar> params, std::span<const Scalar> received, std::span<const int64_t> counts,
                   std::span<Scalar> out, Cache& cache) const;
  // `input_only` (a forward under full recompute): keeps only the input (the Recompute pass's).
  void moe_combine(std::span<const Scalar> received, std::span<Scalar> y, Cache& cache, bool input_only = false) const;
  void moe_backward_send(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> send,
                         Cache& cache) const;
  void moe_experts_backward(std::span<const Scalar> params, std::span<const Scalar> received, std::span<Scalar> out,
                            std::span<Scalar> grads, bool weights, Cache& cache) const;
  void moe_backward_finish(std::span<const Scalar> params, std::span<const Scalar> received, std::span<Scalar> dx,
                           std::span<Scalar> grads, bool weights, Cache& cache) const;
  void cp_project(const Dims& d, std::span<const Scalar> params, std::span<const Scalar> x, bool input_only,
                  std::span<Scalar> send, Cache& cache) const;
  void cp_attend(std::span<const Scalar> params, std::span<const Scalar> received, std::span<Scalar> out, Cache& cache) const;
  void cp_finish_forward(std::span<const Scalar> params, std::span<const Scalar> received, std::span<Scalar> y,
                         Cache& cache) const;
  void cp_backward_send(std::span<const Scalar> params, std::span<const Scalar> dy, std::span<Scalar> send,
                        Cache& cache) const;
  void cp_backward_attend(std::span<const Scalar> params, std::span<const Scalar> received, std::span<Scalar> send,
                          Cache& cache) const;
  void cp_backward_finish(std::span<const Scalar> params, std::span<const Scalar> received, std::span<Scalar> dx,
                          std::span<Scalar> grads, bool input_only, Cache& cache) const;

  // Bias-based balancing (moe.router_bias): the copies routed to each of the E experts by this
  // unit's forwards (and dispatches) since the last take — a recompute does not count — and zero
  // them.
  std::vector<int64_t> take_routed() const;

 private:
  void check_buffer(const char* what, std::size_t got, int64_t want) const;
  void count_routed(const Cache& cache) const;
  void check_tokens(std::span<const int32_t> ids, const char* what, int64_t rows) const;

  K* k_;
  spec::Model model_;
  int64_t layout_size_ = 0;
  int64_t unit_ = 0;
  UnitKind kind_ = UnitKind::kEmbedding;
  UnitSlots slots_;
  mutable std::vector<int64_t> routed_;  // take_routed's sums
};

// Bias-based balancing's step (Megatron-Core get_updated_expert_bias; DeepSeek-V3 report §2.1.2):
// with c_e the copies routed to expert e over the step (summed over the ranks that routed them) and
// c̄ their mean, each expert's selection bias moves by u · sign(c̄ − c_e) (0 where c_e = c̄).
std::vector<float> expert_bias_update(std::span<const double> counts, double rate);

// The host oracle: LayerT over the host kernels (stateless, one shared set).
HostKernels& host_kernels();
template <typename Scalar>
class Layer : public LayerT<Scalar, HostKernels> {
 public:
  Layer(const ParamLayout& layout, int64_t unit) : LayerT<Scalar, HostKernels>(layout, unit, host_kernels()) {}
};

extern template class LayerT<float, HostKernels>;
extern template class LayerT<double, HostKernels>;
extern template struct UnitCacheT<float, HostKernels>;
extern template struct UnitCacheT<double, HostKernels>;

}  // namespace stagecraft::executor
