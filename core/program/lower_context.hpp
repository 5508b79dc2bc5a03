// Internal to lowering: what every stage's emitter needs — the units, the chunks and their
// segments, buckets and byte sizes. Not part of the public interface.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/program/comm_rules.hpp"
#include "core/program/program.hpp"
#include "core/program/schedules/schedules.hpp"
#include "core/program/units.hpp"
#include "core/program/zero.hpp"

namespace stagecraft::program::detail {

// A run of units computed by one instruction (cut at tp and cp collectives, ZeRO-3 buckets and, with
// full recompute, checkpoint boundaries).
struct Segment {
  int32_t unit_begin = 0;
  int32_t unit_end = 0;
  int32_t param_bucket = -1;   // global index into Program::param_buckets, -1 when none gathered
  int32_t group = 0;           // recompute group: segments of one block share it
  int32_t tied_bucket = -1;    // ZeRO-3: the embedding's bucket, used by a tied head on the same stage
};

struct ChunkPlan {
  std::vector<Segment> segments;     // forward order
  std::vector<int32_t> grad_buckets; // global indices into Program::grad_buckets, backward order
};

struct Context {
  const Program* program = nullptr;
  std::shared_ptr<const std::vector<Unit>> units;   // shared_model_units
  spec::FrameworkProfile framework;                   // the training's (its overrides applied)
  std::vector<std::vector<UnitParams>> stage_params;  // [stage][unit]
  std::vector<ChunkPlan> chunk_plans;                 // stage-major like Program::chunks
  int64_t p2p_bytes = 0;       // one activation (or its gradient) message
  int64_t tp_bytes = 0;        // one tensor-parallel collective buffer S
  int64_t tokens = 0;          // tokens per micro-batch
  bool tp_collectives = false;
  bool cp_collectives = false; // cp > 1: attention units exchange K/V over Group::kCp (comm_rules.hpp)
  CpShapes cp_shapes;
  bool zero3_gathers = false;
  bool dp_collectives = false;
  bool per_mb_reduce = false;  // ZeRO-2/3: reduce-scatter at every micro-batch
  // ZeRO across nodes (spec::ZeroConfig; docs/program.md):
  int64_t partition = 1;        // data-parallel ranks a model-state partition spans (spec::partition_group)
  Group partition_group = Group::kDp;   // kDp, or kDpShard when partition < dp
  bool replicas = false;        // partition < dp: gradient shards all-reduced over kDpReplica
  bool replica_at_step = false; // ... once a step, after the last reduce-scatter (else after each)
  Lane replica_lane = Lane::kDpReduce;  // the stream the replica all-reduce runs on
  bool hierarchical_gather = false;     // MiCS: each ZeRO-3 gather over kDpShardCross, then kDpLocal
  // hpZ: a bucket's gathers after its first of the step go over kDpShard (the secondary
  // partition); `hpz_every_forward`: FSDP2's reshard_after_forward=<int>, every forward gathers
  // over kDp and the backward's over kDpShard
  bool hpz = false;
  bool hpz_every_forward = false;
  BucketRule rule;              // how buckets were cut (zero.hpp)
  int64_t qwz_block = 0;        // qwZ: every ZeRO-3 gather quantized, scales per ~block elements; 0 off
  bool qgz = false;             // qgZ: gradients all-to-all'd in int4, inside nodes then across (more than one node)
  // Mixture of experts: ep > 1 puts each MoE unit's dispatch and combine all-to-alls (Group::kEp)
  // around its experts' compute, etp > 1 an all-gather and a reduce-scatter over Group::kExpertTp
  // (comm_rules.hpp); either splits the unit's pass in two computes (ep_collectives);
  // experts_apart: their data-parallel group (spec::Plan::expert_dp) is not the dense layers', so
  // their gradients have buckets of their own (zero.hpp)
  bool ep_collectives = false;
  bool experts_apart = false;
  int64_t expert_dp = 1;
  int64_t a2a_bytes = 0;        // one dispatch (or combine) all-to-all's send buffer S; 0 with ep 1
  int64_t etp_bytes = 0;        // one expert tensor-parallel gather (or scatter)'s S; 0 with etp 1
  int64_t flex_bytes = 0;       // the flex dispatcher's dispatch (or combine) S over kExpertTpEp; 0 otherwise
  MoeAllGatherBytes allgather;  // the all-gather dispatcher's (comm_rules.hpp); zeros with the all-to-all one
  int64_t aux_counts_bytes = 0; // the balancing loss's token counts summed over Group::kTpCp; 0 when none

  const ChunkPlan& chunk_plan(int64_t stage, int64_t chunk) const {
    return chunk_plans[static_cast<std::size_t>(stage * program->plan.virtual_stages + chunk)];
  }
};

// Emits one stage's instruction list into `role`.
void emit_stage(const Context& cx, int32_t stage, const std::vector<Step>& steps, RoleProgram& role);

}  // namespace stagecraft::program::detail
