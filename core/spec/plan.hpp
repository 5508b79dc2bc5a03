// Plan: what the planner chooses (SCHEMAS.md, plan.json): the tp x pp x dp factoring, micro-
// batching, pipeline schedule, stage split, recompute and ZeRO settings. ZeRO sizes count
// elements, as DeepSpeed's do; defaults are DeepSpeed's code defaults (REFERENCE.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spec/framework.hpp"

namespace stagecraft::spec {

struct Model;
struct Training;

enum class Schedule { kGpipe, k1F1B, kInterleaved, kZbH1 };
enum class Recompute { kNone, kSelective, kFull };
enum class Offload { kNone, kCpu };
// Every value, for tables of names (to_string gives each one's).
inline constexpr Schedule kSchedules[] = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1};
inline constexpr Recompute kRecomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
inline constexpr Offload kOffloads[] = {Offload::kNone, Offload::kCpu};
// When the replicas of a hierarchical partition (ZeroConfig::shard_group) all-reduce their
// gradient shards: after every micro-batch's reduce-scatter (FSDP HYBRID_SHARD's default), or once
// a step at the accumulation boundary (MiCS, Megatron-LM's optimizer instances, FSDP2's
// set_requires_all_reduce(False)).
enum class ReplicaSync : uint8_t { kMicroBatch, kStep };

// How context parallelism gives each rank's attention the whole sequence's keys and values
// (docs/program.md, "Context parallelism"; Megatron-Core --cp-comm-type, arguments.py):
//   kP2p        K/V chunks passed around the cp ring, overlapped with the attention they feed, dK/dV
//               passed back in the backward (Megatron's default "p2p"; torch's ring attention)
//   kAllGather  K/V all-gathered before attention, dK/dV reduce-scattered after (Megatron's
//               "all_gather", the Llama 3 paper's choice): blocking
//   kA2a        heads scattered over cp by an all-to-all of Q, K, V and back of the output
//               (Megatron's "a2a", DeepSpeed-Ulysses): blocking
enum class CpComm : uint8_t { kP2p, kAllGather, kA2a };
inline constexpr CpComm kCpComms[] = {CpComm::kP2p, CpComm::kAllGather, CpComm::kA2a};

// How a MoE layer's tokens reach their experts (Megatron-Core's --moe-token-dispatcher-type,
// token_dispatcher.py): "alltoall" — each rank sends each routed copy to its expert's rank and
// gets the outputs back (MoEAlltoAllTokenDispatcher); "allgather" — every rank of the experts'
// tensor- and expert-parallel group (etp·ep ranks) all-gathers the group's tokens, probabilities
// and routing map, runs its experts on the rows routed to them and reduce-scatters the weighted
// outputs back (MoEAllGatherTokenDispatcher: "best for TP-only, small EP, large top-k"); "flex" —
// DeepEP's fused dispatch and combine over the same etp·ep ranks (MoEFlexTokenDispatcher with
// --moe-flex-dispatcher-backend deepep): a token goes once to each rank holding one of its experts
// (every etp rank of it) and crosses the network once per node, forwarded inside it over NVLink.
enum class MoeDispatcher : uint8_t { kAllToAll, kAllGather, kFlex };
inline constexpr MoeDispatcher kMoeDispatchers[] = {MoeDispatcher::kAllToAll, MoeDispatcher::kAllGather,
                                                    MoeDispatcher::kFlex};
// The expert grids (etp·ep ranks) DeepEP runs: its Buffer.get_dispatch_config and get_combine_config,
// which Megatron-Core's fused_a2a.py calls with the group's size, have configs for these sizes only
// and assert "Unsupported number of EP ranks" otherwise (deepseek-ai/DeepEP dd758caf
// deep_ep/buffers/legacy.py).
inline constexpr int64_t kDeepEpGroupSizes[] = {2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160};
inline bool deepep_group_size(int64_t ranks) {
  for (int64_t n : kDeepEpGroupSizes) {
    if (n == ranks) return true;
  }
  return false;
}

// Quantized communication (DeepSpeed ZeRO++): `bits` per element on the wire, one fp32 scale per
// `block` elements; bits 0 is off.
struct Quantization {
  int bits = 0;
  int64_t block = 0;
  bool on() const { return bits > 0; }
  bool operator==(const Quantization&) const = default;
};

struct ZeroConfig {
  int stage = 0;
  int64_t prefetch_bucket = 50'000'000;          // stage3_prefetch_bucket_size
  int64_t reduce_bucket = 500'000'000;           // reduce_bucket_size
  int64_t allgather_bucket = 500'000'000;        // allgather_bucket_size
  int64_t max_live_parameters = 1'000'000'000;   // stage3_max_live_parameters
  int64_t max_reuse_distance = 1'000'000'000;    // stage3_max_reuse_distance
  int64_t param_persistence_threshold = 100'000; // stage3_param_persistence_threshold
  bool overlap_comm = false;                     // DeepSpeed: true by default only for stage 3
  Offload offload_optimizer = Offload::kNone;
  // ZeRO-3's parameter shards in pinned host memory (DeepSpeed's offload_param, ZeRO-Infinity's
  // CPU offload): each gather first copies the rank's shard to the GPU over PCIe. Needs stage 3 and
  // the optimizer offloaded too (the host optimizer then writes the shard in place).
  Offload offload_param = Offload::kNone;
  // Stagecraft option: keep a stage's ZeRO-3 parameters gathered across its micro-batches
  // (one gather per step instead of one per micro-batch), trading memory for traffic.
  bool keep_gathered_across_microbatches = false;

  // ZeRO across nodes (docs/program.md, "Hierarchical and quantized ZeRO"; each rule's source in
  // core/spec/framework.hpp). Ranks of the data-parallel group are taken in dp-index order, so
  // with tp·g GPUs per node a group of g consecutive dp ranks is a node's.
  // Model states partitioned over shard_group consecutive dp ranks and replicated over the
  // dp/shard_group such groups (MiCS mics_shard_size, FSDP HYBRID_SHARD, Megatron-LM's
  // --num-distributed-optimizer-instances dp/g); 0: over the whole data-parallel group.
  int64_t shard_group = 0;
  std::optional<ReplicaSync> replica_sync;   // unset: the framework's rule (replica_sync())
  bool hierarchical_gather = false;          // MiCS: gather across nodes first, then inside each
  // DeepSpeed hpZ: a secondary copy of the 16-bit parameters sharded over hpz_group consecutive
  // dp ranks, from which every gather after a bucket's first in a step is served; 0: off.
  int64_t hpz_group = 0;
  // Data-parallel ranks on one node: qgZ's intra-node all-to-all group and MiCS's hierarchical
  // gather need it; 0: not given.
  int64_t local_group = 0;
  Quantization quantized_weights;    // DeepSpeed qwZ: every ZeRO-3 gather in int8 blocks
  Quantization quantized_gradients;  // DeepSpeed qgZ: gradients reduced by int4 all-to-alls
};

// DeepSpeed ZeRO++'s quantizers: qwZ int8 weights, one fp32 scale per group of about `block` =
// 8000 elements of a rank's shard (partition_parameters.py CUDAQuantizer.target_group_size);
// qgZ int4 gradients, max(rows, cols, world) groups per tensor (coalesced_collectives.py
// all_to_all_quant_reduce), so no block size (0).
inline constexpr Quantization kQwzDefault{8, 8000};
inline constexpr Quantization kQgzDefault{4, 0};

// The data-parallel ranks one partition of the model states spans: shard_group, else dp.
inline int64_t partition_group(const ZeroConfig& z, int64_t dp) {
  return z.shard_group > 0 && z.shard_group < dp ? z.shard_group : dp;
}
// Whether the plan partitions over groups smaller than dp (MiCS, HSDP, optimizer instances).
inline bool hierarchical(const ZeroConfig& z, int64_t dp) { return partition_group(z, dp) < dp; }
// Whether hpZ's secondary partition is smaller than dp (hpz_group of dp or more changes nothing).
inline bool secondary_partition(const ZeroConfig& z, int64_t dp) { return z.hpz_group > 1 && z.hpz_group < dp; }

struct Plan {
  int64_t tp = 1, pp = 1, dp = 1;
  // Context parallelism: each sequence split over cp ranks (load-balanced causal chunks: rank i
  // holds chunks i and 2cp-1-i), the ranks laid out tp fastest, then cp, then dp, then pp
  // (Megatron-Core's order). The batch splits over dp only; gradients are reduced, and ZeRO
  // partitions, over the dp·cp ranks (Megatron's data-parallel group with context parallelism).
  int64_t cp = 1;
  CpComm cp_comm = CpComm::kP2p;
  // Expert parallelism (mixture-of-experts models; docs/program.md "Mixture of experts"): each MoE
  // layer's experts split over ep ranks, Megatron-Core's "MoE parallel folding": the expert grid
  // etp × ep × edp re-partitions a stage's tp · cp · dp ranks (etp fastest, then ep), so
  // edp = tp · cp · dp / (etp · ep) ranks hold the same experts and reduce their gradients.
  // etp: expert tensor parallelism (each expert's FFN split over etp ranks).
  int64_t ep = 1;
  int64_t etp = 1;
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  int64_t micro_batch = 1;      // sequences per micro-batch
  int64_t micro_batches = 1;    // micro-batches per step per data-parallel rank
  Schedule schedule = Schedule::k1F1B;
  int64_t virtual_stages = 1;   // model chunks per pipeline rank (> 1 only with interleaved)
  std::vector<int64_t> stage_layers;   // empty: balanced by cost at lowering
  bool sequence_parallel = false;
  // Pipeline sends overlap the next compute (true), or the stage waits for each send to finish
  // before computing on (false: what Megatron-LM's and DeepSpeed's schedules do).
  bool overlap_p2p = false;
  Recompute recompute = Recompute::kNone;
  ZeroConfig zero;
  std::string source;
  std::string file;

  int64_t world() const { return tp * cp * pp * dp; }
  // The ranks a gradient is reduced over and ZeRO partitions over: dp · cp.
  int64_t dp_cp() const { return dp * cp; }
  // The ranks holding the same experts, which reduce (and ZeRO-partition) their gradients.
  int64_t expert_dp() const { return tp * cp * dp / (ep * etp); }
};

// Tokens one rank computes per micro-batch: micro_batch · seq_len / cp.
inline int64_t rank_tokens(const Plan& p, int64_t seq_len) { return p.micro_batch * seq_len / p.cp; }

Plan load_plan(const std::string& path);
// Reads and checks the plan on its own (types, ranges, schedule/virtual_stages agreement).
Plan plan_from_json(const nlohmann::json& j, const std::string& file);
// Checks the plan against the model, the training and the GPU count it will run on:
// tp*cp*pp*dp == gpus, global_batch == micro_batch * micro_batches * dp, tp divides heads,
// stage_layers sum to layers, at least one layer per stage and per virtual chunk, ...
// Throws SpecError naming the plan file (or the training file) and the field.
void validate_plan(const Plan& p, const Model& m, const Training& t, int64_t gpus);

// When replicas synchronise (ReplicaSync) under `framework` when the plan does not say: DeepSpeed's
// MiCS and Megatron-LM at the accumulation boundary, FSDP every backward.
ReplicaSync replica_sync(const ZeroConfig& z, Framework framework);
const char* to_string(ReplicaSync s);

nlohmann::json to_json(const Plan& p);
nlohmann::json to_json(const ZeroConfig& z);
const char* to_string(Schedule s);
const char* to_string(Recompute r);
const char* to_string(Offload o);
const char* to_string(CpComm c);
const char* to_string(MoeDispatcher d);
// The class of ZeRO across nodes a plan's model error is measured on (sim/model_error.hpp):
// "zeropp" with hpZ, qwZ or qgZ, "shard" with a shard group smaller than dp, else "".
std::string across_nodes_class(const ZeroConfig& z, int64_t dp);
// The class a plan's model error is measured on: "moe" for a mixture-of-experts model (its runs
// are validated apart from the dense ones), else across_nodes_class.
std::string validation_class(const Plan& p, const Model& m);
// The hierarchical and quantized ZeRO choices as summary() writes them (" shard8 hpz8 qwz qgz"),
// empty for plain ZeRO.
std::string zero_variant(const ZeroConfig& z, int64_t dp);
// One line, e.g. "tp8 pp8 dp16 mb1x96 1f1b zero1 sp recompute=selective".
std::string summary(const Plan& p);

}  // namespace stagecraft::spec
