// Plan space: every plan a search may choose for one model, cluster (its first `gpus` GPUs) and
// training, as axes, and one candidate plan as a small value over those axes.
//
// Axes (SCHEMAS.md plan.json; G GPUs, g = gpus_per_node, L layers, B global batch):
//   tp        divisors of g that divide G and heads, ffn_hidden, and divide or are a multiple of kv_heads
//   pp        divisors of G/tp with pp <= L (at least one layer per stage)
//   dp        G/(tp·pp); only when dp divides B
//   mb        micro-batch size: divisors of B/dp;  micro_batches m = B/(dp·mb), so that
//             B = mb · m · dp (the batch identity)
//   schedule  gpipe, 1f1b, zb-h1 (v = 1) and interleaved with v >= 2 where pp >= 2, pp·v divides L
//             (Megatron-LM's equal chunks) and pp divides m; with pp = 1 the schedule axis
//             collapses to one value (nothing to pipeline)
//   cp        context parallelism: divisors of G/(tp·pp) with 2·cp | seq_len, where the training's
//             framework runs it, and by default only while each rank's two causal chunks hold at
//             least kMinCpChunk tokens each (shorter chunks leave the attention kernels too little
//             work; --cp pins any); dp = G/(tp·cp·pp). The comm type (p2p, all_gather, a2a): those
//             the framework runs (spec::validate_plan), a2a only where cp divides a tp rank's heads
//             and kv_heads; one value stands for all when cp = 1
//   ep        expert parallelism (a mixture-of-experts model): divisors of the experts that divide
//             tp·cp·dp (Megatron-Core's folding), where the framework runs them (DeepSpeed-MoE: not
//             with tp > 1); 1 for a dense model
//   etp       expert tensor parallelism: 1 and, by default, each divisor of tp above 1 (inside the
//             dense tp group's NVLink domain; Megatron-Core's default etp is tp, its advice 1 for
//             fine-grained experts) that divides the experts' width, with etp·ep dividing
//             tp·cp·dp; --etp pins any valid value; Megatron-Core only (DeepSpeed-MoE keeps experts whole)
//   moe_dispatcher  alltoall, and allgather and flex (DeepEP) where etp·ep > 1 (Megatron-Core only;
//             allgather not with biased experts, which its all-gather dispatcher refuses; flex not
//             with moe_pad_to_capacity, which Megatron-Core refuses with DeepEP, and only over the
//             grids DeepEP has configs for, spec::kDeepEpGroupSizes; where it moves
//             exactly the all-to-all's bytes — etp 1, one expert a GPU inside a node — the
//             pruner marks it a dominated duplicate)
//   recompute none, selective, full;   sequence parallel: off, and on when tp > 1 and tp | seq_len/cp
//             (a mixture-of-experts model with tp > 1: on only, as Megatron-Core asserts)
//   split     balanced (by cost, core/program/partition.hpp) and uniform (equal blocks per stage)
//   ZeRO      stage 0..3; with dp > 1 the bucket axes each stage uses: reduce_bucket (all stages),
//             prefetch_bucket and max_live_parameters (stage 3), on a log grid of elements;
//             optimizer offload (stages >= 1); overlap_comm; and ZeRO across nodes (ZeroVariant)
//             where the framework runs it and the plan spans nodes
// A Candidate stores the chosen value of each axis (bucket values as indices into the grids), so
// survivors of pruning cost a few dozen bytes each; plan() turns one into a spec::Plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/spec/cluster.hpp"
#include "core/spec/model.hpp"
#include "core/spec/plan.hpp"
#include "core/spec/training.hpp"

namespace stagecraft::planner {

enum class Split : uint8_t { kBalanced, kUniform };
const char* to_string(Split s);

// ZeRO across nodes (docs/planner.md, docs/program.md): the plan's ZeRO stage run over a node's
// data-parallel ranks L = gpus_per_node / tp, where 1 < L < dp and L divides dp:
//   plain    over the whole data-parallel group
//   hpz      hpZ secondary partition over L (DeepSpeed ZeRO-3; FSDP2's reshard_after_forward=L)
//   zeropp   ZeRO++ as DeepSpeed's tutorial sets it: hpZ over L, qwZ, qgZ with L ranks a node
//   shard    model states sharded over L, replicated across nodes: DeepSpeed MiCS (ZeRO-3), FSDP
//            hybrid sharding (ZeRO-2/3), Megatron-LM's optimizer instances (ZeRO-1)
enum class ZeroVariant : uint8_t { kPlain, kHpz, kZeroPP, kShard };
inline constexpr ZeroVariant kZeroVariants[] = {ZeroVariant::kPlain, ZeroVariant::kHpz, ZeroVariant::kZeroPP,
                                                ZeroVariant::kShard};
const char* to_string(ZeroVariant v);

// What the command line pins or limits. An empty list leaves the axis free.
struct SpaceLimits {
  std::vector<int64_t> tp, pp, micro_batch, virtual_stages, cp, ep, etp;
  std::vector<spec::CpComm> cp_comm;
  std::vector<spec::MoeDispatcher> moe_dispatcher;
  int64_t max_micro_batch = 0;                 // 0: no limit
  std::vector<int> zero;
  std::vector<spec::Schedule> schedules;
  std::vector<spec::Recompute> recompute;
  std::vector<int> sequence_parallel;          // 0 / 1
  std::vector<spec::Offload> offload;
  std::vector<ZeroVariant> zero_variants;
  std::vector<Split> split;
  std::vector<int> overlap_comm = {1};         // DeepSpeed's recommended setting
  // Bucket grids in elements (DeepSpeed counts elements); empty: the default log grid.
  std::vector<int64_t> reduce_bucket, prefetch_bucket, max_live_parameters;
};

// The shortest causal chunk (seq_len / 2cp tokens) the default cp axis goes down to.
inline constexpr int64_t kMinCpChunk = 1024;

// The default bucket grid: 1e6, 1e7, 1e8, 1e9 elements.
std::vector<int64_t> default_bucket_grid();

struct Candidate {
  int32_t tp = 1, pp = 1, dp = 1;
  int16_t cp = 1;
  spec::CpComm cp_comm = spec::CpComm::kP2p;
  int16_t ep = 1, etp = 1;
  spec::MoeDispatcher moe_dispatcher = spec::MoeDispatcher::kAllToAll;
  int32_t micro_batch = 1, micro_batches = 1;
  int16_t virtual_stages = 1;
  spec::Schedule schedule = spec::Schedule::k1F1B;
  spec::Recompute recompute = spec::Recompute::kNone;
  Split split = Split::kBalanced;
  bool sequence_parallel = false;
  int8_t zero = 0;
  ZeroVariant zero_variant = ZeroVariant::kPlain;
  bool offload = false;
  bool overlap_comm = true;
  int8_t reduce_i = -1, prefetch_i = -1, max_live_i = -1;   // -1: DeepSpeed's default
};

class Space {
 public:
  // Throws SpecError when the limits contradict the model or cluster (a pinned tp that does not
  // divide heads, ...), naming the option.
  Space(const spec::Model& model, const spec::Cluster& cluster, const spec::Training& training, int64_t gpus,
        SpaceLimits limits);

  const spec::Model& model() const { return model_; }
  const spec::Cluster& cluster() const { return cluster_; }
  const spec::Training& training() const { return training_; }
  int64_t gpus() const { return gpus_; }
  const SpaceLimits& limits() const { return limits_; }

  // The values of each axis after limits (sorted ascending).
  const std::vector<int64_t>& tp_values() const { return tp_; }
  std::vector<int64_t> pp_values(int64_t tp) const;
  // cp sizes for this tp and pp (1 first), and the comm types of one (cp = 1: p2p alone)
  std::vector<int64_t> cp_values(int64_t tp, int64_t pp) const;
  std::vector<spec::CpComm> cp_comms(int64_t tp, int64_t cp) const;
  // ep sizes for a stage of tp · cp · dp ranks (1 first; only 1 for a dense model)
  std::vector<int64_t> ep_values(int64_t tp, int64_t cp, int64_t dp) const;
  // etp sizes for that stage and ep (1 first; only 1 for a dense model)
  std::vector<int64_t> etp_values(int64_t tp, int64_t cp, int64_t dp, int64_t ep) const;
  // the token dispatchers for that expert grid (alltoall first; one value when etp·ep = 1)
  std::vector<spec::MoeDispatcher> moe_dispatchers(int64_t ep, int64_t etp) const;
  std::vector<int64_t> micro_batch_values(int64_t dp) const;
  std::vector<int64_t> virtual_stage_values(int64_t pp, int64_t micro_batches) const;   // v >= 2
  std::vector<spec::Schedule> schedules(int64_t pp) const;   // v = 1 schedules (no interleaved)
  bool interleaved_allowed() const;
  std::vector<bool> sequence_parallel_values(int64_t tp, int64_t cp = 1) const;
  const std::vector<spec::Recompute>& recompute_values() const { return recompute_; }
  std::vector<Split> split_values(int64_t pp) const;
  const std::vector<int>& zero_values() const { return zero_; }
  // The ZeRO variants a plan of this stage, tp and dp can take (plain first), after limits.
  std::vector<ZeroVariant> zero_variants(int zero, int64_t tp, int64_t dp) const;
  // A node's data-parallel ranks L = gpus_per_node / tp where ZeRO across nodes applies to a
  // plan of this tp and dp (1 < L < dp, L divides dp), else 0.
  int64_t node_dp(int64_t tp, int64_t dp) const {
    const int64_t l = cluster_.gpus_per_node / tp;
    return l > 1 && l < dp && dp % l == 0 ? l : 0;
  }
  const std::vector<bool>& offload_values() const { return offload_; }
  const std::vector<bool>& overlap_values() const { return overlap_; }
  const std::vector<int64_t>& reduce_grid() const { return reduce_; }
  const std::vector<int64_t>& prefetch_grid() const { return prefetch_; }
  const std::vector<int64_t>& max_live_grid() const { return max_live_; }

  spec::Plan plan(const Candidate& c) const;
  // Why the space has no candidate at all (empty when it has some): names the axis that emptied it.
  std::string why_empty() const;

  // The inputs that define the space, as JSON (the results store records them).
  nlohmann::json to_json() const;

 private:
  spec::Model model_;
  spec::Cluster cluster_;
  spec::Training training_;
  int64_t gpus_ = 0;
  SpaceLimits limits_;
  std::vector<int64_t> tp_;
  std::vector<spec::Recompute> recompute_;
  std::vector<int> zero_;
  std::vector<bool> offload_, overlap_;
  std::vector<int64_t> reduce_, prefetch_, max_live_;
};

// One line that names every choice a search makes, unique per distinct plan, e.g.
// "tp8 pp8 dp16 mb1x96 1f1b zero1 sp recompute=selective rb=5e8". The deterministic tie-break
// of search results.
std::string plan_key(const spec::Plan& p);
// 500000000 -> "5e8", 1000000 -> "1e6", 12345 -> "12345"
std::string short_elems(int64_t v);

}  // namespace stagecraft::planner
