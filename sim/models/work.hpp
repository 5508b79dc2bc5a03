// Work: what a compute instruction does, as amounts — the GEMMs it runs (FLOPs of one GEMM and
// how many of that size), the bytes its memory-bound kernels move, the elements its activation
// function is evaluated on and the parameters an optimizer step updates. WorkModel says how much
// of each a unit's passes do; work_seconds turns an amount into time with a GPU profile's rates
// (SimGrid's split between an action's amount and a resource's speed). The simulator's compute
// model (compute.hpp) times instructions with it, and calibration (traces/calibrate) fits the
// rates on the same amounts, so the model exists once.
//
//   t(work) = Σ_g count_g · F_g / (peak[dtype] · eff(F_g))  +  B_mem / (hbm_Bps · memory_efficiency)
//             + Σ_k B_k / (hbm_Bps · e_k)
//             + N_act / activation_elems_per_s  +  P_adam / gpu.adam_params_per_s
// (each of the last two only where the profile sets its rate).
// * Memory kinds: the bytes B_k of kernels that run below the contiguous rate, each at the
//   profile's gpu.memory_kernels fraction e_k of hbm_Bps (memory_efficiency where the profile
//   gives none): kStrided — PyTorch TensorIterator's non-vectorised path, i.e. copies of permuted
//   tensors (the head-major q, k, v torch.matmul folds; the attention context copied back to the
//   token layout), products with a broadcast operand (an eager RMSNorm's x·rsqrt and ·weight; the
//   cross-entropy's subtract of the row max, divide by the row sum and its backward scale) and a
//   broadcast mask's masked_fill or add; kDropout — dropout's forward; kSoftmax — the row softmax's
//   forward (Megatron-LM's fused scale-mask-softmax is PyTorch's warp softmax adapted), e_k by row
//   length, log2-linear between points. Their backward kernels (softmax's, a masked scale for
//   dropout) are contiguous; strided passes stay strided backward. Measured on an H200 (Nsight
//   Compute DRAM bytes over kernel time, configs/validation/h200-layers.json): strided 0.30 of the
//   HBM rate (0.12-0.73 per kernel), dropout 0.62, softmax 0.57 at 512 columns and 0.30 at 2048,
//   against 0.87 for contiguous elementwise kernels. dtype casts (0.39) and layer norms (0.62
//   forward) are left contiguous.
//
// * GEMMs: each unit's linear layers on one tp rank (count::block_linears split by count::shard), F_g = 2·tokens·k·n per
//   GEMM for forward, the same again for the input gradient and for the weight gradient. The
//   attention scores are batched GEMMs per head: QKᵀ and softmax·V, 2·b·s²·d FLOPs each per
//   head, heads/t of them; their efficiency is looked up at one head's size 2·s²·d.
// * eff(F): the cluster's matmul_efficiency points (FLOPs of one GEMM → fraction of peak),
//   interpolated linearly in log10(F) and held flat outside the first and last points
//   (knot_weights: the one interpolation, which calibration also fits through).
// * Memory-bound work: the bytes the non-GEMM kernels of a Megatron-style layer read and write
//   per token on one tp rank (16-bit elements, 1-byte dropout masks; a_r = heads/t, f_r = f/t,
//   h_r = h/t with sequence parallelism, else h):
//     attention  layer norm 4h_r (read, write) + scale-mask-softmax 4·a_r·s + dropout on the
//                probabilities 5·a_r·s + bias-dropout-residual 7h_r      = 11h_r + 9·a_r·s
//     MLP        layer norm 4h_r + bias-GeLU 4·f_r (gated, SwiGLU/GeGLU: read gate and up, write 6·f_r)
//                + bias-dropout-residual 7h_r                            = 11h_r + 4·f_r
//     embedding  lookup 4h_r;  head: final norm 4h_r + the cross-entropy over the V/t logits of
//                the rank, as Megatron-LM computes it (on the logits cast to fp32, one kernel per
//                op: cast, max, subtract, exp, sum, divide): 38·V/t forward and 14·V/t backward,
//                not twice the forward (work.cpp loss_bytes derives both; eager, PyTorch's
//                F.cross_entropy on the fp32 logits, 22·V/t and 26·V/t; fp32 training drops the casts)
//   With "kernels": "eager" (training.json; PyTorch ops one at a time, as minGPT's
//   CausalSelfAttention/Block and Hugging Face's BertSelfAttention/SelfOutput/Intermediate/Output
//   run them): the scores' scale and mask are passes of their own (+4·a_r·s each), dropout and the
//   residual add are apart (5 + 6 instead of 7, per block output), the attention context is copied
//   back from the head layout (+4h_r), and SwiGLU's SiLU and product are apart (4 + 6 instead of 6):
//     attention  19h_r + 17·a_r·s      MLP  15h_r + 4·f_r (SwiGLU 10·f_r)
//   (under a fused attention kernel the context is written in the token layout: 15h_r). The
//   model's own layers add, eager, what Llama-style code runs as PyTorch ops (Meta's reference
//   model, Hugging Face's Llama family, torchtitan, ibm-fms; work.cpp derives each count, bytes per
//   token, fp32 training in brackets): an RMSNorm in fp32 ops, 36h_r per norm (28h_r) against the
//   fused 4h_r (a LayerNorm stays one kernel); q/k RMSNorms, 36 (28) per element of q and k;
//   rotary embeddings, 20 (8) per rotated element of q and k, +4 (8) for the cat of a partial
//   rotation; grouped-query K and V repeated to every head, 4 (8)·(q + kv); unfused, the copies
//   torch.matmul makes of the head-major q, k and v, 4 (8) per element. Dropout is charged as
//   minGPT and Hugging Face's BERT run it; code without dropout (Llama) skips it (at::dropout
//   returns its input at p = 0), about 10h of a Llama layer's eager forward bytes too many.
//   Backward moves twice the forward bytes (saved input and incoming gradient read, gradient
//   written), of the same kinds except softmax and dropout (above). fp32 training doubles the bytes.
// * The gradient pass: what the framework does with a backward's weight gradients before it reduces
//   them or keeps them for the step — Megatron-LM's fused accumulation into fp32 main_grad (8 bytes
//   per parameter), its 2021 hook or autograd's AccumulateGrad, DeepSpeed's copy into the reduce
//   bucket, FSDP's flat gradient — G bytes per parameter of the unit, averaged over the step's
//   micro-batches: spec::grad_pass_bytes (core/spec/framework.hpp derives each from the
//   framework's code). The scores' part (9·a_r·s) is what selective recompute re-runs with the
//   two score GEMMs.
// * Activation function: the MLP's GELU (tanh form, one tanh per element) or SwiGLU (one sigmoid
//   per element) runs on N_act = T·f_r elements in a MLP unit's forward and again in its input
//   gradient (the derivative needs tanh, or the sigmoid, of the same input); 0 in other units and
//   in the weight gradient. Its bytes are in the memory-bound term; where the function's
//   arithmetic bounds it instead — a CPU core calling libm's tanhf per element, ~20 ns against
//   ~1 ns for the element's bytes on a 2.3 GHz Xeon core — the profile's activation_elems_per_s
//   adds N_act / activation_elems_per_s. Softmax and cross-entropy exponentials are not counted:
//   vectorised (Eigen's exp in the CPU executor) or fused, they stay near their bytes' time.
// * Optimizer on the GPU: the framework's step moves O bytes per parameter it updates —
//   spec::optimizer_step_bytes (core/spec/framework.hpp derives each from the framework's code:
//   the fused Adam's 28 with an fp32 gradient, and Megatron-LM's norm, fp32 → 16-bit copy and
//   gradient-buffer clear around it) — and P_adam = the parameters it updates; where
//   its arithmetic (a square root and a division per parameter) bounds it instead — a CPU core,
//   ~3.5 ns per parameter against ~1 ns of bytes — gpu.adam_params_per_s adds P / rate.
// * The arithmetic terms add to the bytes' time rather than overlapping it: right where one of the
//   two dominates, at most the smaller one too long elsewhere. GPUs evaluate tanh, exp, square roots
//   and reciprocals in special-function units well above HBM rate (16 per SM per clock on sm_80 and
//   sm_90, CUDA C++ Programming Guide, arithmetic instruction throughput), so GPU profiles leave
//   both rates unset and the terms are 0.
// * Attention, "attention": "flash" (training.json, the default; or a kernel the GPU profile
//   names): one fused kernel per pass, FlashAttention's tiling (Dao et al. 2022; FlashAttention-2,
//   Dao 2023; FlashAttention-3, Shah et al. 2024; cuDNN's SDPA), so no score matrix is written or
//   read: the 9·a_r·s (eager 17·a_r·s) score bytes are gone. Its FLOPs are the kernels' own
//   convention: forward 4·s²·d per head halved by the causal mask (blocks above the diagonal are
//   skipped) = 2·b·a_r·s²·d, backward 2.5x forward (it recomputes QKᵀ and runs four more matmuls
//   of the same size) = 5·b·a_r·s²·d; each at the fraction of peak the profile's kernel reaches
//   at sequence length s (gpu.attention_kernels, measured at head width 128, interpolated in
//   log2 s), times the kernel's "sustained" share c (1 unless the profile says its table was
//   measured at a clock that training's power limit does not hold):
//   t = F_fwd / (peak · c · e_fwd(s)) + F_bwd / (peak · c · e_bwd(s)).
//   Selective recompute re-runs the forward kernel in the backward. "attention": "unfused" keeps
//   the score GEMMs and bytes below (runs before 2022; the CPU executor).
// * FP8 ("dtype": "fp8", Transformer Engine's recipe as Megatron-LM and NeMo run it: the block's
//   linear layers — QKV, attention output, the MLP's — in FP8, E4M3 forward and E5M2 gradients; the
//   LM head, attention itself and every other kernel in bf16): the block GEMMs run at the FP8 peak
//   (gemm_rate above). Each FP8 GEMM adds the casts TE runs around it, memory-bound bytes per
//   element (T tokens, k its input width, n its output width on the rank, W its weight elements,
//   m micro-batches a step):
//     forward, input fed by a norm (QKV; fc1, or gate and up, one shared input): the norm writes
//       the FP8 copy (1 byte instead of 2) and a transpose pass reads and writes it (1 + 1): +1·T·k
//       once per shared input;
//     forward, other inputs (attention output, fc2): cast and transpose, read 2 write 1 + 1: +4·T·k;
//     backward, the output gradient: cast and transpose, +4·T·n;
//     weights: cast and transpose once a step (cached over micro-batches): 4·W, a share 4·W/m in
//       each micro-batch's forward.
//   The tensor-parallel collectives stay 16-bit (TE can all-gather FP8 under sequence parallelism,
//   which would halve those; not modelled).
// Per unit (T tokens of a micro-batch, h hidden, t tp, s sequence, d head size, kv_r = kv_heads/t
// or 1, V vocab; w = 2 for fp32 elements, else 1):
//   attention  GEMMs 2Th(q/t + 2·kv_r·d), 2T(q/t)h; unfused: scores 2·b·a_r GEMMs of 2s²d and
//              bytes w·T·11h_r + w·9·a_r·s·T; flash: the kernel above and bytes w·T·11h_r
//   MLP        GEMMs 2Thf_r (×2 with SwiGLU), 2Tf_r h; bytes w·T·(11h_r + 4f_r or 6f_r);
//              activation T·f_r elements
//   embedding  bytes w·T·4h_r;   head  GEMM 2Th⌈V/t⌉; bytes w·T·4h_r + T·38⌈V/t⌉ (backward T·14⌈V/t⌉)
//   MoE        (a MoE layer's MLP unit; T_r = T/t tokens the rank routes, sequence parallelism;
//              n_e = T_r·k·ep·etp/E tokens each of its E/ep experts computes on average, over
//              f_e/etp of its width with expert tensor parallelism)
//              router GEMM 2·T_r·h·E (16-bit); shared experts' GEMMs as the MLP's at width f_s;
//              the routed experts' grouped GEMMs: E/ep GEMMs of 2·n_e·h·f_e/etp per linear (gate
//              and up, down), each at the efficiency of its own size (grouped GEMM at the
//              per-expert token count); the all-gather dispatcher's unpermute writes the
//              group's G·T_r tokens, w·G·h bytes per token of the rank (G = etp·ep); bytes w·T·(11h_r + shared 6f_s/t or 4f_s/t) + per routed
//              token: router scores 16E (fp32 logits read, softmax written and read, top-k),
//              permute and unpermute 2·2h(k + 1)/k·w, the experts' activation 6f_e or 4f_e·w;
//              activation T_r·k·f_e (+ T·f_s/t) elements. The experts' part (their GEMMs, bytes
//              and activation) is also kept apart (UnitWork::experts_*): with ep > 1 the
//              Program computes it as an instruction of its own (kFlagExperts).
//   forward = GEMMs + scores + bytes + activation;
//   backward input = GEMMs + 2·scores + 2·bytes + activation;
//   backward weight = GEMMs + params·G bytes (the gradient pass);
//   selective recompute adds scores + score bytes to Backward and BackwardInput.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "core/program/instruction.hpp"
#include "core/program/units.hpp"
#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::sim {

struct Gemm {
  double flops = 0;   // FLOPs of one GEMM
  double count = 0;   // how many of them
  bool fp8 = false;   // operands in FP8 (fp8 training's block GEMMs): timed at the FP8 peak
};

// Memory-bound kernels whose rate differs from a contiguous elementwise pass's (the GPU profile's
// memory_kernels; equation above).
enum class MemKind : uint8_t { kStrided, kSoftmax, kDropout };
inline constexpr MemKind kAllMemKinds[] = {MemKind::kStrided, MemKind::kSoftmax, MemKind::kDropout};
inline constexpr std::size_t kMemKinds = std::size(kAllMemKinds);

struct Work {
  std::vector<Gemm> gemms;     // one entry per distinct size, in the order first added
  double memory_bytes = 0;     // contiguous elementwise passes (and everything not of a kind below)
  std::array<double, kMemKinds> kind_bytes{};  // bytes of each MemKind
  double softmax_row = 0;      // row length of the softmax bytes (every unit's scores have the same)
  double activation_elems = 0; // elements the MLP's activation function is evaluated on
  double adam_params = 0;      // parameters the optimizer updates on the GPU
  // Fused attention kernels (flash): their FLOPs, forward and backward passes, at sequence length
  // attention_seq (every unit of a model runs at the same length).
  double attention_fwd_flops = 0;
  double attention_bwd_flops = 0;
  double attention_seq = 0;

  void add_gemm(double flops, double count, bool fp8 = false);
  void add_bytes(MemKind kind, double bytes) { kind_bytes[static_cast<std::size_t>(kind)] += bytes; }
  double kind(MemKind k) const { return kind_bytes[static_cast<std::size_t>(k)]; }
  double total_bytes() const;  // memory_bytes and every kind's
  void add(const Work& other, double scale = 1.0);
};

// eff(F) = w0 · e[k0] + w1 · e[k1]: the two knots of `points` (FLOPs → fraction of peak) a GEMM
// of F FLOPs interpolates between, linearly in log10(F); one knot with weight 1 outside them.
struct KnotWeights {
  std::size_t k0 = 0, k1 = 0;
  double w0 = 1, w1 = 0;
};
KnotWeights knot_weights(const std::vector<std::pair<double, double>>& points, double flops);
// Fraction of peak for a GEMM of `flops` FLOPs; throws std::invalid_argument without points.
double matmul_efficiency(const std::vector<std::pair<double, double>>& points, double flops);

// Where an FP8 GEMM of F FLOPs sits on the 16-bit curve: the GPU's FP8 peak p8 runs it r = p8/p
// times faster than its 16-bit peak p, so its ideal time equals a 16-bit GEMM's of F/r FLOPs, and it
// reaches that GEMM's fraction of peak (the curve measures how far fixed per-kernel costs and tile
// quantisation keep a GEMM of a given ideal time from its peak):
//   t = F / (p8 · eff(F / r)).
// `curve_flops` is F/r, `peak` p8 (for a 16-bit GEMM: F and p).
struct GemmRate {
  double peak = 0;
  double curve_flops = 0;
};
// `fp8_peak` 0: no FP8 peak known (an FP8 GEMM then throws std::logic_error).
GemmRate gemm_rate(const Gemm& g, double peak_flops, double fp8_peak);

// Turns work into seconds on one GPU (the equation above), its GEMMs at `peak_flops` (the
// training's 16-bit or fp32 peak) and FP8 GEMMs as gemm_rate says. It remembers eff(F) of the sizes
// it has seen: a model has a handful of GEMM sizes, repeated in every layer.
class WorkTimer {
 public:
  // `attention`: the fused attention kernel flash work runs on (attention_kernel()); nullptr when
  // the training runs attention unfused (timing flash work then is a logic error). The FP8 peak is
  // the profile's peak_flops.fp8, when it has one.
  WorkTimer(const spec::Gpu& gpu, double peak_flops, const spec::AttentionKernel* attention = nullptr);
  double seconds(const Work& w);

 private:
  double efficiency(double flops);
  const spec::Gpu& gpu_;
  double peak_;
  double fp8_peak_ = 0;
  const spec::AttentionKernel* attention_;
  std::vector<std::pair<double, double>> seen_;  // (FLOPs of one GEMM, eff)
};

// Fraction of hbm_Bps memory-bound kernels of `kind` reach on `gpu` (its memory_kernels, else
// memory_efficiency); a softmax's at row length `softmax_row`, log2-linear between the points.
double memory_kind_efficiency(const spec::Gpu& gpu, MemKind kind, double softmax_row);
// Whether `gpu`'s profile gives `kind` a rate of its own (else it runs at memory_efficiency).
bool has_kind_rate(const spec::Gpu& gpu, MemKind kind);
// Seconds of w's memory-bound bytes on `gpu`: memory_bytes at memory_efficiency, each kind at its own.
double memory_seconds(const Work& w, const spec::Gpu& gpu);
// The part of memory_seconds whose kernels stream at memory_efficiency, the HBM-bound rate (the
// kinds with a rate of their own are bound by bytes in flight per SM and issue, not by HBM).
double streaming_seconds(const Work& w, const spec::Gpu& gpu);

// The time of `w` (seconds) on `gpu`: WorkTimer(gpu, peak_flops).seconds(w).
double work_seconds(const Work& w, const spec::Gpu& gpu, double peak_flops);

// The fused attention kernel a training runs on this cluster's GPU: nullptr for "unfused", the
// profile's default for "flash", else the kernel of that name. Throws SpecError naming the cluster
// file (no kernels listed) or the training file's /attention (a name the GPU does not list).
const spec::AttentionKernel* attention_kernel(const spec::Cluster& cluster, const spec::Training& training);
// The training as it runs on this cluster: "flash" becomes "unfused" on a device whose profile says
// it has no fused kernel ("default": "unfused"); the same errors as attention_kernel.
spec::Training effective_training(const spec::Training& training, const spec::Cluster& cluster);
// Fraction of peak of one pass of `kernel` at sequence length `seq` (log2-linear between points).
double attention_efficiency(const std::vector<std::pair<double, double>>& points, double seq);
// The seconds of w's fused attention work alone on `kernel` at `peak_flops` (0 without any).
double attention_seconds(const Work& w, const spec::AttentionKernel* kernel, double peak_flops);

// The linears' GEMMs of one micro-batch on one tp rank of a unit of `kind`: the row-parallel ones
// (attention output; fc2) when `row`, else the column-parallel ones (QKV; fc1, or gate and up; the
// head's logits GEMM); none for the embedding. What TP communication overlap runs beside its
// collectives (tp_overlap.hpp).
Work block_linear_gemms(const spec::Model& m, const spec::Training& training, const spec::Plan& p, program::UnitKind kind,
                        bool row);

// The amounts of every unit's passes for one (model, training, plan).
class WorkModel {
 public:
  WorkModel(const spec::Model& model, const spec::Training& training, const spec::Plan& plan);

  struct UnitWork {
    Work forward, backward_input, backward_weight, score_forward;
    // a MoE unit's routed experts' share of forward, backward_input and backward_weight (above)
    Work experts_forward, experts_backward_input, experts_backward_weight;
  };
  // Units of one kind with the same parameters do the same work (every block of a model):
  // unit u's is distinct()[distinct_of(u)].
  const std::vector<UnitWork>& distinct() const { return distinct_; }
  int32_t distinct_of(int32_t unit) const { return distinct_of_[static_cast<std::size_t>(unit)]; }
  int32_t unit_count() const { return static_cast<int32_t>(distinct_of_.size()); }
  const UnitWork& unit(int32_t u) const { return distinct_[static_cast<std::size_t>(distinct_of(u))]; }
  // Any compute op (Forward, Backward, BackwardInput, BackwardWeight, Recompute) over units [begin, end).
  Work compute(program::Op op, int32_t unit_begin, int32_t unit_end) const;
  Work optimizer_gpu(int64_t elems) const;
  bool selective() const { return selective_; }

 private:
  std::vector<UnitWork> distinct_;
  std::vector<int32_t> distinct_of_;   // per unit
  bool selective_ = false;
  double optimizer_bytes_ = 0;   // per parameter the step updates (spec::optimizer_step_bytes)
};

}  // namespace stagecraft::sim
