#include "core/program/lower.hpp"

#include <algorithm>
#include <numeric>

#include "core/program/check.hpp"
#include "core/program/comm_rules.hpp"
#include "core/program/lower_context.hpp"
#include "core/program/partition.hpp"
#include "core/thread/parallel_for.hpp"

namespace stagecraft::program {

using detail::ChunkPlan;
using detail::Context;
using detail::Segment;

namespace {

// Stage-wide per-unit parameters (a tied head on a stage without the embedding holds a copy).
std::vector<UnitParams> stage_unit_params(const Program& prog, const std::vector<Unit>& units, int32_t stage,
                                          TensorSet set = TensorSet::kAll) {
  const bool has_embedding = prog.chunk(stage, 0).unit_begin == 0;
  const int64_t threshold = persistence_threshold(prog.plan.zero, prog.training.framework_profile());
  const int64_t tied_copy = tied_head_copy(prog.model, prog.plan.tp);
  // the stage's own units only: every reader indexes them by a unit of one of its chunks
  std::vector<UnitParams> out(units.size());
  for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) {
    const ChunkInfo& chunk = prog.chunk(stage, c);
    for (int32_t u = chunk.unit_begin; u < chunk.unit_end; ++u) {
      out[static_cast<std::size_t>(u)] = unit_params(units, u, has_embedding, tied_copy, threshold, set);
    }
  }
  return out;
}

int32_t unit_group(const Unit& u) { return u.block >= 0 ? u.block : (u.kind == UnitKind::kEmbedding ? -1 : -2); }

// Forward-order segments of a chunk: cut between units when tp > 1 or cp > 1, at ZeRO-3 bucket edges, and
// at block edges with full recompute (each block is a checkpoint).
std::vector<Segment> chunk_segments(const Context& cx, const ChunkInfo& c, int32_t first_bucket, int32_t n_buckets) {
  const Program& prog = *cx.program;
  const bool full = prog.plan.recompute == spec::Recompute::kFull;
  std::vector<Segment> out;
  int32_t bucket = first_bucket;
  for (int32_t u = c.unit_begin; u < c.unit_end; ++u) {
    while (n_buckets > 0 && u >= prog.param_buckets[bucket].unit_end) ++bucket;
    const int32_t b = n_buckets > 0 && prog.param_buckets[bucket].elems > 0 ? bucket : -1;
    const int32_t group = unit_group((*cx.units)[u]);
    const bool cut = out.empty() || cx.tp_collectives || cx.cp_collectives || cx.ep_collectives || out.back().param_bucket != b ||
                     (full && out.back().group != group);
    if (cut) out.push_back(Segment{u, u + 1, b, group});
    else out.back().unit_end = u + 1;
  }
  return out;
}

void plan_chunks(Program& prog, Context& cx) {
  const spec::ZeroConfig& z = prog.plan.zero;
  const BucketRule& rule = cx.rule;
  for (const ChunkInfo& c : prog.chunks) {
    const std::vector<UnitParams>& params = cx.stage_params[c.stage];
    ChunkPlan plan;
    std::vector<Bucket> grads;
    if (cx.experts_apart) {
      // the dense tensors' buckets and the experts', merged in backward order (a MoE unit's
      // dense bucket first)
      grads = grad_buckets(c, stage_unit_params(prog, *cx.units, c.stage, TensorSet::kDense), rule);
      std::vector<Bucket> experts = expert_grad_buckets(c, stage_unit_params(prog, *cx.units, c.stage, TensorSet::kExperts), rule);
      grads.insert(grads.end(), experts.begin(), experts.end());
      std::stable_sort(grads.begin(), grads.end(), [](const Bucket& a, const Bucket& b) { return a.unit_begin > b.unit_begin; });
    } else {
      grads = grad_buckets(c, params, rule);
    }
    for (const Bucket& b : grads) {
      plan.grad_buckets.push_back(static_cast<int32_t>(prog.grad_buckets.size()));
      prog.grad_buckets.push_back(b);
    }
    const int32_t first = static_cast<int32_t>(prog.param_buckets.size());
    if (cx.zero3_gathers) {
      for (const Bucket& b : param_buckets(c, params, rule)) prog.param_buckets.push_back(b);
    }
    const int32_t count = static_cast<int32_t>(prog.param_buckets.size()) - first;
    plan.segments = chunk_segments(cx, c, first, count);
    // A tied head computes its logits with the embedding table: on the embedding's own stage
    // that table lives in the bucket of unit 0 (chunk 0 comes first in this stage-major loop).
    const ChunkInfo& first_chunk = prog.chunk(c.stage, 0);
    if (cx.zero3_gathers && prog.model.tied_embeddings && first_chunk.unit_begin == 0 &&
        c.unit_end == head_unit(prog.model) + 1) {
      const ChunkPlan& emb = c.chunk == 0 ? plan : cx.chunk_plans[static_cast<std::size_t>(c.stage * prog.plan.virtual_stages)];
      plan.segments.back().tied_bucket = emb.segments.front().param_bucket;
    }
    cx.chunk_plans.push_back(std::move(plan));
  }
  if ((z.stage == 1 || z.stage == 2) && (prog.plan.dp_cp() > 1 || cx.expert_dp > 1)) {
    for (int32_t s = 0; s < prog.plan.pp; ++s) {
      int64_t elems = 0, experts = 0;
      for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) {
        elems += prog.chunk(s, c).params - prog.chunk(s, c).expert_params;
        experts += prog.chunk(s, c).expert_params;
      }
      for (const Bucket& b : allgather_buckets(s, elems, z.allgather_bucket)) prog.param_buckets.push_back(b);
      for (const Bucket& b : allgather_buckets(s, experts, z.allgather_bucket, true)) prog.param_buckets.push_back(b);
    }
  }
}

Context make_context(Program& prog) {
  const spec::Plan& p = prog.plan;
  Context cx;
  cx.program = &prog;
  cx.units = shared_model_units(prog.model, p.tp, p.ep, p.etp);
  cx.framework = prog.training.framework_profile(p.tp, p.zero.stage);
  cx.tokens = prog.tokens_per_micro_batch();
  cx.p2p_bytes = p2p_message_bytes(cx.tokens, prog.model.hidden, p.tp, prog.activation_bytes);
  cx.tp_bytes = tp_collective_bytes(cx.tokens, prog.model.hidden, prog.activation_bytes);
  cx.tp_collectives = p.tp > 1;
  cx.cp_collectives = p.cp > 1;
  cx.cp_shapes = cp_shapes(prog.model, p.tp, prog.activation_bytes);
  cx.dp_collectives = p.dp_cp() > 1;
  cx.zero3_gathers = p.zero.stage == 3 && p.dp_cp() > 1;
  cx.per_mb_reduce = p.zero.stage >= 2 && p.dp_cp() > 1;
  const spec::ZeroConfig& z = p.zero;
  cx.partition = spec::partition_group(z, p.dp_cp());
  cx.replicas = cx.partition < p.dp_cp();
  cx.partition_group = cx.replicas ? Group::kDpShard : Group::kDp;
  cx.replica_at_step = cx.replicas && spec::replica_sync(z, prog.training.framework) == spec::ReplicaSync::kStep;
  cx.replica_lane = cx.framework.replica_stream ? Lane::kDpReplica : Lane::kDpReduce;
  cx.hierarchical_gather = cx.replicas && z.hierarchical_gather;
  cx.hpz = cx.zero3_gathers && spec::secondary_partition(z, p.dp_cp());
  cx.hpz_every_forward = cx.hpz && prog.training.framework == spec::Framework::kFsdp2;
  cx.rule = bucket_rule(z, cx.framework);
  cx.qwz_block = cx.zero3_gathers && z.quantized_weights.on() ? z.quantized_weights.block : 0;
  // DeepSpeed all-to-alls only across more than one node (stage3.py __avg_scatter_grads: num_nodes > 1)
  cx.qgz = cx.per_mb_reduce && z.stage == 3 && z.quantized_gradients.on() && prog.placement.local_size() < p.dp_cp();
  if (cx.qgz) cx.rule.qgz_world = p.dp_cp();
  cx.ep_collectives = prog.model.moe.on() && (p.ep > 1 || p.etp > 1);
  cx.aux_counts_bytes = moe_aux_counts_bytes(prog.model, prog.training, p.tp, p.cp, prog.forward_only);
  cx.expert_dp = p.expert_dp();
  cx.experts_apart = prog.placement.experts_apart;
  if (p.moe_dispatcher == spec::MoeDispatcher::kAllGather) {
    cx.allgather = moe_allgather_bytes(cx.tokens, prog.model, p.tp, p.etp * p.ep, prog.activation_bytes);
  } else if (p.moe_dispatcher == spec::MoeDispatcher::kFlex) {
    cx.flex_bytes = moe_flex_bytes(cx.tokens, prog.model, p.tp, p.ep, p.etp, prog.activation_bytes);
  } else {
    cx.a2a_bytes = p.ep > 1 ? moe_a2a_bytes(cx.tokens, prog.model, p.tp, prog.activation_bytes) : 0;
    cx.etp_bytes = moe_etp_bytes(cx.tokens, prog.model, p.tp, p.etp, prog.activation_bytes);
  }
  for (int32_t s = 0; s < p.pp; ++s) cx.stage_params.push_back(stage_unit_params(prog, *cx.units, s));
  return cx;
}

}  // namespace

Program lower(const spec::Model& model_in, const spec::Training& training, const spec::Plan& plan, LowerOptions options) {
  const spec::Model model = spec::with_training_length(model_in, training);
  spec::validate_plan(plan, model, training, plan.world());
  Program prog;
  prog.model = model;
  prog.training = training;
  prog.plan = plan;
  prog.placement = Placement{plan.tp, plan.pp, plan.dp_cp()};
  prog.placement.cp = plan.cp;
  prog.placement.ep = plan.ep;
  prog.placement.etp = plan.etp;
  prog.placement.experts_apart = model.moe.on() && plan.expert_dp() != plan.dp_cp();
  prog.placement.moe_counts = moe_aux_counts_bytes(model, training, plan.tp, plan.cp, options.forward_only) > 0;
  // the data-parallel subgroups: the partition's shard group (or hpZ's), a node's ranks
  if (spec::hierarchical(plan.zero, plan.dp_cp())) prog.placement.inner = plan.zero.shard_group;
  if (spec::secondary_partition(plan.zero, plan.dp_cp())) prog.placement.inner = plan.zero.hpz_group;
  if (plan.zero.local_group > 0 && plan.zero.local_group < plan.dp_cp()) prog.placement.local = plan.zero.local_group;
  prog.forward_only = options.forward_only;
  prog.param_bytes = spec::bytes_of(spec::storage_dtype(training.dtype));
  prog.reduce_bytes = training.reduce_bytes();
  prog.activation_bytes = spec::bytes_of(spec::storage_dtype(training.dtype));

  const std::shared_ptr<const std::vector<Unit>> units = shared_model_units(model, plan.tp, plan.ep, plan.etp);
  const std::vector<int64_t> layers = chunk_layers(model, plan, *units);
  prog.chunks = place_chunks(model, plan.pp, plan.virtual_stages, layers);
  prog.plan.stage_layers = stage_layers_of(layers, plan.pp);

  Context cx = make_context(prog);
  for (ChunkInfo& c : prog.chunks) {
    for (int32_t u = c.unit_begin; u < c.unit_end; ++u) {
      c.params += cx.stage_params[c.stage][u].elems;
      if (cx.experts_apart) c.expert_params += (*cx.units)[static_cast<std::size_t>(u)].expert_params;
    }
  }
  plan_chunks(prog, cx);

  std::vector<std::vector<Step>> steps = schedule_steps(prog.plan);
  if (options.forward_only) {
    for (std::vector<Step>& stage : steps) std::erase_if(stage, [](const Step& s) { return s.pass != Pass::kForward; });
  }
  prog.roles.resize(static_cast<std::size_t>(plan.pp));
  prog.rank_role.resize(static_cast<std::size_t>(plan.world()));
  // each stage's list, then its graph (whose errors name instructions by id), over the threads
  // asked for: a stage reads the context and writes its own role only
  thread::parallel_for(prog.roles.size(), options.threads, [&](std::size_t s) {
    RoleProgram& role = prog.roles[s];
    role.stage = static_cast<int32_t>(s);
    if (options.only_stage < 0 || options.only_stage == role.stage) detail::emit_stage(cx, role.stage, steps[s], role);
  });
  int32_t next_id = 0;
  for (RoleProgram& role : prog.roles) {
    role.first_id = next_id;
    next_id += static_cast<int32_t>(role.instrs.size());
  }
  thread::parallel_for(prog.roles.size(), options.threads, [&](std::size_t s) { prog.roles[s].graph = build_graph(prog.roles[s]); });
  for (int32_t s = 0; s < plan.pp; ++s) {
    RoleProgram& role = prog.roles[s];
    for (int64_t d = 0; d < plan.dp_cp(); ++d) {
      for (int64_t t = 0; t < plan.tp; ++t) {
        const int64_t r = prog.placement.rank(s, d, t);
        role.ranks.push_back(r);
        prog.rank_role[r] = s;
      }
    }
  }
#ifndef NDEBUG
  if (options.only_stage < 0) check(prog);  // debug builds check every lowering (tests check explicitly in every build)
#endif
  return prog;
}

std::size_t Program::instruction_count() const {
  std::size_t n = 0;
  for (const RoleProgram& r : roles) n += r.instrs.size();
  return n;
}

MessageKey message_of(const Placement& pl, int64_t rank, const Instr& in) {
  const int64_t peer = pl.rank(in.peer_stage, pl.dp_index_of(rank), pl.tp_index_of(rank));
  if (is_send(in.op)) return {rank, peer, in.mb, in.chunk, in.op == Op::kSendGrad};
  return {peer, rank, in.mb, in.peer_chunk, in.op == Op::kRecvGrad};
}

std::vector<int64_t> Placement::group_members(Group kind, int64_t r) const {
  const int64_t s = stage_of(r), d = dp_index_of(r), t = tp_index_of(r);
  std::vector<int64_t> out;
  switch (kind) {
    case Group::kNone: out.push_back(r); break;
    case Group::kTp:
      for (int64_t i = 0; i < tp; ++i) out.push_back(rank(s, d, i));
      break;
    case Group::kDp:
      for (int64_t i = 0; i < dp; ++i) out.push_back(rank(s, i, t));
      break;
    case Group::kEmbedding:
      out.push_back(rank(0, d, t));
      if (pp > 1) out.push_back(rank(pp - 1, d, t));
      break;
    case Group::kWorld:
      for (int64_t i = 0; i < world(); ++i) out.push_back(i);
      break;
    case Group::kDpShard:
    case Group::kDpLocal: {
      const int64_t g = kind == Group::kDpShard ? inner_size() : local_size();
      for (int64_t i = d - d % g; i < d - d % g + g; ++i) out.push_back(rank(s, i, t));
      break;
    }
    case Group::kDpReplica:
    case Group::kDpCross: {
      const int64_t g = kind == Group::kDpReplica ? inner_size() : local_size();
      for (int64_t i = d % g; i < dp; i += g) out.push_back(rank(s, i, t));
      break;
    }
    case Group::kDpShardCross: {
      const int64_t g = inner_size(), l = local_size(), base = d - d % g;
      for (int64_t i = base + d % l; i < base + g; i += l) out.push_back(rank(s, i, t));
      break;
    }
    case Group::kCp:
      for (int64_t i = d - d % cp; i < d - d % cp + cp; ++i) out.push_back(rank(s, i, t));
      break;
    case Group::kTpCp:
      for (int64_t i = d - d % cp; i < d - d % cp + cp; ++i) {
        for (int64_t j = 0; j < tp; ++j) out.push_back(rank(s, i, j));
      }
      break;
    case Group::kEp:
    case Group::kExpertDp:
    case Group::kExpertTp:
    case Group::kExpertTpEp: {
      // l = d·tp + t, the rank's place among its stage's tp·dp ranks, in the expert grid
      // etp × ep × edp, etp fastest (instruction.hpp, Group)
      const int64_t l = d * tp + t, grid = etp * ep;
      int64_t first = 0, step = 1, last = 0;
      if (kind == Group::kExpertTp) {
        first = l - l % etp, last = first + etp;
      } else if (kind == Group::kExpertTpEp) {
        first = l - l % grid, last = first + grid;
      } else if (kind == Group::kEp) {
        first = l - l % grid + l % etp, step = etp, last = l - l % grid + grid;
      } else {
        first = l % grid, step = grid, last = tp * dp;
      }
      for (int64_t i = first; i < last; i += step) out.push_back(rank(s, i / tp, i % tp));
      break;
    }
  }
  return out;
}

}  // namespace stagecraft::program
