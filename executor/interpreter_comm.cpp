// The Program interpreter's communication instructions: pipeline messages, ZeRO gathers and
// gradient reductions, the tied-embedding all-reduce and the gradient norm.
#include "executor/interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "executor/errors.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor {

using namespace interp;  // the interpreter's own names (interpreter.hpp)

namespace {
bool is_tied_reduce(const Instr& in) { return in.op == Op::kAllReduceGrads && in.group == Group::kEmbedding; }
}  // namespace

// ---- communication ----------------------------------------------------------------------------------

int64_t Runner::Interpreter::peer_rank(int16_t peer_stage) const {
  return prog_.placement.rank(peer_stage, dp_index_, tp_index_);
}

// Unique per (kind, micro-batch, receiving chunk) between two stages within a step; steps
// reuse tags, which MPI's in-order matching between one pair of ranks keeps apart.
int32_t Runner::Interpreter::tag(const Instr& in, bool receiving) const {
  const bool grad = in.op == Op::kSendGrad || in.op == Op::kRecvGrad;
  const int64_t chunk = receiving ? in.chunk : in.peer_chunk;
  return static_cast<int32_t>((in.mb * prog_.plan.virtual_stages + chunk) * 2 + (grad ? 1 : 0));
}

// With tp > 1 each tp rank sends and receives its 1/tp of the activation (Megatron's
// scatter-gather); the receiver's TpAllGather rebuilds it.
void Runner::Interpreter::post_recv(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  p.buffer = alloc_as(piece_elems_, store_);
  p.bytes = p.buffer.bytes();
  add_messages(p.bytes);
  p.requests.push_back(runner_.comm_.irecv(p.buffer.view(), peer_rank(in.peer_stage), tag(in, true), store_));
}

void Runner::Interpreter::finish_recv(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  add_messages(-p.buffer.bytes());
  MicroState& ms = micro(in);
  (in.op == Op::kRecvActivation ? ms.act : ms.grad) = std::move(p.buffer);
}

void Runner::Interpreter::post_send(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  Buffer& data = in.op == Op::kSendActivation ? ms.act : ms.grad;
  const int64_t want = prog_.plan.sequence_parallel ? piece_elems_ : act_elems_;
  if (data.size() != want) {
    throw ExecutorError(where(i) + ": has " + std::to_string(data.size()) + " elements to send, expected " +
                        std::to_string(want));
  }
  if (tp_ == 1 || prog_.plan.sequence_parallel) {  // sequence parallel: the rank's shard already
    p.buffer = std::move(data);
  } else {
    p.buffer = alloc_as(piece_elems_, store_);
    backend().copy(p.buffer.view(), data.view().subspan(at(tp_index_ * piece_elems_), at(piece_elems_)));
    data = {};
  }
  maybe_retire(ms);
  p.bytes = p.buffer.bytes();
  add_messages(p.bytes);
  p.requests.push_back(runner_.comm_.isend(p.buffer.view(), peer_rank(in.peer_stage), tag(in, false), store_));
}

// GatherParams (ZeRO-3) and AllGatherParams (ZeRO 1-2): every member's piece of the bucket's
// range lands in place in the working buffer — the partition group's shards, or hpZ's secondary
// slices (a GatherParams over kDpShard with hpZ: this rank's slice is put in place first).
// Quantized (qwZ) and two-level (MiCS) gathers: interpreter_zero.cpp.
void Runner::Interpreter::post_gather(int32_t i) {
  const Instr& in = instrs_[at(i)];
  if (in.op == Op::kGatherParams && (in.flags & program::kFlagQuantized)) return post_quantized_gather(i);
  if (in.op == Op::kGatherParams && (in.group == Group::kDpShardCross || in.group == Group::kDpLocal)) {
    return post_hierarchical_gather(i);
  }
  if (in.op == Op::kAllGatherParams && runner_.layout_.split()) return post_set_gather(i);
  Pending& p = pending_[at(i)];
  p.range = runner_.layout_.param_bucket(in.bucket);
  p.bytes = p.range.size() * bytes_of(store_);
  if (in.op == Op::kGatherParams) runner_.memory_.add(MemoryKind::kBuffers, in.elems * bytes_of(store_));
  if (in.op == Op::kGatherParams) place_secondary(i);
  const std::span<float> params = backend().params();
  // the framework's collectives for the bucket (a ZeRO-3 gather; one for ZeRO 1-2's all-gather)
  for (const Range& r : collective_pieces(p.range, prog_.collectives_of(in))) {
    const std::vector<int64_t> counts = gather_counts(in, p.range, r);
    p.requests.push_back(
        runner_.comm_.iall_gather({in.group, in.lane}, params.subspan(at(r.begin), at(r.size())), counts, store_));
  }
}

// A reduction's gradients are copied out of the grad buffer (and the range zeroed for later
// micro-batches) the moment the compute it depends on ends, as DeepSpeed copies them into its
// reduce bucket in the backward hook: so each reduction moves exactly the micro-batches the
// Program says, whenever the lane gets to issue it, and runs are bit-for-bit reproducible.
void Runner::Interpreter::take_snapshot(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  if (p.snapshotted) return;
  p.range = is_tied_reduce(in) ? runner_.layout_.tied_table(in.unit_begin) : runner_.layout_.grad_bucket(in.bucket);
  p.parts = reduction_parts(in);
  p.buffer = alloc_as(total(p.parts), reduce_);  // the framework's bucket, in its reduce dtype
  int64_t k = 0;
  for (const Range& r : p.parts) {
    const std::span<float> grads = backend().grads().subspan(at(r.begin), at(r.size()));
    backend().copy(p.buffer.view().subspan(at(k), at(r.size())), grads);
    backend().fill(grads, 0.0f);
    k += r.size();
  }
  p.snapshotted = true;
  add_messages(p.buffer.bytes());
}

// What a reduction of its range moves: all of it, except under qgZ, where the bucket's matrices go
// through the AllToAll (its first level takes them) and the other tensors through the
// ReduceScatterGrads (StageLayout::qgz_split).
std::vector<Range> Runner::Interpreter::reduction_parts(const Instr& in) const {
  const StageLayout& layout = runner_.layout_;
  if (is_tied_reduce(in)) return {layout.tied_table(in.unit_begin)};
  if (!layout.qgz(in.bucket)) return layout.grad_bucket_parts(in.bucket);
  const QgzSplit& split = layout.qgz_split(in.bucket);
  return in.op == Op::kAllToAll ? split.matrix_ranges() : split.fallbacks;
}

// Where flat position `pos` (inside one of p.parts) sits in p.buffer.
int64_t Runner::Interpreter::packed_at(const Pending& p, int64_t pos) const {
  int64_t k = 0;
  for (const Range& r : p.parts) {
    if (pos >= r.begin && pos < r.end) return k + (pos - r.begin);
    k += r.size();
  }
  throw ExecutorError("rank " + std::to_string(runner_.rank_) + ": position " + std::to_string(pos) +
                      " is in none of the reduction's ranges");
}

// Where an embedding-group all-reduce of the tied table precedes this dp reduction (one of its
// deps), the table's part of the bucket is that all-reduce's result (the snapshot holds zeros
// there: the table was taken out first). Under qgZ the table is a matrix or a fallback: the
// reduction whose parts hold it takes the result.
void Runner::Interpreter::overlay_tied_result(int32_t i) {
  Pending& p = pending_[at(i)];
  const Instr& in = instrs_[at(i)];
  for (int32_t d : role_.deps_of(in)) {
    if (!is_tied_reduce(instrs_[at(d)])) continue;
    Pending& tied = pending_[at(d)];
    const bool mine = std::any_of(p.parts.begin(), p.parts.end(), [&](const Range& r) {
      return r.begin <= tied.range.begin && tied.range.end <= r.end;
    });
    if (!mine && runner_.layout_.qgz(in.bucket)) continue;  // the sibling reduction's
    if (!mine) throw ExecutorError(where(i) + ": the tied table is not inside the bucket");
    if (!tied.tied_result) throw ExecutorError(where(i) + ": its embedding-group reduction left no result");
    backend().add(p.buffer.view().subspan(at(packed_at(p, tied.range.begin)), at(tied.range.size())), tied.buffer.view());
    add_messages(-tied.buffer.bytes());
    tied.buffer = {};
    tied.tied_result = false;
  }
}

// A reduce-scatter over the partition group (kDp, or kDpShard for a shard group) of the parts it
// moves, as the framework's collectives (qgZ: one per fallback tensor), each member keeping its
// shard's piece; the persistent tensors' gradients all-reduced whole. ZeRO-0: an all-reduce.
void Runner::Interpreter::post_dp_reduce(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  take_snapshot(i);
  overlay_tied_result(i);
  p.bytes = p.buffer.bytes();
  const Channel ch{in.group, in.lane};
  const bool qgz = layout.qgz(in.bucket);
  // the framework's collectives: the bucket in k pieces, or (qgZ) one per fallback tensor
  const std::vector<Range> parts = qgz ? p.parts : collective_pieces(p.range, prog_.collectives_of(in));
  if (qgz && static_cast<int32_t>(parts.size()) != prog_.collectives_of(in)) {
    throw ExecutorError(where(i) + ": " + std::to_string(parts.size()) + " collectives where the Program counts " +
                        std::to_string(prog_.collectives_of(in)));
  }
  if (in.op == Op::kAllReduceGrads) {
    // the bucket's k pieces of its packed gradients (its range, or with experts apart its parts)
    const std::vector<Range> packed = qgz ? std::vector<Range>{} : collective_pieces({0, p.buffer.size()}, prog_.collectives_of(in));
    for (const Range& r : qgz ? parts : packed) {
      const int64_t first = qgz ? packed_at(p, r.begin) : r.begin;
      p.requests.push_back(runner_.comm_.iall_reduce(ch, p.buffer.view().subspan(at(first), at(r.size())), reduce_));
    }
    return;
  }
  if (layout.split()) return post_set_reduce(i);
  const Range own = intersect(p.range, layout.own_shard());
  p.piece = alloc_as(own.size(), reduce_);
  std::vector<Range> persistent;
  for (const Range& part : p.parts) {
    for (const Range& r : clip(layout.persistent(), part)) persistent.push_back(r);
  }
  if (const int64_t packed = total(persistent); packed > 0) {
    p.packed = alloc_as(packed, reduce_);
    int64_t k = 0;
    for (const Range& r : persistent) {
      backend().copy(p.packed.view().subspan(at(k), at(r.size())),
                     p.buffer.view().subspan(at(packed_at(p, r.begin)), at(r.size())));
      k += r.size();
    }
  }
  add_messages(p.piece.bytes() + p.packed.bytes());
  for (const Range& r : parts) {  // each piece's sum lands in this rank's part of p.piece
    const Range mine = intersect(r, layout.own_shard());
    const int64_t at_piece = mine.size() > 0 ? mine.begin - own.begin : 0;
    p.requests.push_back(runner_.comm_.ireduce_scatter(ch, p.buffer.view().subspan(at(packed_at(p, r.begin)), at(r.size())),
                                                       p.piece.view().subspan(at(at_piece), at(mine.size())),
                                                       layout.shard_counts(r), reduce_));
  }
  if (!p.packed.empty()) p.requests.push_back(runner_.comm_.iall_reduce(ch, p.packed.view(), reduce_));
}

void Runner::Interpreter::finish_dp_reduce(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  Backend& be = backend();
  add_messages(-p.buffer.bytes());
  if (in.op == Op::kAllReduceGrads) {
    for (const Range& r : p.parts) be.add(be.grads().subspan(at(r.begin), at(r.size())), p.buffer.view().subspan(at(packed_at(p, r.begin)), at(r.size())));
  } else if (!hands_off_[at(i)]) {  // else its replica all-reduce takes the piece (interpreter_zero.cpp)
    add_reduced_shard(p);
  }
  p.buffer = {};
}

// A reduce-scatter's result into the rank's reduced gradients: its piece of the shard, the
// persistent tensors' sums.
void Runner::Interpreter::add_reduced_shard(Pending& p) {
  Backend& be = backend();
  const StageLayout& layout = runner_.layout_;
  if (layout.split()) {  // p.coords: this rank's coordinates of the bucket's set, at p.shard_at in the shard
    if (p.coords.size() > 0) be.add(be.shard_grads().subspan(at(p.shard_at), at(p.coords.size())), p.piece.view());
    add_messages(-p.piece.bytes());
    p.piece = {};
    return;
  }
  const Range own = intersect(p.range, layout.own_shard());
  if (own.size() > 0) be.add(be.shard_grads().subspan(at(own.begin - layout.own_shard().begin), at(own.size())), p.piece.view());
  add_packed_persistent_grads(p);
  add_messages(-(p.piece.bytes() + p.packed.bytes()));
  p.piece = {};
  p.packed = {};
}

// ZeRO 1-2 under the split (StageLayout: the dense positions and the routed experts' partitioned
// apart): the bucket's gradients, packed in `buffer`, are consecutive coordinates [c0, c0 + n) of
// its set; each of the framework's collectives reduce-scatters its part of them over the set's
// group (kDp or kExpertDp), member m keeping the part inside its coordinates.
void Runner::Interpreter::post_set_reduce(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  const StageLayout::PartitionSet& set = layout.set_of(prog_.grad_buckets[at(in.bucket)].experts);
  const int64_t n = p.buffer.size(), c0 = layout.coordinate(set, p.parts.front().begin);
  if (layout.coordinate(set, p.parts.back().end - 1) + 1 - c0 != n) {
    throw ExecutorError(where(i) + ": the bucket's positions are not consecutive in the " +
                        (set.experts ? "experts'" : "dense") + " partition");
  }
  p.coords = intersect({c0, c0 + n}, set.coordinates(set.index));
  p.shard_at = set.packed + (p.coords.begin - set.coordinates(set.index).begin);
  p.piece = alloc_as(p.coords.size(), reduce_);
  add_messages(p.piece.bytes());
  const Channel ch{in.group, in.lane};
  for (const Range& r : collective_pieces({0, n}, prog_.collectives_of(in))) {  // packed = coordinates - c0
    const Range c{c0 + r.begin, c0 + r.end};
    const Range mine = intersect(c, p.coords);
    const int64_t at_piece = mine.size() > 0 ? mine.begin - p.coords.begin : 0;
    p.requests.push_back(runner_.comm_.ireduce_scatter(ch, p.buffer.view().subspan(at(r.begin), at(r.size())),
                                                       p.piece.view().subspan(at(at_piece), at(mine.size())),
                                                       layout.member_counts(set, c), reduce_));
  }
}

// ZeRO 1-2's all-gather of a piece under the split: coordinates of one set, whose positions need
// not be contiguous, so the members' parts meet in a staging buffer (this rank's copied in first)
// and land in place when it completes (finish_set_gather).
void Runner::Interpreter::post_set_gather(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  const StageLayout::PartitionSet& set = layout.set_of(prog_.param_buckets[at(in.bucket)].experts);
  p.coords = layout.param_bucket(in.bucket);
  p.buffer = alloc_as(p.coords.size(), store_);
  p.bytes = p.buffer.bytes();
  add_messages(p.bytes);
  const Range mine = intersect(p.coords, set.coordinates(set.index));
  int64_t k = mine.begin - p.coords.begin;
  for (const Range& r : layout.positions(set, mine)) {
    backend().copy(p.buffer.view().subspan(at(k), at(r.size())), backend().params().subspan(at(r.begin), at(r.size())));
    k += r.size();
  }
  for (const Range& r : collective_pieces(p.coords, prog_.collectives_of(in))) {
    p.requests.push_back(runner_.comm_.iall_gather({in.group, in.lane},
                                                   p.buffer.view().subspan(at(r.begin - p.coords.begin), at(r.size())),
                                                   layout.member_counts(set, r), store_));
  }
}

void Runner::Interpreter::finish_set_gather(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  const StageLayout::PartitionSet& set = layout.set_of(prog_.param_buckets[at(in.bucket)].experts);
  int64_t k = 0;
  for (const Range& r : layout.positions(set, p.coords)) {
    backend().copy(backend().params().subspan(at(r.begin), at(r.size())), p.buffer.view().subspan(at(k), at(r.size())));
    k += r.size();
  }
  add_messages(-p.buffer.bytes());
  p.buffer = {};
}

// The whole-kept (persistent) gradients a reduction carried beside its pieces, packed in `p.packed`
// in the order of `p.parts`: each added to the rank's persistent gradients.
void Runner::Interpreter::add_packed_persistent_grads(const Pending& p) {
  Backend& be = backend();
  const StageLayout& layout = runner_.layout_;
  int64_t k = 0;
  for (const Range& part : p.parts) {
    for (const Range& r : clip(layout.persistent(), part)) {  // a persistent range packs contiguously
      be.add(be.persistent_grads().subspan(at(layout.persistent_index(r.begin)), at(r.size())),
             p.packed.view().subspan(at(k), at(r.size())));
      k += r.size();
    }
  }
}

// Tied embeddings over stages: the table's gradient on stage 0 and the head's copy on the last
// stage are summed over the embedding group.
void Runner::Interpreter::post_tied_reduce(int32_t i) {
  Pending& p = pending_[at(i)];
  take_snapshot(i);
  p.bytes = p.buffer.bytes();
  p.requests.push_back(runner_.comm_.iall_reduce({Group::kEmbedding, Lane::kDpReduce}, p.buffer.view(), reduce_));
}

void Runner::Interpreter::finish_tied_reduce(int32_t i) {
  Pending& p = pending_[at(i)];
  if (prog_.placement.dp > 1) {  // the bucket's dp reduction (which depends on this) takes the result
    p.tied_result = true;
    return;
  }
  backend().add(backend().grads().subspan(at(p.range.begin), at(p.buffer.size())), p.buffer.view());
  add_messages(-p.buffer.bytes());
  p.buffer = {};
}

void Runner::Interpreter::post_grad_norm(int32_t i) {
  Pending& p = pending_[at(i)];
  p.norm.assign(1, backend().owned_grad_norm_sq());
  const std::vector<double> routed = take_routed();  // bias-based balancing: the counts go along
  p.norm.insert(p.norm.end(), routed.begin(), routed.end());
  p.bytes = static_cast<int64_t>(sizeof(double) * p.norm.size());
  p.requests.push_back(runner_.comm_.iall_reduce({Group::kWorld, Lane::kDpReduce}, p.norm));
}

// The balancing loss's token counts of a MoE unit's pass (comm_rules.hpp, moe_aux_counts_bytes):
// this rank's, summed over the tp·cp ranks that split the micro-batch's tokens (host doubles: E·8
// bytes, as the Program says), then the unit's loss counts and tokens are the group's.
void Runner::Interpreter::post_moe_counts(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  p.norm = backend().moe_loss_counts(in.chunk, in.unit_begin, micro(in).slot);
  if (static_cast<int64_t>(p.norm.size()) != in.elems) {
    throw ExecutorError(where(i) + ": the unit counts " + std::to_string(p.norm.size()) + " experts, the Program says " +
                        std::to_string(in.elems));
  }
  p.bytes = static_cast<int64_t>(sizeof(double) * p.norm.size());
  p.requests.push_back(runner_.comm_.iall_reduce({Group::kTpCp, Lane::kTp}, p.norm));
}

void Runner::Interpreter::finish_moe_counts(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  backend().set_moe_loss_counts(in.chunk, in.unit_begin, micro(in).slot, p.norm, tp_ * cp_);
  p.norm.clear();
}

// ---- tensor parallelism ----------------------------------------------------------------------------
// The Program's tp collectives (core/program/comm_rules.hpp says where they sit): the
// all-reduce after a unit's forward sums the ranks' partial outputs (the head's reduces the
// vocabulary-parallel loss); after a backward it sums the partial dL/d(norm output), which
// finish_input_grad completes; the all-gather after a receive rebuilds a scattered message; a
// Recompute's re-issues the forward's traffic, its result unused (each unit keeps its own input).
// Sequence parallelism: activations between units are sequence shards (rows [r N/t, (r+1) N/t)
// on tp rank r); the all-gather before a unit rebuilds its whole input (or output gradient), the
// reduce-scatter after it sums the partial output (or d(norm output)) and keeps the rank's rows;
// once per step the norms' gradients, computed on each rank's rows, are summed over tp.

void Runner::Interpreter::post_tp(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const Channel ch{Group::kTp, Lane::kTp};
  const std::vector<int64_t> counts(at(tp_), piece_elems_);
  if (in.flags & program::kFlagNormGrads) {
    p.buffer = backend().pack_reduced_grads(runner_.layout_.norms());
    if (p.buffer.size() != in.elems) {
      throw ExecutorError(where(i) + ": the stage's norms have " + std::to_string(p.buffer.size()) +
                          " elements, the Program says " + std::to_string(in.elems));
    }
    p.bytes = p.buffer.bytes();
    add_messages(p.bytes);
    p.requests.push_back(runner_.comm_.iall_reduce(ch, p.buffer.view()));
    return;
  }
  if (in.flags & program::kFlagRecompute) {  // the forward's traffic again, on zeros
    if (in.op == Op::kTpAllReduce) {
      p.buffer = alloc_as(in.elems, store_);
      p.requests.push_back(runner_.comm_.iall_reduce(ch, p.buffer.view(), store_));
    } else if (in.op == Op::kTpAllGather) {
      p.buffer = alloc_as(act_elems_, store_);
      p.requests.push_back(runner_.comm_.iall_gather(ch, p.buffer.view(), counts, store_));
    } else {
      p.buffer = alloc_as(act_elems_, store_);
      p.piece = alloc_as(piece_elems_, store_);
      p.requests.push_back(runner_.comm_.ireduce_scatter(ch, p.buffer.view(), p.piece.view(), counts, store_));
    }
    p.bytes = p.buffer.bytes();
    add_messages(p.bytes + p.piece.bytes());
    return;
  }
  MicroState& ms = micro(in);
  Buffer& data = (in.flags & program::kFlagGrad) ? ms.grad : ms.act;
  if (in.op == Op::kTpAllGather) {  // this rank's piece: of a received message (scatter-gather) or a shard
    if (data.size() != piece_elems_) {
      throw ExecutorError(where(i) + ": has a piece of " + std::to_string(data.size()) + " elements, expected " +
                          std::to_string(piece_elems_));
    }
    p.buffer = alloc_as(act_elems_, store_);
    backend().copy(p.buffer.view().subspan(at(tp_index_ * piece_elems_), at(piece_elems_)), data.view());
    data = {};
    p.bytes = p.buffer.bytes();
    add_messages(p.bytes);
    p.requests.push_back(runner_.comm_.iall_gather(ch, p.buffer.view(), counts, store_));
    return;
  }
  const bool loss = in.unit_begin == program::head_unit(prog_.model) && !(in.flags & program::kFlagGrad);
  if (loss) {
    post_loss_reduction(i, ms);
    return;
  }
  if (data.size() != act_elems_) {
    throw ExecutorError(where(i) + ": has " + std::to_string(data.size()) + " elements to all-reduce, expected " +
                        std::to_string(act_elems_));
  }
  p.buffer = std::move(data);
  p.bytes = p.buffer.bytes();
  if (in.op == Op::kTpReduceScatter) {
    p.piece = alloc_as(piece_elems_, store_);
    add_messages(p.bytes + p.piece.bytes());
    p.requests.push_back(runner_.comm_.ireduce_scatter(ch, p.buffer.view(), p.piece.view(), counts, store_));
    return;
  }
  add_messages(p.bytes);
  p.requests.push_back(runner_.comm_.iall_reduce(ch, p.buffer.view(), store_));
}

// Megatron's VocabParallelCrossEntropy: the rows' maxima (max) and target logits (sum), then
// the sums of exponentials rescaled to the global maxima (sum): 3 x 4 bytes per token.
void Runner::Interpreter::post_loss_reduction(int32_t i, MicroState& ms) {
  Pending& p = pending_[at(i)];
  const Channel ch{Group::kTp, Lane::kTp};
  const int64_t n = tokens_;  // rows of the micro-batch
  if (ms.act.size() != 3 * n) {
    throw ExecutorError(where(i) + ": the head left " + std::to_string(ms.act.size()) + " loss statistics, expected " +
                        std::to_string(3 * n));
  }
  p.packed = std::move(ms.act);  // [max | sum | target] of this rank's vocabulary slice
  p.buffer = backend().alloc(n);
  backend().copy(p.buffer.view(), p.packed.view().first(at(n)));
  p.piece = backend().alloc(n);
  backend().copy(p.piece.view(), p.packed.view().subspan(at(2 * n)));
  p.bytes = 3 * n * static_cast<int64_t>(sizeof(float));
  add_messages(p.packed.bytes() + p.buffer.bytes() + p.piece.bytes());
  p.requests.push_back(runner_.comm_.iall_reduce_max(ch, p.buffer.view()));
  p.requests.push_back(runner_.comm_.iall_reduce(ch, p.piece.view()));
  p.then = [this, i, ch] {
    Pending& q = pending_[at(i)];
    q.extra = backend().alloc(q.buffer.size());
    backend().vocab_parallel_rescale(q.packed.view(), q.buffer.view(), q.extra.view());
    add_messages(q.extra.bytes());
    q.requests.push_back(runner_.comm_.iall_reduce(ch, q.extra.view()));
  };
}

void Runner::Interpreter::finish_loss_reduction(int32_t i, MicroState& ms) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const int64_t n = p.buffer.size();
  Buffer reduced = backend().alloc(3 * n);  // [max | rescaled sum | target]
  backend().copy(reduced.view().first(at(n)), p.buffer.view());
  backend().copy(reduced.view().subspan(at(n), at(n)), p.extra.view());
  backend().copy(reduced.view().subspan(at(2 * n)), p.piece.view());
  const float loss = backend().finish_loss(in.chunk, program::head_unit(prog_.model), ms.slot, reduced.view());
  add_messages(-(p.packed.bytes() + p.buffer.bytes() + p.piece.bytes() + p.extra.bytes()));
  p.packed = {};
  p.buffer = {};
  p.piece = {};
  p.extra = {};
  if (!std::isfinite(loss)) {
    throw NonFiniteError("step " + std::to_string(step_ + 1) + ", micro-batch " + std::to_string(in.mb) + ", stage " +
                         std::to_string(prog_.placement.stage_of(runner_.rank_)) + " (rank " +
                         std::to_string(runner_.rank_) + "): the loss is " + std::to_string(loss) +
                         "; the training diverged (a smaller --lr?) and stops before the optimizer uses it");
  }
  if (tp_index_ == 0) {  // counted once per tp group
    weighted_loss_ += static_cast<double>(loss) * loss_weight_;
    micro_losses_.emplace_back(in.mb, static_cast<double>(loss) / static_cast<double>(cp_));
  }
}

void Runner::Interpreter::finish_tp(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  if (in.flags & program::kFlagNormGrads) {
    backend().unpack_reduced_grads(runner_.layout_.norms(), p.buffer.view());
    add_messages(-p.buffer.bytes());
    p.buffer = {};
    return;
  }
  if (in.flags & program::kFlagRecompute) {
    add_messages(-(p.buffer.bytes() + p.piece.bytes()));
    p.buffer = {};
    p.piece = {};
    return;
  }
  MicroState& ms = micro(in);
  const bool grad = (in.flags & program::kFlagGrad) != 0;
  if (in.op == Op::kTpAllReduce && in.unit_begin == program::head_unit(prog_.model) && !grad) {
    finish_loss_reduction(i, ms);
    return;
  }
  add_messages(-(p.buffer.bytes() + p.piece.bytes()));
  const bool scattered = in.op == Op::kTpReduceScatter;
  Buffer result = std::move(scattered ? p.piece : p.buffer);
  p.buffer = {};
  p.piece = {};
  if (in.op == Op::kTpAllGather || !grad) {  // a whole message or input, or the unit's summed output (or shard)
    (grad ? ms.grad : ms.act) = std::move(result);
    return;
  }
  // the unit's input gradient (of its rows, when scattered): the norm's backward on the summed d(norm output)
  const int64_t row0 = scattered ? tp_index_ * (tokens_ / tp_) : 0;
  ms.grad = backend().finish_input_grad(in.chunk, in.unit_begin, ms.slot, result.view(), row0).as(store_);
  for (int32_t r : snapshot_after_[at(i)]) take_snapshot(r);
  maybe_retire(ms);
}

}  // namespace stagecraft::executor
