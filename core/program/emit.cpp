// Expands one stage's schedule steps into instructions (see lower_context.hpp, docs/program.md).
#include <array>
#include <map>
#include <tuple>
#include <utility>
#include <optional>

#include "core/count/tensors.hpp"
#include "core/spec/error.hpp"
#include "core/program/comm_rules.hpp"
#include "core/program/lower_context.hpp"
#include "core/program/param_tracker.hpp"

namespace stagecraft::program::detail {

namespace {

struct SegPass {
  Op op;
  int32_t seg;
};

Op backward_op(Pass p) { return p == Pass::kBackwardInput ? Op::kBackwardInput : Op::kBackward; }

// The compute passes of one step, in emission order. With full recompute each block's segments
// are re-run forward just before their backward.
std::vector<SegPass> seg_passes(const ChunkPlan& cp, Pass pass, bool full_recompute) {
  std::vector<SegPass> out;
  const int32_t n = static_cast<int32_t>(cp.segments.size());
  if (pass == Pass::kForward) {
    for (int32_t i = 0; i < n; ++i) out.push_back({Op::kForward, i});
    return out;
  }
  if (pass == Pass::kBackwardWeight) {
    for (int32_t i = n - 1; i >= 0; --i) out.push_back({Op::kBackwardWeight, i});
    return out;
  }
  const Op bop = backward_op(pass);
  for (int32_t end = n; end > 0;) {
    int32_t begin = end - 1;
    if (full_recompute) {
      while (begin > 0 && cp.segments[begin - 1].group == cp.segments[end - 1].group) --begin;
    }
    if (full_recompute && cp.segments[begin].group >= 0) {
      for (int32_t i = begin; i < end; ++i) out.push_back({Op::kRecompute, i});
    }
    for (int32_t i = end - 1; i >= begin; --i) out.push_back({bop, i});
    end = begin;
  }
  return out;
}

bool uses_params(Op op) { return op != Op::kBackwardWeight; }
bool makes_weight_grads(Op op) { return op == Op::kBackward || op == Op::kBackwardWeight; }

struct Deferred {
  int32_t grad_bucket;
  int32_t mb;
  int16_t chunk;
  int32_t dep;
};

class Emitter {
 public:
  Emitter(const Context& cx, int32_t stage, RoleProgram& role)
      : cx_(cx), prog_(*cx.program), plan_(prog_.plan), stage_(stage), role_(role) {}

  void run(const std::vector<Step>& steps);

 private:
  int32_t add(Instr in, std::initializer_list<int32_t> deps);
  void step(const Step& s);
  Instr p2p(Op op, const Step& s, bool upstream) const;
  int32_t compute(const SegPass& sp, const Step& s, int32_t first_dep);
  int32_t tp_op(Op op, const Step& s, int32_t unit, int64_t bytes, int32_t dep, uint8_t flags);
  int32_t cp_op(const CpCollective& c, const Step& s, int32_t unit, int32_t dep, uint8_t flags, int32_t gather = -1,
                int32_t tied_gather = -1);
  int32_t ep_op(const Step& s, int32_t unit, int32_t dep, uint8_t flags);
  int32_t expert_op(Op op, Group group, int64_t bytes, const Step& s, int32_t unit, int32_t dep, uint8_t flags);
  int32_t aux_counts(const Step& s, int32_t unit, int32_t dep);
  int32_t param_op(Op op, int32_t bucket, Group group, int32_t dep, int64_t bytes = -1, uint8_t flags = kFlagNone);
  int32_t gather(int32_t bucket, int32_t dep, bool for_forward);
  QuantizedGather quantized_gather(int32_t bucket, int64_t members);
  int32_t replica_reduce(int32_t grad_bucket, int32_t mb, int16_t chunk, int32_t dep);
  void quantized_reduce(Instr plain, int32_t dep, int32_t tied, int32_t also);
  void grads_ready(const Step& s, const Segment& seg, int32_t instr);
  // `also`: a second instruction it waits for (a deferred reduction: the one completing its gradients)
  void reduce(int32_t grad_bucket, int32_t mb, int16_t chunk, int32_t dep, int32_t also = -1);
  void flush(std::vector<Deferred>& list, int32_t dep);
  void step_end();
  bool has_prev(int32_t chunk) const { return stage_ > 0 || chunk > 0; }
  bool has_next(int32_t chunk) const { return stage_ < plan_.pp - 1 || chunk < plan_.virtual_stages - 1; }
  int16_t prev_stage() const { return static_cast<int16_t>(stage_ > 0 ? stage_ - 1 : plan_.pp - 1); }
  int16_t next_stage() const { return static_cast<int16_t>(stage_ < plan_.pp - 1 ? stage_ + 1 : 0); }
  int16_t prev_chunk(int32_t c) const { return static_cast<int16_t>(stage_ > 0 ? c : c - 1); }
  int16_t next_chunk(int32_t c) const { return static_cast<int16_t>(stage_ < plan_.pp - 1 ? c : c + 1); }

  const Context& cx_;
  const Program& prog_;
  const spec::Plan& plan_;
  int32_t stage_;
  RoleProgram& role_;
  std::optional<ParamTracker> tracker_;
  std::vector<uint8_t> gathered_;        // per ZeRO-3 bucket: gathered before in this step (hpZ)
  std::map<std::pair<int32_t, int64_t>, QuantizedGather> quantized_;   // qwZ: (bucket, group size) -> its bytes
  std::vector<std::pair<int32_t, int32_t>> replica_deferred_;  // (grad bucket, its last reduction): all-reduced at step end
  std::vector<Deferred> step_deferred_, end_deferred_;
  int32_t last_compute_ = -1;
  int32_t last_reduce_ = -1;
  int32_t last_replica_ = -1;    // the latest replica all-reduce (its lane may not be the reduce lane)
  std::array<int32_t, kGroupCount> last_dp_collective_ = make_filled(-1);   // per group: the latest collective
  static std::array<int32_t, kGroupCount> make_filled(int32_t v) {
    std::array<int32_t, kGroupCount> a{};
    a.fill(v);
    return a;
  }
  int32_t last_send_ = -1;       // the latest pipeline send
  // cp's p2p ring beside an attention pass: the last of its exchanges, which every instruction
  // consuming the pass's result waits for, up to and including the next compute
  int32_t cp_join_ = -1;
  int32_t blocking_send_ = -1;   // a send the next compute waits for (no p2p overlap)
  int32_t blocking_reduce_ = -1; // a reduction the next compute waits for (the host synchronises on it)
  // tp > 1: the last instruction of each (chunk, micro-batch)'s forward — its backward's input
  // (the head's loss reduction) — and each backward-input segment's collective, which completes
  // the segment's input gradient (the norm's weight gradient needs it; zero-bubble W waits).
  std::map<std::pair<int32_t, int32_t>, int32_t> forward_end_;                       // (chunk, mb)
  std::map<std::tuple<int32_t, int32_t, int32_t>, int32_t> input_grad_collective_;   // (chunk, mb, segment)
  static std::pair<int32_t, int32_t> mb_key(const Step& s) { return {s.chunk, s.mb}; }
  static std::tuple<int32_t, int32_t, int32_t> seg_key(const Step& s, int32_t seg) { return {s.chunk, s.mb, seg}; }
};

int32_t Emitter::add(Instr in, std::initializer_list<int32_t> deps) {
  in.dep_begin = static_cast<int32_t>(role_.deps.size());
  for (int32_t d : deps) {
    if (d >= 0) role_.deps.push_back(d);
  }
  // one communicator for gathers and reductions: each data-parallel collective after the one
  // issued before it on the same group, whichever lane that was on (framework.hpp, Communicators);
  // the data-parallel subgroups are communicators of their own
  const bool dp_collective = is_dp_group(in.group) && is_collective(in.op);
  int32_t& last_dp = last_dp_collective_[static_cast<std::size_t>(in.group)];
  if (dp_collective && cx_.framework.one_dp_communicator && last_dp >= 0) role_.deps.push_back(last_dp);
  const bool consumes = in.lane == Lane::kCompute || in.lane == Lane::kTp || in.lane == Lane::kPpSend ||
                        in.lane == Lane::kDpReduce || in.lane == Lane::kDpReplica || in.lane == Lane::kOffload;
  if (cp_join_ >= 0 && consumes) {
    role_.deps.push_back(cp_join_);
    if (in.lane == Lane::kCompute) cp_join_ = -1;
  }
  in.dep_count = static_cast<int16_t>(static_cast<int32_t>(role_.deps.size()) - in.dep_begin);
  role_.instrs.push_back(in);
  const int32_t index = static_cast<int32_t>(role_.instrs.size()) - 1;
  if (in.lane == Lane::kCompute) last_compute_ = index;
  if (in.lane == Lane::kDpReduce) last_reduce_ = index;
  if (dp_collective) last_dp = index;
  return index;
}

void Emitter::run(const std::vector<Step>& steps) {
  const bool full = plan_.recompute == spec::Recompute::kFull;
  if (cx_.zero3_gathers) {
    std::vector<int32_t> uses, passes;
    std::vector<uint8_t> forward_use;   // per use: a forward's (hpZ's every-forward rule)
    int32_t pass = 0;
    for (const Step& s : steps) {
      const ChunkPlan& cp = cx_.chunk_plan(stage_, s.chunk);
      std::optional<Op> previous;
      for (const SegPass& sp : seg_passes(cp, s.pass, full)) {
        if (previous != sp.op) ++pass;
        previous = sp.op;
        if (!uses_params(sp.op)) continue;
        for (int32_t b : {cp.segments[sp.seg].tied_bucket, cp.segments[sp.seg].param_bucket}) {
          if (b < 0) continue;
          uses.push_back(b);
          passes.push_back(pass);
          forward_use.push_back(sp.op == Op::kForward);
        }
      }
    }
    const bool device_sync = cx_.framework.prefetch == spec::Prefetch::kNone;
    gathered_.assign(prog_.param_buckets.size(), 0);
    tracker_.emplace(prog_, cx_.framework, std::move(uses), std::move(passes),
                     [this, device_sync, forward_use = std::move(forward_use)](Op op, int32_t bucket, int32_t dep, std::size_t use) {
                       // a synchronous fetch starts once every earlier instruction of the compute stream is done
                       if (op == Op::kGatherParams && device_sync) dep = last_compute_;
                       if (op == Op::kReleaseParams) return param_op(op, bucket, Group::kNone, dep);
                       const bool forward = use < forward_use.size() && forward_use[use] != 0;
                       return gather(bucket, dep, forward);
                     });
  }
  // room for the list up front (an estimate over the steps' segments): growing it copies every
  // instruction already emitted, several times over
  const std::size_t per_segment = 1 + (cx_.tp_collectives ? 2 : 0) + (cx_.zero3_gathers ? 2 : 0) + (cx_.cp_collectives ? 2 : 0) +
                                  (cx_.ep_collectives ? 4 : 0);
  std::size_t expected = 8;
  for (const Step& s : steps) {
    const std::size_t segments = cx_.chunk_plan(stage_, s.chunk).segments.size();
    expected += 2 + segments * per_segment * (full && s.pass != Pass::kForward ? 2 : 1);
  }
  role_.instrs.reserve(role_.instrs.size() + expected);
  role_.deps.reserve(role_.deps.size() + 2 * expected);
  for (const Step& s : steps) step(s);
  step_end();
}

// A pipeline message of step `s`: towards the next model chunk (upstream = false) or the
// previous one (upstream = true).
Instr Emitter::p2p(Op op, const Step& s, bool upstream) const {
  Instr in;
  in.op = op;
  in.lane = program::is_send(op) ? Lane::kPpSend : Lane::kPpRecv;
  in.mb = s.mb;
  in.chunk = static_cast<int16_t>(s.chunk);
  in.peer_stage = upstream ? prev_stage() : next_stage();
  in.peer_chunk = upstream ? prev_chunk(s.chunk) : next_chunk(s.chunk);
  in.bytes = cx_.p2p_bytes;
  return in;
}

void Emitter::step(const Step& s) {
  const ChunkPlan& cp = cx_.chunk_plan(stage_, s.chunk);
  const bool forward = s.pass == Pass::kForward;
  const bool weight_only = s.pass == Pass::kBackwardWeight;
  int32_t recv = -1;
  if (!weight_only && (forward ? has_prev(s.chunk) : has_next(s.chunk))) {
    recv = add(p2p(forward ? Op::kRecvActivation : Op::kRecvGrad, s, forward), {});
    // scatter-gather: the receiver rebuilds the whole activation from the tp ranks' pieces
    if (gathers_received_message(plan_.tp, plan_.sequence_parallel)) {
      recv = tp_op(Op::kTpAllGather, s, -1, cx_.tp_bytes, recv, forward ? kFlagNone : kFlagGrad);
    }
  }
  // Without p2p overlap the stage computes on only once its previous send has completed.
  int32_t chain = recv;
  // tp > 1: a backward without a received gradient (the last stage's) starts from its forward's
  // last collective, the loss reduction, as Megatron's does
  if (cx_.tp_collectives && !forward && !weight_only && recv < 0) {
    if (auto it = forward_end_.find(mb_key(s)); it != forward_end_.end()) chain = it->second;
  }
  blocking_send_ = plan_.overlap_p2p ? -1 : last_send_;
  for (const SegPass& sp : seg_passes(cp, s.pass, plan_.recompute == spec::Recompute::kFull)) {
    chain = compute(sp, s, chain);
  }
  if (cx_.tp_collectives && forward) forward_end_[mb_key(s)] = chain;
  if (!weight_only && (forward ? has_next(s.chunk) : has_prev(s.chunk))) {
    last_send_ = add(p2p(forward ? Op::kSendActivation : Op::kSendGrad, s, !forward), {chain});
  }
  flush(step_deferred_, last_compute_);
}

int32_t Emitter::tp_op(Op op, const Step& s, int32_t unit, int64_t bytes, int32_t dep, uint8_t flags) {
  Instr in;
  in.op = op;
  in.flags = flags;
  in.lane = Lane::kTp;
  in.group = Group::kTp;
  in.mb = s.mb;
  in.chunk = static_cast<int16_t>(s.chunk);
  if (unit >= 0) {
    in.unit_begin = unit;
    in.unit_end = unit + 1;
  }
  in.bytes = bytes;
  in.elems = bytes / prog_.activation_bytes;
  return add(in, {dep});
}

// A context-parallel collective of an attention unit's pass over Group::kCp (comm_rules.hpp); one
// before or beside the compute also waits for the unit's ZeRO-3 gathers (`gather`, `tied_gather`):
// what it sends is made with the unit's parameters (the QKV projection; a2a's backward, the output
// projection's input gradient).
int32_t Emitter::cp_op(const CpCollective& c, const Step& s, int32_t unit, int32_t dep, uint8_t flags, int32_t gather,
                       int32_t tied_gather) {
  Instr in;
  in.op = c.op;
  in.flags = flags;
  in.lane = Lane::kCp;
  in.group = Group::kCp;
  in.mb = s.mb;
  in.chunk = static_cast<int16_t>(s.chunk);
  in.unit_begin = unit;
  in.unit_end = unit + 1;
  in.bytes = c.bytes;
  in.elems = c.bytes / prog_.activation_bytes;
  return add(in, {dep, gather, tied_gather});
}

// An expert-parallel all-to-all of a MoE unit's pass over Group::kEp (comm_rules.hpp): a dispatch
// or a combine, or either's gradient.
int32_t Emitter::ep_op(const Step& s, int32_t unit, int32_t dep, uint8_t flags) {
  Instr in;
  in.op = Op::kAllToAll;
  in.flags = flags;
  in.lane = Lane::kEp;
  in.group = Group::kEp;
  in.mb = s.mb;
  in.chunk = static_cast<int16_t>(s.chunk);
  in.unit_begin = unit;
  in.unit_end = unit + 1;
  in.bytes = cx_.a2a_bytes;
  in.elems = cx_.a2a_bytes / prog_.activation_bytes;
  return add(in, {dep});
}

// An all-gather or reduce-scatter of a MoE unit's pass on the expert-parallel lane
// (comm_rules.hpp): expert tensor parallelism's over Group::kExpertTp, or the all-gather
// dispatcher's or the flex dispatcher's all-to-alls over Group::kExpertTpEp.
int32_t Emitter::expert_op(Op op, Group group, int64_t bytes, const Step& s, int32_t unit, int32_t dep, uint8_t flags) {
  Instr in;
  in.op = op;
  in.flags = flags;
  in.lane = Lane::kEp;
  in.group = group;
  in.mb = s.mb;
  in.chunk = static_cast<int16_t>(s.chunk);
  in.unit_begin = unit;
  in.unit_end = unit + 1;
  in.bytes = bytes;
  in.elems = bytes / prog_.activation_bytes;
  return add(in, {dep});
}

// The balancing loss's token counts of MoE unit `unit`, all-reduced over Group::kTpCp on the tp lane
// (comm_rules.hpp, moe_aux_counts_bytes).
int32_t Emitter::aux_counts(const Step& s, int32_t unit, int32_t dep) {
  Instr in;
  in.op = Op::kTpAllReduce;
  in.lane = Lane::kTp;
  in.group = Group::kTpCp;
  in.mb = s.mb;
  in.chunk = static_cast<int16_t>(s.chunk);
  in.unit_begin = unit;
  in.unit_end = unit + 1;
  in.bytes = cx_.aux_counts_bytes;
  in.elems = prog_.model.moe.experts;
  return add(in, {dep});
}

// A ZeRO-3 parameter instruction of `bucket` on the gather lane: a gather over `group` moving
// `bytes` (the bucket's, by default), or a release.
int32_t Emitter::param_op(Op op, int32_t bucket, Group group, int32_t dep, int64_t bytes, uint8_t flags) {
  const Bucket& b = prog_.param_buckets[bucket];
  Instr in;
  in.op = op;
  in.lane = Lane::kDpGather;
  in.group = group;
  in.flags = flags;
  in.bucket = bucket;
  in.chunk = static_cast<int16_t>(b.chunk);
  in.unit_begin = b.unit_begin;
  in.unit_end = b.unit_end;
  in.elems = b.elems;
  in.bytes = op == Op::kGatherParams ? (bytes >= 0 ? bytes : b.elems * prog_.param_bytes) : 0;
  return add(in, {dep});
}

// A ZeRO-3 gather of `bucket`, over the group the plan's partition says (docs/program.md):
//   plain           kDp
//   shard group     kDpShard; MiCS's hierarchical gather first over kDpShardCross (the same local
//                   rank on the shard group's nodes: 1/l of the bucket), then kDpLocal (the whole)
//   hpZ             kDp for a bucket's first gather of the step, kDpShard (the secondary
//                   partition) for every later one; FSDP2's reshard_after_forward=<int>: kDp for
//                   every forward's gather, kDpShard for the backward's
int32_t Emitter::gather(int32_t bucket, int32_t dep, bool for_forward) {
  const int32_t index = [&] {
    if (cx_.hierarchical_gather) {
      const int64_t whole = prog_.param_buckets[bucket].elems * prog_.param_bytes;
      const int32_t cross = param_op(Op::kGatherParams, bucket, Group::kDpShardCross, dep,
                                     whole / prog_.placement.local_size(), kFlagFirstLevel);
      return param_op(Op::kGatherParams, bucket, Group::kDpLocal, cross);
    }
    Group group = cx_.partition_group;
    if (cx_.hpz) {
      const bool global = cx_.hpz_every_forward ? for_forward : gathered_[bucket] == 0;
      group = global ? Group::kDp : Group::kDpShard;
    }
    if (cx_.qwz_block > 0) {
      const int64_t members = group == Group::kDp ? plan_.dp_cp() : prog_.placement.inner_size();
      return param_op(Op::kGatherParams, bucket, group, dep, quantized_gather(bucket, members).bytes, kFlagQuantized);
    }
    return param_op(Op::kGatherParams, bucket, group, dep);
  }();
  gathered_[bucket] = 1;
  return index;
}

// qwZ's gather of `bucket` over `members` ranks (zero.hpp): int8 values and fp32 scales; each
// (bucket, group size) worked out once.
QuantizedGather Emitter::quantized_gather(int32_t bucket, int64_t members) {
  const auto key = std::make_pair(bucket, members);
  if (auto it = quantized_.find(key); it != quantized_.end()) return it->second;
  const Bucket& b = prog_.param_buckets[bucket];
  std::vector<int64_t> tensors;
  for (int32_t u = b.unit_begin; u < b.unit_end; ++u) {
    const UnitParams& p = cx_.stage_params[stage_][u];
    tensors.insert(tensors.end(), p.gathered.begin(), p.gathered.end());
  }
  const QuantizedGather q = qwz_gather(tensors, cx_.rule, plan_.dp_cp(), members, cx_.qwz_block);
  if (q.bad_shard > 0) {
    throw spec::SpecError(plan_.file, "/zero/quantized_weights",
                          "false for this model and dp: DeepSpeed's qwZ quantizer needs each gathered shard a multiple of 8 "
                          "elements in groups under 16000 (partition_parameters.py CUDAQuantizer asserts it), and a shard of "
                          "units [" + std::to_string(b.unit_begin) + ", " + std::to_string(b.unit_end) + ") has " +
                              std::to_string(q.bad_shard));
  }
  quantized_.emplace(key, q);
  return q;
}

int32_t Emitter::compute(const SegPass& sp, const Step& s, int32_t chain) {
  const Segment& seg = cx_.chunk_plan(stage_, s.chunk).segments[sp.seg];
  TpAround tp;
  if (cx_.tp_collectives) {
    tp = tp_collectives((*cx_.units)[seg.unit_begin].kind, sp.op, plan_.sequence_parallel, cx_.tokens, prog_.model.hidden,
                        prog_.activation_bytes, prog_.model.moe.shared_ffn_hidden > 0);
  }
  const bool grad_pass = sp.op == Op::kBackward || sp.op == Op::kBackwardInput;
  const uint8_t tp_flags = grad_pass ? kFlagGrad : sp.op == Op::kRecompute ? kFlagRecompute : kFlagNone;
  if (tp.before) chain = tp_op(tp.before->op, s, seg.unit_begin, tp.before->bytes, chain, tp_flags);
  CpAround cp;
  if (cx_.cp_collectives) {
    cp = cp_collectives((*cx_.units)[seg.unit_begin].kind, sp.op, plan_.cp_comm, plan_.cp, cx_.tokens, cx_.cp_shapes);
  }
  // zero-bubble W: the segment's input gradient, and with it the norm's, is complete
  int32_t input_grad = -1;
  if (sp.op == Op::kBackwardWeight) {
    if (auto it = input_grad_collective_.find(seg_key(s, sp.seg)); it != input_grad_collective_.end()) input_grad = it->second;
  }
  // ZeRO-3: the segment's buckets (a tied head's embedding table first) must be resident, for the
  // compute and for the cp collectives before and beside it.
  const bool tracked = tracker_ && uses_params(sp.op);
  int32_t gather = -1, tied_gather = -1;
  if (tracked && seg.tied_bucket >= 0) tied_gather = tracker_->before_use(seg.tied_bucket);
  if (tracked && seg.param_bucket >= 0) gather = tracker_->before_use(seg.param_bucket);
  for (const CpCollective& c : cp.before) chain = cp_op(c, s, seg.unit_begin, chain, tp_flags, gather, tied_gather);
  int32_t beside = -1;
  for (const CpCollective& c : cp.beside) beside = cp_op(c, s, seg.unit_begin, chain, tp_flags, gather, tied_gather);

  Instr in;
  in.op = sp.op;
  in.lane = Lane::kCompute;
  in.mb = s.mb;
  in.chunk = static_cast<int16_t>(s.chunk);
  in.unit_begin = seg.unit_begin;
  in.unit_end = seg.unit_end;
  in.bucket = seg.param_bucket;
  const bool selective = plan_.recompute == spec::Recompute::kSelective;
  double per_token = 0;
  for (int32_t u = seg.unit_begin; u < seg.unit_end; ++u) {
    const Unit& unit = (*cx_.units)[u];
    in.elems += cx_.stage_params[stage_][u].elems;
    switch (sp.op) {
      case Op::kForward:
      case Op::kRecompute: per_token += unit.fwd_flops_per_token; break;
      case Op::kBackward:
        per_token += unit.bwd_input_flops_per_token + unit.bwd_weight_flops_per_token;
        if (selective) per_token += unit.score_flops_per_token;
        break;
      case Op::kBackwardInput:
        per_token += unit.bwd_input_flops_per_token + (selective ? unit.score_flops_per_token : 0);
        break;
      default: per_token += unit.bwd_weight_flops_per_token; break;
    }
  }
  in.flops = per_token * static_cast<double>(cx_.tokens);
  // DeepSpeed (a coalesced gather) and FSDP2 (a block) copy the gathered buffer out parameter by
  // parameter when the compute waits for it:
  // the first use after each gather moves 2 bytes per coalesced byte (Instr::bytes of a compute)
  if (tracked && cx_.framework.coalesced_copy_passes > 0) {
    for (int32_t b : {seg.tied_bucket, seg.param_bucket}) {
      if (b < 0 || !tracker_->fresh(b)) continue;
      in.bytes += static_cast<int64_t>(cx_.framework.coalesced_copy_passes *
                                       static_cast<double>(prog_.param_buckets[b].coalesced_elems * prog_.param_bytes));
    }
  }
  // Expert parallelism: a MoE unit's pass in two computes around its all-to-alls (comm_rules.hpp)
  const Unit& first = (*cx_.units)[seg.unit_begin];
  const bool split = cx_.ep_collectives && first.kind == UnitKind::kMoe && sp.op != Op::kBackwardWeight;
  // the balancing loss's counts, after the route of a pass whose activations the backward uses
  const bool counts = cx_.aux_counts_bytes > 0 &&
                      (sp.op == Op::kRecompute ||
                       (sp.op == Op::kForward && !(plan_.recompute == spec::Recompute::kFull && seg.group >= 0)));
  int32_t computed = -1;
  if (!split) {
    computed = add(in, {chain, gather, tied_gather, blocking_send_, blocking_reduce_, input_grad});
    if (counts) {
      for (int32_t u = seg.unit_begin; u < seg.unit_end; ++u) {
        if ((*cx_.units)[u].kind == UnitKind::kMoe) computed = aux_counts(s, u, computed);
      }
    }
  } else {
    const double passes = sp.op == Op::kBackward ? 2.0 : 1.0;   // Backward: input and weight gradients
    Instr experts = in;
    experts.flags = kFlagExperts;
    experts.flops = passes * first.expert_flops_per_token * static_cast<double>(cx_.tokens);
    experts.elems = first.expert_params;
    experts.bytes = 0;
    Instr rest = in;
    rest.flops = in.flops - experts.flops;
    rest.elems = in.elems - first.expert_params;
    // the tokens to the experts' ranks (and their etp peers) before the experts, back after
    const int32_t unit = seg.unit_begin;
    const bool grad = sp.op != Op::kForward && sp.op != Op::kRecompute;
    const MoeAllGatherBytes& ag = cx_.allgather;
    auto to_experts = [&](int32_t dep) {
      if (cx_.flex_bytes > 0) return expert_op(Op::kAllToAll, Group::kExpertTpEp, cx_.flex_bytes, s, unit, dep, tp_flags);
      if (ag.gather > 0) {
        return expert_op(Op::kTpAllGather, Group::kExpertTpEp, grad ? ag.grad_gather : ag.gather, s, unit, dep, tp_flags);
      }
      if (cx_.a2a_bytes > 0) dep = ep_op(s, unit, dep, tp_flags);
      return cx_.etp_bytes > 0 ? expert_op(Op::kTpAllGather, Group::kExpertTp, cx_.etp_bytes, s, unit, dep, tp_flags) : dep;
    };
    auto back = [&](int32_t dep) {
      if (cx_.flex_bytes > 0) return expert_op(Op::kAllToAll, Group::kExpertTpEp, cx_.flex_bytes, s, unit, dep, tp_flags);
      if (ag.scatter > 0) {
        return expert_op(Op::kTpReduceScatter, Group::kExpertTpEp, grad ? ag.grad_scatter : ag.scatter, s, unit, dep, tp_flags);
      }
      if (cx_.etp_bytes > 0) dep = expert_op(Op::kTpReduceScatter, Group::kExpertTp, cx_.etp_bytes, s, unit, dep, tp_flags);
      return cx_.a2a_bytes > 0 ? ep_op(s, unit, dep, tp_flags) : dep;
    };
    if (sp.op == Op::kForward || sp.op == Op::kRecompute) {
      int32_t a = add(rest, {chain, gather, tied_gather, blocking_send_, blocking_reduce_, input_grad});
      if (counts) a = aux_counts(s, unit, a);
      computed = back(add(experts, {to_experts(a)}));
    } else {
      const int32_t e = add(experts, {to_experts(chain), gather, tied_gather, blocking_send_, blocking_reduce_, input_grad});
      computed = add(rest, {back(e)});
    }
  }
  blocking_send_ = -1;
  blocking_reduce_ = -1;
  if (beside >= 0) cp_join_ = beside;
  int32_t index = computed;
  for (const CpCollective& c : cp.after) index = cp_op(c, s, seg.unit_begin, index, tp_flags);
  // A backward's collective completes the input gradient of the norm that opens the segment, and
  // the norm's backward (its input and weight gradients) runs on the summed gradient, with the
  // norm's parameters: the segment's buckets are in use until that collective is done (the
  // module's post-backward release follows its whole backward, all-reduce included).
  // Context parallelism: the pass ends with its last cp collective after the compute (a2a's output
  // projection, a backward's QKV projection input gradient from the reduced dK/dV), which uses the
  // parameters too; p2p's dK/dV reduce beside a backward completes its input gradient (what a
  // zero-bubble W waits for).
  const bool used_through_collective = tp.after && grad_pass;
  const int32_t cp_end = !cp.after.empty() ? index : (grad_pass && cp.beside.size() > 1 ? beside : -1);
  auto used = [&](int32_t instr) {
    if (tracked && seg.tied_bucket >= 0) tracker_->after_use(instr);
    if (tracked && seg.param_bucket >= 0) tracker_->after_use(instr);
  };
  if (!used_through_collective) used(cp.after.empty() ? computed : index);
  if (!tp.after) {
    if (sp.op == Op::kBackwardInput && cp_end >= 0) input_grad_collective_[seg_key(s, sp.seg)] = cp_end;
    if (makes_weight_grads(sp.op)) grads_ready(s, seg, index);
    return index;
  }
  // the segment's gradients are ready once the collective is done
  const int32_t after = tp_op(tp.after->op, s, seg.unit_begin, tp.after->bytes, index, tp_flags);
  if (used_through_collective) used(after);
  if (sp.op == Op::kBackwardInput) input_grad_collective_[seg_key(s, sp.seg)] = after;
  if (makes_weight_grads(sp.op)) grads_ready(s, seg, after);
  return after;
}

// Gradient buckets whose lowest unit this segment produced are complete for this micro-batch:
// ZeRO-2/3 reduce them every micro-batch, ZeRO 0-1 at the last, beside the backward with
// overlap_comm. Not the bucket of a table tied over stages: its sum over the embedding group needs
// the other stage's gradient of the same micro-batch, which that stage computes only once this
// one's backward has passed through the whole pipeline, and what this stage issues after it would
// wait for that: every later data-parallel collective on one communicator (its own gathers too),
// the next compute where the host waits for each reduction (deepspeed-0.5): a deadlock. It
// accumulates over the step and is summed and reduced once, after the stage's last compute, as
// Megatron-LM (finalize_model_grads: the embedding all-reduce after the data-parallel sync) and
// DeepSpeed's pipeline engine (_exec_reduce_tied_grads at the end of the schedule) sum tied
// gradients once a step.
void Emitter::grads_ready(const Step& s, const Segment& seg, int32_t instr) {
  const bool last_mb = s.mb == plan_.micro_batches - 1;
  for (int32_t gb : cx_.chunk_plan(stage_, s.chunk).grad_buckets) {
    const Bucket& b = prog_.grad_buckets[gb];
    if (b.unit_begin < seg.unit_begin || b.unit_begin >= seg.unit_end) continue;
    const int16_t chunk = static_cast<int16_t>(s.chunk);
    if (holds_tied_table(prog_.model, plan_.pp, b)) {
      if (last_mb) end_deferred_.push_back({gb, s.mb, chunk, instr});
    } else if (cx_.per_mb_reduce) {
      if (plan_.zero.overlap_comm) reduce(gb, s.mb, chunk, instr);
      else step_deferred_.push_back({gb, s.mb, chunk, instr});
    } else if (last_mb) {
      if (plan_.zero.overlap_comm) reduce(gb, s.mb, chunk, instr);
      else end_deferred_.push_back({gb, s.mb, chunk, instr});
    }
  }
}

void Emitter::reduce(int32_t grad_bucket, int32_t mb, int16_t chunk, int32_t dep, int32_t also) {
  const Bucket& b = prog_.grad_buckets[grad_bucket];
  const int32_t head = head_unit(prog_.model);
  const bool tied_here = holds_tied_table(prog_.model, plan_.pp, b);
  int32_t tied = -1;
  if (tied_here) {
    Instr in;
    in.op = Op::kAllReduceGrads;
    in.lane = Lane::kDpReduce;
    in.group = Group::kEmbedding;
    in.mb = mb;
    in.chunk = chunk;
    in.unit_begin = stage_ == 0 ? 0 : head;
    in.unit_end = in.unit_begin + 1;
    in.elems = tied_head_copy(prog_.model, plan_.tp);
    in.bytes = in.elems * prog_.reduce_bytes;
    tied = add(in, {dep, also});
  }
  if (b.experts ? cx_.expert_dp == 1 : !cx_.dp_collectives) return;
  // the host waits for the previous bucket's reduction before it queues this one and what follows
  if (cx_.framework.sync_reduce) blocking_reduce_ = last_reduce_;
  Instr in;
  in.op = plan_.zero.stage == 0 ? Op::kAllReduceGrads : Op::kReduceScatterGrads;
  in.lane = Lane::kDpReduce;
  in.group = b.experts ? Group::kExpertDp : cx_.partition_group;
  in.mb = mb;
  in.chunk = chunk;
  in.bucket = grad_bucket;
  in.unit_begin = b.unit_begin;
  in.unit_end = b.unit_end;
  in.elems = b.elems;
  in.bytes = b.elems * prog_.reduce_bytes;
  if (cx_.qgz) {
    quantized_reduce(in, dep, tied, also);
    return;
  }
  const int32_t reduced = add(in, {dep, tied, also});
  if (!cx_.replicas) return;
  // the replicas' all-reduce of the shard: after each reduce-scatter, or once a step after the last
  if (cx_.replica_at_step && cx_.per_mb_reduce) {
    std::erase_if(replica_deferred_, [&](const auto& d) { return d.first == grad_bucket; });
    replica_deferred_.emplace_back(grad_bucket, reduced);
  } else {
    replica_reduce(grad_bucket, mb, chunk, reduced);
  }
}

// qgZ's reduction of a gradient bucket (zero.hpp): its matrices' int4 values and scales
// all-to-all'd inside the node, reduced, then all-to-all'd across nodes (two levels on the reduce
// lane), and its other tensors reduce-scattered one by one (`plain`, the bucket's reduce-scatter,
// with only those tensors).
void Emitter::quantized_reduce(Instr plain, int32_t dep, int32_t tied, int32_t also) {
  const Bucket& b = prog_.grad_buckets[static_cast<std::size_t>(plain.bucket)];
  const int64_t l = prog_.placement.local_size();
  if (b.qgz_matrices > 0) {
    Instr local = plain;
    local.op = Op::kAllToAll;
    local.group = Group::kDpLocal;
    local.flags = kFlagQuantized | kFlagFirstLevel;
    local.elems = b.qgz_elems;
    local.bytes = b.qgz_elems / 2 + 4 * b.qgz_groups;
    const int32_t first = add(local, {dep, tied, also});
    Instr cross = local;
    cross.group = Group::kDpCross;
    cross.flags = kFlagQuantized;
    cross.elems = b.qgz_elems / l;
    cross.bytes = b.qgz_elems / (2 * l) + 4 * (b.qgz_groups / l);
    add(cross, {first});
  }
  if (b.qgz_fallbacks > 0) {
    plain.elems = b.elems - b.qgz_elems;
    plain.bytes = plain.elems * prog_.reduce_bytes;
    add(plain, {dep, tied, also});
  }
}

// The all-reduce of gradient bucket `grad_bucket`'s shard (⌈elems/g⌉ elements, g the partition)
// over the replica group (kDpReplica), after the reduction `dep` that made the shard.
int32_t Emitter::replica_reduce(int32_t grad_bucket, int32_t mb, int16_t chunk, int32_t dep) {
  const Bucket& b = prog_.grad_buckets[grad_bucket];
  Instr in;
  in.op = Op::kAllReduceGrads;
  in.lane = cx_.replica_lane;
  in.group = Group::kDpReplica;
  in.mb = mb;
  in.chunk = chunk;
  in.bucket = grad_bucket;
  in.unit_begin = b.unit_begin;
  in.unit_end = b.unit_end;
  in.elems = shard_elems(b.elems, cx_.partition);
  in.bytes = in.elems * prog_.reduce_bytes;
  last_replica_ = add(in, {dep});
  return last_replica_;
}

// Deferred reductions after `dep` (the host's synchronisation point) and each after what completed
// its bucket's gradients (a backward's tp or cp collective finishes the norm's and the QKV
// projection's after the compute).
void Emitter::flush(std::vector<Deferred>& list, int32_t dep) {
  for (const Deferred& d : list) reduce(d.grad_bucket, d.mb, d.chunk, dep, d.dep);
  list.clear();
}

void Emitter::step_end() {
  flush(end_deferred_, last_compute_);
  if (tracker_) tracker_->release_all();
  if (prog_.forward_only) return;  // no gradients: nothing to reduce, clip or step
  for (const auto& [gb, reduced] : replica_deferred_) {
    replica_reduce(gb, plan_.micro_batches - 1, static_cast<int16_t>(prog_.grad_buckets[gb].chunk), reduced);
  }
  replica_deferred_.clear();
  int32_t grads_done = last_reduce_;
  int32_t norm_grads = -1;
  // Sequence parallelism: each tp rank computed its norms' gradients on its sequence shard; they
  // are summed over tp after the data-parallel reductions (Megatron-LM's finalize_model_grads,
  // _allreduce_layernorm_grads), on the whole of the stage's norms. Without it, the query and key
  // norms' alone (qk_norm: each tp rank's gradient is its heads'; the same function, under
  // config.qk_layernorm)
  if (plan_.tp > 1 && (plan_.sequence_parallel || prog_.model.qk_norm)) {
    const bool qk_only = !plan_.sequence_parallel;
    int64_t norms = 0;
    for (int64_t c = 0; c < plan_.virtual_stages; ++c) {
      const ChunkInfo& chunk = prog_.chunk(stage_, c);
      for (int32_t u = chunk.unit_begin; u < chunk.unit_end; ++u) {
        const Unit& unit = (*cx_.units)[static_cast<std::size_t>(u)];
        norms += qk_only ? unit.qk_norm_elems : unit.norm_elems;
      }
      if (qk_only) continue;
      // a MoE layer's router, replicated over tp, routes each rank's own tokens: summed likewise
      // (Megatron-Core marks the router's weight sequence_parallel)
      for (int32_t u = chunk.unit_begin; u < chunk.unit_end; ++u) {
        if ((*cx_.units)[static_cast<std::size_t>(u)].kind != UnitKind::kMoe) continue;
        // the router's weight, DeepSeek-V3's score correction and gpt-oss's logit bias (each tp rank's rows),
        // and Qwen2-MoE's shared gate (Megatron-Core marks it sequence_parallel too)
        const spec::Moe& e = prog_.model.moe;
        norms += prog_.model.hidden * e.experts + (e.router_bias ? e.experts : 0) + (e.router_logit_bias ? e.experts : 0) +
                 (e.shared_ffn_hidden > 0 && e.shared_gate ? prog_.model.hidden : 0);
      }
    }
    Instr in;
    in.op = Op::kTpAllReduce;
    in.lane = Lane::kTp;
    in.group = Group::kTp;
    in.flags = kFlagNormGrads;
    in.elems = norms;
    in.bytes = norms * prog_.reduce_bytes;
    grads_done = norm_grads = add(in, {grads_done, last_compute_, last_replica_});
  }
  if (prog_.placement.world() > 1) {
    Instr in;
    in.op = Op::kGradNormAllReduce;
    in.lane = Lane::kDpReduce;
    in.group = Group::kWorld;
    in.elems = 1;
    in.bytes = kGradNormBytes;  // one fp32 sum of squares
    // bias-based balancing: every MoE layer's routed tokens per expert travel with it (comm_rules.hpp)
    const int64_t counts = router_bias_counts(prog_.model);
    in.elems += counts;
    in.bytes += counts * kGradNormBytes;
    grads_done = add(in, {last_compute_, norm_grads, last_replica_});  // the reductions are before it on its lane
  }
  // the routed experts' parameters apart (zero.hpp) are partitioned over their own group
  int64_t stage_elems = 0, expert_elems = 0;
  for (int64_t c = 0; c < plan_.virtual_stages; ++c) {
    stage_elems += prog_.chunk(stage_, c).params - prog_.chunk(stage_, c).expert_params;
    expert_elems += prog_.chunk(stage_, c).expert_params;
  }
  const int64_t shard = plan_.zero.stage >= 1 ? shard_elems(stage_elems, cx_.partition) + shard_elems(expert_elems, cx_.expert_dp)
                                              : stage_elems + expert_elems;
  const bool offload = plan_.zero.offload_optimizer == spec::Offload::kCpu;
  Instr opt;
  opt.op = Op::kOptimizerStep;
  opt.lane = offload ? Lane::kOffload : Lane::kCompute;
  opt.flags = offload ? kFlagOnHost : kFlagNone;
  opt.elems = shard;
  int32_t updated = -1;
  if (offload) {
    Instr down;
    down.op = Op::kOffloadCopy;
    down.lane = Lane::kOffload;
    down.flags = kFlagToHost;
    down.elems = shard;
    down.bytes = shard * prog_.param_bytes;
    const int32_t d2h = add(down, {grads_done, last_compute_});
    const int32_t step = add(opt, {d2h});
    Instr up = down;
    up.flags = kFlagNone;
    updated = add(up, {step});
  } else {
    updated = add(opt, {grads_done, last_compute_, last_replica_});
  }
  const bool gather_after = (plan_.zero.stage == 1 || plan_.zero.stage == 2) && (cx_.dp_collectives || cx_.expert_dp > 1);
  if (!gather_after) return;
  for (int32_t b = 0; b < static_cast<int32_t>(prog_.param_buckets.size()); ++b) {
    const Bucket& bucket = prog_.param_buckets[b];
    if (bucket.stage != stage_ || (bucket.experts ? cx_.expert_dp == 1 : !cx_.dp_collectives)) continue;
    Instr in;
    in.op = Op::kAllGatherParams;
    in.lane = Lane::kDpGather;
    in.group = bucket.experts ? Group::kExpertDp : cx_.partition_group;
    in.bucket = b;
    in.elems = bucket.elems;
    in.bytes = bucket.elems * prog_.param_bytes;
    add(in, {updated});
  }
}

}  // namespace

void emit_stage(const Context& cx, int32_t stage, const std::vector<Step>& steps, RoleProgram& role) {
  Emitter(cx, stage, role).run(steps);
}

}  // namespace stagecraft::program::detail
