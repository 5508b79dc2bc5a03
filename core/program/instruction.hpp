// The Program's instruction set: what one rank does in one training step, one instruction at a
// time (docs/program.md). The simulator times these; the executor performs them. Each
// instruction runs on one lane (a stream); lanes run their instructions in Program order, and an
// instruction also waits for its explicit dependencies (instructions of the same rank).
// Units: a model is cut into units — 0 the embedding, 1+2i block i's attention sublayer,
// 2+2i block i's MLP sublayer, 2L+1 the head (final norm, LM head, loss).
#pragma once

#include <cstdint>

namespace stagecraft::program {

enum class Op : uint8_t {
  kForward,             // forward of units [unit_begin, unit_end) for micro-batch mb
  kBackward,            // input + weight gradients of those units
  kBackwardInput,       // zero-bubble split: input gradients only (what the previous stage waits for)
  kBackwardWeight,      // zero-bubble split: weight gradients only (deferred to fill bubbles)
  kRecompute,           // full recompute: re-run the forward from the checkpointed input
  kSendActivation,      // p2p to peer_stage/peer_chunk
  kRecvActivation,
  kSendGrad,
  kRecvGrad,
  kGatherParams,        // ZeRO-3: all-gather parameter bucket over dp
  kReleaseParams,       // ZeRO-3: free the gathered copy of a bucket
  kReduceScatterGrads,  // ZeRO 1-3: reduce-scatter gradient bucket over dp
  kAllReduceGrads,      // ZeRO 0 gradient bucket over dp; tied-embedding gradients over the embedding group
  kAllGatherParams,     // ZeRO 1-2: after the step, gather updated parameter bucket over dp
  kOptimizerStep,       // Adam on this rank's shard (elems parameters)
  kOffloadCopy,         // optimizer offload: device->host gradients or host->device parameters
  kTpAllReduce,         // tensor-parallel collectives a layer issues
  kTpReduceScatter,     // (sequence parallel)
  kTpAllGather,         // (sequence parallel)
  kGradNormAllReduce,   // global gradient norm for clipping, over every rank
  kAllToAll,            // ZeRO++ qgZ: quantized gradients exchanged inside a node, then across nodes;
                        // context parallelism's a2a: Q, K, V to heads over cp and the output back;
                        // expert parallelism: tokens dispatched to their experts over ep and combined back
  kCpAllGather,         // context parallelism: the sequence's K and V gathered over cp (p2p: the ring's passes)
  kCpReduceScatter,     // context parallelism: dK and dV summed back to their owners over cp
};
inline constexpr int kOpCount = 23;

// kDpReplica: the all-reduce of gradient shards across replicas (hierarchical ZeRO) where the
// framework runs it on a stream of its own (spec::FrameworkProfile::replica_stream).
// kCp: context parallelism's K/V exchanges (a p2p ring runs beside the attention it feeds).
// kEp: expert parallelism's all-to-alls (the compute of their layer waits for each).
enum class Lane : uint8_t { kCompute, kTp, kPpSend, kPpRecv, kDpGather, kDpReduce, kOffload, kDpReplica, kCp, kEp };
inline constexpr int kLaneCount = 10;

// Which communicator a collective runs on, relative to the issuing rank. The data-parallel
// subgroups (hierarchical and quantized ZeRO; Placement gives their members) take the dp group's
// ranks in dp-index order: with i the rank's dp index, g = Placement::inner, l = Placement::local,
//   kDpShard       the g consecutive ranks holding i: MiCS's and HSDP's shard group, hpZ's secondary group
//   kDpReplica     the ranks at i's position in every shard group (i mod g): the replica group
//   kDpLocal       the l consecutive ranks holding i: a node's (qgZ's first all-to-all, MiCS's intra-node gather)
//   kDpCross       the ranks at i's position on every node (i mod l): qgZ's second all-to-all
//   kDpShardCross  kDpCross within i's shard group: MiCS's inter-node gather
// With context parallelism the data-parallel group holds the dp·cp ranks of a stage and tp index
// (gradients are reduced over them); kCp is the cp consecutive ones among them that split one
// sequence.
// Expert parallelism (Placement::ep, Placement::etp; Megatron-Core's folding, the expert grid
// etp × ep × edp in order "tp-ep-dp"): a stage's tp·dp ranks (dp counting cp) in order
// l = dp_index·tp + tp_index have etp_index = l mod etp, ep_index = (l / etp) mod ep and
// edp_index = l / (etp·ep). kExpertTp holds the etp consecutive ranks around l (the experts'
// tensor-parallel group: one expert's FFN split over them), kEp the ep ranks of l's etp and edp
// index (the tokens' all-to-alls; ep consecutive ranks when etp is 1), kExpertDp the ranks of l's
// etp and ep index (l mod etp·ep): the ranks holding the same expert shards, over which their
// gradients are reduced and ZeRO partitions them; kExpertTpEp the etp·ep consecutive ranks of l's
// edp index (Megatron-Core's expert tensor-and-model-parallel group: the all-gather dispatcher's).
// kTpCp holds the tp·cp ranks of a stage that split one micro-batch's tokens (l's cp block, every
// tp index: Megatron-Core's tp_cp group), over which the balancing loss sums its token counts.
enum class Group : uint8_t {
  kNone, kTp, kDp, kEmbedding, kWorld, kDpShard, kDpReplica, kDpLocal, kDpCross, kDpShardCross, kCp, kEp, kExpertDp,
  kExpertTp, kExpertTpEp, kTpCp
};
inline constexpr int kGroupCount = 16;
inline constexpr Group kGroups[] = {Group::kTp,      Group::kDp,         Group::kEmbedding, Group::kWorld,
                                    Group::kDpShard, Group::kDpReplica,  Group::kDpLocal,   Group::kDpCross,
                                    Group::kDpShardCross, Group::kCp,    Group::kEp,        Group::kExpertDp,
                                    Group::kExpertTp, Group::kExpertTpEp, Group::kTpCp};
// The data-parallel group, one of its subgroups, or the experts' own: where ZeRO's buckets move.
inline bool is_dp_group(Group g) {
  return g == Group::kDp || (g >= Group::kDpShard && g <= Group::kDpShardCross) || g == Group::kExpertDp;
}

enum InstrFlags : uint8_t {
  kFlagNone = 0,
  kFlagToHost = 1,      // OffloadCopy direction device -> host (else host -> device)
  kFlagOnHost = 2,      // OptimizerStep runs on the host CPU (offload)
  kFlagGrad = 4,        // a tensor-parallel collective of a backward pass: it moves a gradient (else an activation)
  kFlagRecompute = 8,   // a tensor-parallel collective of a Recompute: the forward's, re-issued
  kFlagNormGrads = 16,  // sequence parallelism: the TpAllReduce of the norms' gradients, once per step
  kFlagFirstLevel = 32, // the first step of a two-level data-parallel operation (MiCS's inter-node gather,
                        // qgZ's intra-node all-to-all): the instruction after it completes the bucket
  kFlagQuantized = 64,  // a data-parallel collective moving quantized data (ZeRO++ qwZ, qgZ): `bytes` on
                        // the wire (values and fp32 scales), `elems` the elements they stand for
  kFlagExperts = 128,   // a compute of a mixture-of-experts unit with expert parallelism: its routed
                        // experts' part (the rest — norm, router, shared experts — is the unit's other
                        // compute of the pass, without the flag)
};

struct Instr {
  double flops = 0;          // FLOPs performed on this rank (compute)
  int64_t bytes = 0;         // bytes moved: p2p message, collective buffer S (nccl-tests), copy; for a
                             // compute, HBM bytes the framework copies before it (zero.hpp)
  int64_t elems = 0;         // elements: parameters covered (compute, optimizer), buffer elements (collectives)
  int32_t mb = -1;           // micro-batch
  int32_t unit_begin = -1;   // [unit_begin, unit_end): model units covered
  int32_t unit_end = -1;
  int32_t bucket = -1;       // param bucket (Gather/Release/AllGather) or grad bucket (ReduceScatter/AllReduce)
  int32_t dep_begin = 0;     // dependencies: RoleProgram::deps[dep_begin, dep_begin + dep_count)
  int16_t dep_count = 0;
  int16_t chunk = -1;        // virtual chunk on this rank
  int16_t peer_stage = -1;   // p2p peer: pipeline stage (same tp and dp coordinates)
  int16_t peer_chunk = -1;   // p2p peer's chunk
  Op op = Op::kForward;
  Lane lane = Lane::kCompute;
  Group group = Group::kNone;
  uint8_t flags = kFlagNone;
};

const char* to_string(Op op);
const char* to_string(Lane lane);
const char* to_string(Group group);
// The trace schema's "kind" (SCHEMAS.md): forward, backward, send, gather, reduce_scatter, ...
const char* trace_kind(Op op);

// Which communication an instruction is, by its lane: tensor-parallel, pipeline or data-parallel
// traffic, or none (compute, optimizer, offload copies, and ReleaseParams, which only frees
// memory). The simulator's lane accounting and trace analysis classify alike with it.
enum class Traffic : uint8_t { kNone, kTp, kPp, kDp, kCp, kEp };
inline constexpr int kTrafficClasses = 5;   // kTp, kPp, kDp, kCp, kEp
inline Traffic traffic_of(Lane lane, Op op) {
  switch (lane) {
    case Lane::kTp: return Traffic::kTp;
    case Lane::kPpSend:
    case Lane::kPpRecv: return Traffic::kPp;
    case Lane::kDpGather:
    case Lane::kDpReduce:
    case Lane::kDpReplica: return op == Op::kReleaseParams ? Traffic::kNone : Traffic::kDp;
    case Lane::kCp: return Traffic::kCp;
    case Lane::kEp: return Traffic::kEp;
    default: return Traffic::kNone;
  }
}

inline bool is_compute(Op op) {
  return op == Op::kForward || op == Op::kBackward || op == Op::kBackwardInput || op == Op::kBackwardWeight ||
         op == Op::kRecompute;
}
inline bool is_send(Op op) { return op == Op::kSendActivation || op == Op::kSendGrad; }
inline bool is_recv(Op op) { return op == Op::kRecvActivation || op == Op::kRecvGrad; }
inline bool is_collective(Op op) {
  switch (op) {
    case Op::kGatherParams:
    case Op::kReduceScatterGrads:
    case Op::kAllReduceGrads:
    case Op::kAllGatherParams:
    case Op::kTpAllReduce:
    case Op::kTpReduceScatter:
    case Op::kTpAllGather:
    case Op::kGradNormAllReduce:
    case Op::kAllToAll:
    case Op::kCpAllGather:
    case Op::kCpReduceScatter: return true;
    default: return false;
  }
}

}  // namespace stagecraft::program
