// Communication rules of lowering, in one place for the lowering itself and for the planner's
// bounds (which time candidates without lowering them): the bytes of a pipeline message and of
// a tensor-parallel collective, and which tensor-parallel collectives a unit's pass issues.
// T = tokens of a micro-batch, h hidden, t tp, w bytes per activation element.
//   pipeline message     T·h/t·w: with t > 1 each tp rank sends 1/t of the activation —
//                        sequence-parallel activations are split already; otherwise Megatron-LM's
//                        scatter-gather, the receiver all-gathering the pieces over tp
//                        (Narayanan et al., SC'21, §4.1)
//   tp collective        S = T·h·w, the whole activation (nccl-tests' S)
//   vocab-parallel loss  S = 12·T: Megatron-LM's VocabParallelCrossEntropy all-reduces, per
//                        token, the logits' max, the sum of exponentials and the target logit, in
//                        fp32 — three all-reduces of 4·T bytes, modelled as one of their sum
// Tensor-parallel collectives around one unit's pass (Megatron-LM's f/g operators, Shoeybi et
// al. 2019; with sequence parallelism an all-gather before and a reduce-scatter after instead of
// the all-reduce, Korthikanti et al., MLSys'23):
//   unit        forward (and recompute)            backward (and backward-input)
//   embedding   after: all-reduce (sp: RS)         before: sp AG
//   attention,  before: sp AG;                     before: sp AG;
//   MLP         after: all-reduce (sp: RS)         after: all-reduce (sp: RS)
//   head        before: sp AG; after: the loss's   after: all-reduce (sp: RS)
//               all-reduce
//   MoE         with shared experts as MLP (their   the same
//               tp-split MLP's); without, none
// The weight-gradient pass (zero-bubble W) issues none.
//
// Expert parallelism around a MoE unit's pass (Megatron-Core's alltoall token dispatcher,
// token_dispatcher.py; docs/program.md "Mixture of experts"), ep > 1, T_r = T/t tokens of the rank
// (sequence parallelism), k top-k, h hidden, w bytes:
//   dispatch / combine   S = T_r·k·h·w, the send buffer: each routed copy of a token to its
//                        expert's rank (uniform routing: (ep − 1)/ep of it leaves the rank), and
//                        the experts' outputs back
//   forward (and recompute): compute (norm, router, shared experts, permute) → dispatch → the
//   experts' compute → combine; backward: the combine's gradient → the experts' backward → the
//   dispatch's gradient → the rest's backward. The weight-gradient pass issues none. Not
//   modelled: the routing probabilities' own all-to-all (T_r·k fp32, 2/h of the tokens' bytes) and
//   the token counts' device-to-host copy before each dispatch.
// Expert tensor parallelism, etp > 1 (the same dispatcher: "permute → A2A(EP) → AG(TP) → experts
// → RS(TP) → A2A(EP)", its tp group being the experts' tensor-parallel group, Group::kExpertTp):
//   gather / scatter     S = etp·T_r·k·h·w (nccl-tests' S, the gathered buffer): the routed copies
//                        the rank's all-to-all brought (T_r·k under uniform routing), gathered from
//                        its etp peers before the experts (each computes its 1/etp of every
//                        expert's width for all of them: fc1 by columns, fc2 by rows) and their
//                        partial outputs reduce-scattered back after
//   forward: dispatch → gather → experts → scatter → combine; backward: the combine's gradient →
//   gather (the scatter's gradient) → the experts' backward → scatter (the gather's) → the
//   dispatch's gradient; with ep 1 the same without the all-to-alls.
// The all-gather dispatcher (plan "moe_dispatcher": "allgather", MoEAllGatherTokenDispatcher), over
// the experts' tensor- and expert-parallel group of G = etp·ep ranks (Group::kExpertTpEp), none
// of it routed (every rank gets every token, whatever the routing):
//   gather           S = G·T_r·(h·w + E·w + E): each rank's tokens, their routing probabilities
//                    (w bytes a value: the router's dtype is the model's unless
//                    --moe-router-dtype says otherwise) and routing map (a byte a value), three
//                    all-gathers modelled as one of their sum; the rank then runs its experts' slice
//                    on the rows routed to them
//   scatter          S = G·T_r·h·w: the experts' weighted outputs unpermuted into the group's tokens
//                    (zeros elsewhere) and reduce-scattered back, each rank keeping its tokens
//   forward: compute → gather → experts → scatter; backward: the scatter's gradient gathers
//   d(output) (S = G·T_r·h·w), the experts' backward, the gather's gradient reduce-scatters
//   d(tokens) and d(probabilities) (S = G·T_r·(h + E)·w) → the rest's backward.
// The flex dispatcher (plan "moe_dispatcher": "flex", Megatron-Core's MoEFlexTokenDispatcher with
// DeepEP, token_dispatcher.py _DeepepManager and fused_a2a.py), over the same G = etp·ep ranks
// (Group::kExpertTpEp): the routing map is expanded over the etp ranks of each expert-parallel
// place (each receives the token whole, as etp·k experts out of etp·E), and DeepEP's fused kernels
// move it:
//   dispatch / combine   S = etp·T_r·k·h·w, the routed copies as a plain all-to-all's send buffer
//                        would hold them (nccl-tests' S); the wire carries less — a token once to
//                        each rank holding one of its experts and once over the network to each
//                        node (sim/models/collectives.hpp "Dispatch") — which the simulator counts
//                        from the routing and the placement, not the Program
//   forward: compute → dispatch → experts → combine; backward: the combine's gradient (a
//   dispatch) → the experts' backward → the dispatch's gradient (a combine) → the rest's backward;
//   no gather or scatter over kExpertTp (the etp ranks got the tokens whole), the probabilities
//   travel with the tokens (fp32, T_r·k·4 bytes, not counted: 4/(h·w) of the token's bytes).
// The balancing loss over tp or cp ranks (training moe_aux_loss_coeff > 0, tp·cp > 1;
// Megatron-Core router.py apply_load_balancing_loss, sequence_partition_group = the tp_cp group):
//   counts           S = E·8: each rank's routed copies per expert (loss_routing_map.sum(0), int64)
//                    all-reduced over the tp·cp ranks splitting the micro-batch's tokens
//                    (Group::kTpCp, on the router's stream: lane tp), so each rank's loss term
//                    E/(k·T²)·Σ_e P_e·c_e (T the group's tokens, P_e its own probability sums) adds
//                    up to the micro-batch's loss
//   after the route of each MoE unit's forward whose activations the backward uses: the forward
//   without full recompute, the Recompute with it (Megatron-Core skips the loss under no_grad(),
//   its checkpointed forward); before the dispatch.
//
// Context parallelism around an attention unit's pass (docs/program.md, "Context parallelism";
// Megatron-Core context_parallel.md and Transformer Engine's context_parallel.py, its
// AttnFuncWithCPAndKVP2P, AttnFuncWithCPAndKVAllGather, AttnFuncWithCPAndQKVOA2A). T = a rank's
// tokens of the micro-batch (micro_batch·seq_len/cp), d head_dim, q = heads/t and k = kv_heads/t
// (at least 1: a tp rank short of a K/V head keeps a copy) heads of the tp rank, w bytes:
//   K/V gather     S = cp·T·2k·d·w, each rank's K and V to every other (nccl-tests' S, the gathered
//                  output): the ring passes cp−1 chunks of T·2k·d·w, what an all-gather moves
//   dK/dV reduce   S = cp·T·2k·d·w, each chunk's gradient summed back to its owner
//   a2a Q,K,V      S = T·(q + 2k)·d·w, the send buffer; a2a output S = T·q·d·w
//   comm type   forward (and recompute)              backward (and backward-input)
//   p2p         beside: K/V gather                   beside: K/V gather, then dK/dV reduce
//   all_gather  before: K/V gather                   before: K/V gather; after: dK/dV reduce
//   a2a         before: a2a Q,K,V; after: a2a out    before: a2a d(out); after: a2a dQ,dK,dV
// "beside": the ring runs on its own lane while the attention computes; what follows the unit
// waits for both (TE overlaps each pass with the block of attention it feeds). The backward
// re-gathers K/V, as TE's do (neither saves the gathered K/V). The weight-gradient pass issues none.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/program/instruction.hpp"
#include "core/program/units.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::program {

// The gradient-norm all-reduce after the last backward: one fp32 sum of squares per rank.
inline constexpr int64_t kGradNormBytes = 4;
// DeepSeek-V3's bias-based balancing (model moe.router_bias): each step every MoE layer's routed
// tokens per expert, summed over the ranks that routed them, move its expert biases (the executor's
// update: docs/program.md). Megatron-Core all-reduces them over each stage's tp·dp·cp ranks in
// finalize_model_grads (_update_router_expert_bias) as the step's gradients are finished; the
// Program carries them, 4 bytes a count, in the gradient norm's all-reduce over the world — the same
// sums, since a layer's counts are zero on every other stage — L_moe · E more values on it.
inline int64_t router_bias_counts(const spec::Model& m) {
  if (!m.moe.on() || !m.moe.router_bias) return 0;
  int64_t layers = 0;
  for (int64_t l = 0; l < m.layers; ++l) layers += m.moe_layer(l);
  return layers * m.moe.experts;
}
inline constexpr int64_t kVocabParallelLossBytesPerToken = 12;

inline int64_t p2p_message_bytes(int64_t tokens, int64_t hidden, int64_t tp, int64_t activation_bytes) {
  return tokens * hidden / tp * activation_bytes;
}
inline int64_t tp_collective_bytes(int64_t tokens, int64_t hidden, int64_t activation_bytes) {
  return tokens * hidden * activation_bytes;
}
// One dispatch (or combine) all-to-all's send buffer S (above).
inline int64_t moe_a2a_bytes(int64_t tokens, const spec::Model& m, int64_t tp, int64_t activation_bytes) {
  return m.moe.on() ? tokens / tp * m.moe.top_k * m.hidden * activation_bytes : 0;
}
struct MoeAllGatherBytes {
  int64_t gather = 0, scatter = 0, grad_gather = 0, grad_scatter = 0;
};
// The all-gather dispatcher's four S (above) over G = etp·ep ranks; zeros with G = 1.
inline MoeAllGatherBytes moe_allgather_bytes(int64_t tokens, const spec::Model& m, int64_t tp, int64_t group, int64_t w) {
  if (!m.moe.on() || group <= 1) return {};
  const int64_t rows = group * (tokens / tp), h = m.hidden, E = m.moe.experts;
  return {rows * (h * w + E * w + E), rows * h * w, rows * h * w, rows * (h + E) * w};
}
// The balancing loss's counts all-reduce S (above); 0 when the Program issues none (no experts, no
// loss, tp·cp = 1, or a forward-only Program).
inline int64_t moe_aux_counts_bytes(const spec::Model& m, const spec::Training& t, int64_t tp, int64_t cp, bool forward_only) {
  return m.moe.on() && t.moe_aux_loss_coeff > 0 && tp * cp > 1 && !forward_only ? m.moe.experts * 8 : 0;
}
// One expert tensor-parallel all-gather (or reduce-scatter)'s S (above); 0 without etp.
inline int64_t moe_etp_bytes(int64_t tokens, const spec::Model& m, int64_t tp, int64_t etp, int64_t activation_bytes) {
  return etp > 1 ? etp * moe_a2a_bytes(tokens, m, tp, activation_bytes) : 0;
}
// The flex dispatcher's dispatch (or combine) S (above) over G = etp·ep > 1 ranks; 0 with G = 1.
inline int64_t moe_flex_bytes(int64_t tokens, const spec::Model& m, int64_t tp, int64_t ep, int64_t etp, int64_t activation_bytes) {
  return ep * etp > 1 ? etp * moe_a2a_bytes(tokens, m, tp, activation_bytes) : 0;
}
// Scatter-gather: a received activation (or gradient) is all-gathered over tp before use.
inline bool gathers_received_message(int64_t tp, bool sequence_parallel) { return tp > 1 && !sequence_parallel; }

struct TpCollective {
  Op op = Op::kTpAllReduce;
  int64_t bytes = 0;
};
struct TpAround {
  std::optional<TpCollective> before, after;
};
// The collectives a pass `op` (Forward, Recompute, Backward, BackwardInput, BackwardWeight) of a
// unit of `kind` issues when tp > 1.
// `shared_experts`: a MoE unit has shared experts (their MLP is tp-split).
TpAround tp_collectives(UnitKind kind, Op op, bool sequence_parallel, int64_t tokens, int64_t hidden,
                        int64_t activation_bytes, bool shared_experts = false);

// One context-parallel collective: CpAllGather, CpReduceScatter or AllToAll over Group::kCp.
struct CpCollective {
  Op op = Op::kCpAllGather;
  int64_t bytes = 0;
};
struct CpAround {
  std::vector<CpCollective> before, beside, after;
};
// Bytes per token of a tp rank's attention tensors: K and V (2k·d·w), Q, K and V ((q + 2k)·d·w)
// and the attention output (q·d·w); see above.
struct CpShapes {
  int64_t kv = 0, qkv = 0, out = 0;
};
CpShapes cp_shapes(const spec::Model& m, int64_t tp, int64_t activation_bytes);
// The collectives a pass `op` of a unit of `kind` issues when cp > 1 (none but attention's).
CpAround cp_collectives(UnitKind kind, Op op, spec::CpComm comm, int64_t cp, int64_t tokens, const CpShapes& shapes);

}  // namespace stagecraft::program
