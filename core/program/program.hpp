// Program: a plan lowered to instructions — for every rank, the ordered instructions of one
// training step. Ranks with identical instruction lists (the tp and dp peers of a pipeline stage)
// share one RoleProgram, so a 1024-GPU plan stores one list per stage, not per GPU; `rank(r)`
// gives any rank its list. Instruction ids are stable: role.first_id + index.
#pragma once

#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/program/graph.hpp"
#include "core/program/instruction.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::program {

// Rank layout, Megatron's order: tp fastest, then cp, then dp, then pp.
//   rank = (stage * dp + dp_index) * tp + tp_index
// where, with context parallelism, `dp` counts the dp·cp ranks of a stage and tp index and
// dp_index = batch replica · cp + cp index: the data-parallel group (kDp) is the dp·cp ranks
// gradients are reduced over, and kCp the cp consecutive ones splitting one sequence.
struct Placement {
  int64_t tp = 1, pp = 1, dp = 1;
  // Data-parallel subgroups (instruction.hpp, Group): the shard group's size g (spec::ZeroConfig
  // shard_group, or hpz_group; dp when neither) and a node's data-parallel ranks l (local_group;
  // dp when not given).
  int64_t inner = 0, local = 0;
  int64_t cp = 1;   // context-parallel ranks splitting a sequence (dp includes them)
  int64_t ep = 1;   // expert-parallel ranks (instruction.hpp, Group::kEp)
  int64_t etp = 1;  // expert tensor-parallel ranks (Group::kExpertTp): one expert's FFN split over them
  // Whether the routed experts' data-parallel group (Group::kExpertDp, spec::Plan::expert_dp) is not
  // the dense one, so their gradients are reduced over it apart (a model with experts only).
  bool experts_apart = false;
  // Whether MoE units sum their balancing loss's token counts over Group::kTpCp (comm_rules.hpp,
  // moe_aux_counts_bytes: a model with experts, training with a balancing loss, tp·cp > 1).
  bool moe_counts = false;
  int64_t inner_size() const { return inner > 0 ? inner : dp; }
  int64_t local_size() const { return local > 0 ? local : dp; }

  int64_t world() const { return tp * pp * dp; }
  int64_t rank(int64_t stage, int64_t dp_index, int64_t tp_index) const { return (stage * dp + dp_index) * tp + tp_index; }
  int64_t stage_of(int64_t rank) const { return rank / (tp * dp); }
  int64_t dp_index_of(int64_t rank) const { return (rank / tp) % dp; }
  int64_t tp_index_of(int64_t rank) const { return rank % tp; }
  int64_t cp_index_of(int64_t rank) const { return dp_index_of(rank) % cp; }
  int64_t batch_index_of(int64_t rank) const { return dp_index_of(rank) / cp; }   // the batch replica
  // Expert parallelism: with l = dp_index · tp + tp_index the rank's place in its stage, its
  // position in the expert grid etp × ep × edp, etp fastest (instruction.hpp, Group): in its
  // experts' tensor-parallel group (Group::kExpertTp), its expert-parallel group (Group::kEp) and
  // its experts' data-parallel group (Group::kExpertDp).
  int64_t stage_place_of(int64_t rank) const { return dp_index_of(rank) * tp + tp_index_of(rank); }
  int64_t etp_index_of(int64_t rank) const { return stage_place_of(rank) % etp; }
  int64_t ep_index_of(int64_t rank) const { return stage_place_of(rank) / etp % ep; }
  int64_t expert_dp_index_of(int64_t rank) const { return stage_place_of(rank) / (etp * ep); }
  // Ranks of the group of `kind` that contains `rank`.
  std::vector<int64_t> group_members(Group kind, int64_t rank) const;
};

// A pipeline message's identity: who sends it to whom, an activation or a gradient, its
// micro-batch and the sender's chunk. A send and the receive that takes it have the same key.
struct MessageKey {
  int64_t src = 0, dst = 0;
  int32_t mb = -1;
  int16_t src_chunk = -1;
  bool grad = false;
  auto operator<=>(const MessageKey&) const = default;
};
struct MessageKeyHash {
  std::size_t operator()(const MessageKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.src) * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint64_t>(k.dst) + 0x7F4A7C159E3779B9ull + (h << 6) + (h >> 2);
    h ^= (static_cast<uint64_t>(static_cast<uint32_t>(k.mb)) << 17) ^ (static_cast<uint64_t>(static_cast<uint16_t>(k.src_chunk)) << 1) ^
         static_cast<uint64_t>(k.grad);
    return static_cast<std::size_t>(h * 0xBF58476D1CE4E5B9ull);
  }
};
// The message a send or receive instruction of `rank` moves; its peer has the same tp and dp
// coordinates on stage peer_stage.
MessageKey message_of(const Placement& placement, int64_t rank, const Instr& in);

// A model chunk placed on a stage: the units it covers.
struct ChunkInfo {
  int32_t stage = 0;
  int32_t chunk = 0;         // virtual chunk index on its stage
  int32_t unit_begin = 0;    // [unit_begin, unit_end)
  int32_t unit_end = 0;
  int64_t params = 0;        // parameters held per tp rank (incl. a tied head's embedding copy)
  int64_t expert_params = 0; // of which routed experts' reduced over their own group (Bucket::experts)
};

// A ZeRO bucket: consecutive units of one chunk whose parameters (or gradients) move together.
struct Bucket {
  int32_t stage = 0;
  int32_t chunk = 0;
  int32_t unit_begin = 0;
  int32_t unit_end = 0;
  int64_t elems = 0;             // elements moved per tp rank (gathered params / reduced grads)
  int64_t persistent_elems = 0;  // ZeRO-3: elements kept whole (below param_persistence_threshold)
  int32_t collectives = 1;       // collectives the framework issues for it (zero.hpp), 0 if nothing gathered
  int64_t coalesced_elems = 0;   // ZeRO-3: elements gathered in collectives of two or more tensors (zero.hpp)
  // qgZ (zero.hpp): the matrices a gradient bucket all-to-alls, their elements and Σ max(d, W)
  // groups, and the tensors it reduce-scatters one by one instead (its fallbacks)
  int32_t qgz_matrices = 0;
  int64_t qgz_elems = 0;
  int64_t qgz_groups = 0;
  int32_t qgz_fallbacks = 0;
  // routed experts' parameters, reduced and gathered over Group::kExpertDp (zero.hpp)
  bool experts = false;
};

struct RoleProgram {
  int32_t stage = 0;
  int32_t first_id = 0;
  std::vector<Instr> instrs;
  std::vector<int32_t> deps;     // local instruction indices, ranges referenced by Instr
  std::vector<int64_t> ranks;    // the ranks that run this list
  RoleGraph graph;               // successors and predecessor counts (graph.hpp), built by lower()

  std::span<const int32_t> deps_of(const Instr& i) const {
    return {deps.data() + i.dep_begin, static_cast<std::size_t>(i.dep_count)};
  }
};

struct Program {
  spec::Model model;
  spec::Training training;
  spec::Plan plan;                  // after defaults: stage_layers always filled
  Placement placement;
  std::vector<ChunkInfo> chunks;    // stage-major: chunks[stage * v + chunk]
  std::vector<Bucket> param_buckets;
  std::vector<Bucket> grad_buckets;
  std::vector<RoleProgram> roles;
  std::vector<int32_t> rank_role;   // world entries
  int64_t param_bytes = 2;          // bytes per parameter / gradient element in communication
  int64_t activation_bytes = 2;     // bytes per activation element
  int64_t reduce_bytes = 2;         // bytes per gradient element in the data-parallel reduction (framework's reduce dtype)
  bool forward_only = false;        // lowered with LowerOptions::forward_only: no backward, no optimizer

  const RoleProgram& role_of(int64_t rank) const { return roles[static_cast<std::size_t>(rank_role[rank])]; }
  std::span<const Instr> rank(int64_t r) const { return role_of(r).instrs; }
  const ChunkInfo& chunk(int64_t stage, int64_t c) const {
    return chunks[static_cast<std::size_t>(stage * plan.virtual_stages + c)];
  }
  // tokens one rank computes per micro-batch: its 1/cp of the sequences (spec::rank_tokens)
  int64_t tokens_per_micro_batch() const { return spec::rank_tokens(plan, model.seq_len); }
  int64_t tokens_per_step() const { return training.global_batch * model.seq_len; }   // over every replica
  // How many collectives the framework issues for a data-parallel bucket instruction (a ZeRO-3
  // gather, a gradient reduction): its bucket's count (zero.hpp); 1 for any other collective.
  // The replicas' all-reduce of a shard (kDpReplica) is one collective; a quantized gather two
  // per collective of its bucket (the values, the scales); qgZ's all-to-alls two per matrix, its
  // reduce-scatter one per fallback tensor (zero.hpp).
  int32_t collectives_of(const Instr& in) const {
    if (!is_dp_group(in.group) || in.group == Group::kDpReplica || in.bucket < 0) return 1;
    if (in.op == Op::kGatherParams) {
      return param_buckets[static_cast<std::size_t>(in.bucket)].collectives * ((in.flags & kFlagQuantized) ? 2 : 1);
    }
    const Bucket& b = grad_buckets[static_cast<std::size_t>(in.bucket)];
    if (in.op == Op::kAllToAll) return 2 * b.qgz_matrices;
    if (in.op == Op::kReduceScatterGrads || in.op == Op::kAllReduceGrads) {
      return b.qgz_matrices + b.qgz_fallbacks > 0 ? b.qgz_fallbacks : b.collectives;
    }
    return 1;
  }
  std::size_t instruction_count() const;
};

// The framework's k collectives of one data-parallel bucket of n (elements or bytes): k
// consecutive pieces, the first n mod k of ⌈n/k⌉ and the rest of ⌊n/k⌋ (min(k, n) pieces when
// n < k; one, possibly empty, when n = 0). The simulator times k pieces at the largest,
// collective_piece(n, k) = ⌈n/k⌉ (sim/costs.hpp); the executor issues them
// (executor/interpreter_comm.cpp).
inline int64_t collective_piece(int64_t n, int32_t k) { return k <= 1 ? n : (n + k - 1) / k; }
inline int32_t collective_piece_count(int64_t n, int32_t k) {
  return k <= 1 || n <= 1 ? 1 : static_cast<int32_t>(n < k ? n : k);
}
// [begin, end) of piece i < collective_piece_count(n, k), relative to the bucket's start.
inline std::pair<int64_t, int64_t> collective_piece_range(int64_t n, int32_t k, int32_t i) {
  const int64_t c = collective_piece_count(n, k), q = n / c, r = n % c;
  const int64_t begin = i * q + (i < r ? i : r);
  return {begin, begin + q + (i < r ? 1 : 0)};
}

}  // namespace stagecraft::program
