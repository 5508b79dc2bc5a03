// The Program interpreter's hierarchical and quantized ZeRO (docs/program.md "Hierarchical and
// quantized ZeRO", ZERO3-HIERARCHICAL.md): hpZ's secondary partition, MiCS's two-level gather,
// qwZ's int8 gathers, the replicas' all-reduce of gradient shards and qgZ's int4 all-to-alls.
// Plain gathers and reductions over the partition group are interpreter_comm.cpp's.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "executor/errors.hpp"
#include "executor/interpreter.hpp"
#include "executor/zero/quantize.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor {

using namespace interp;  // the interpreter's own names (interpreter.hpp)

namespace {

bool secondary_gather(const Instr& in, const StageLayout& layout) {
  return in.op == Op::kGatherParams && in.group == Group::kDpShard && layout.hpz_group() > 0;
}

int64_t payload_bytes(const std::vector<QuantizedPayload>& v) {
  int64_t n = 0;
  for (const QuantizedPayload& q : v) {
    n += static_cast<int64_t>(q.values.size() + q.scales.size() * sizeof(float));
  }
  return n;
}

// MiCS's two-level gather of a piece r over a shard group of g ranks, l a node (g = l·(g/l)): the
// shards are laid out in a scratch buffer by local index j, then node k — shard j + k·l at
// offset[j + k·l] — so that what the first level gathers (the g/l shards of local index j, across
// the group's nodes) and what each local peer then holds are contiguous.
struct TwoLevel {
  std::vector<int64_t> offset, size;            // per shard
  std::vector<int64_t> chunk_offset, chunk_size;  // per local index
};
TwoLevel two_level(const StageLayout& layout, Range r) {
  const int64_t g = layout.partition(), l = layout.local_group();
  TwoLevel t;
  t.offset.assign(at(g), 0);
  t.size.assign(at(g), 0);
  int64_t off = 0;
  for (int64_t j = 0; j < l; ++j) {
    t.chunk_offset.push_back(off);
    for (int64_t s = j; s < g; s += l) {
      t.size[at(s)] = intersect(r, layout.shard(s)).size();
      t.offset[at(s)] = off;
      off += t.size[at(s)];
    }
    t.chunk_size.push_back(off - t.chunk_offset.back());
  }
  return t;
}

}  // namespace

// ---- replica all-reduce: which reduce-scatter each follows, and how --------------------------------

// A replica all-reduce (kDpReplica) sums over the replicas what the shard group's reduce-scatters
// made since the bucket's previous replica all-reduce: after every reduce-scatter (HSDP) that is the
// one reduce-scatter's piece, which it then adds to the shard; once a step (MiCS, Megatron-LM's
// optimizer instances, FSDP2 without per-micro-batch all-reduce) it is the shard accumulated over
// the step's micro-batches, which it replaces by the sum.
void Runner::Interpreter::plan_replica_reductions() {
  const std::size_t n = instrs_.size();
  replica_source_.assign(n, -1);
  replica_piece_.assign(n, 0);
  hands_off_.assign(n, 0);
  std::map<int32_t, int32_t> unsynced;  // per gradient bucket: reduce-scatters since its last replica all-reduce
  std::set<int32_t> synced;
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) {
    const Instr& in = instrs_[at(i)];
    if (in.op == Op::kReduceScatterGrads && in.bucket >= 0) ++unsynced[in.bucket];
    if (in.op != Op::kAllReduceGrads || in.group != Group::kDpReplica) continue;
    for (int32_t d : role_.deps_of(in)) {
      const Instr& dep = instrs_[at(d)];
      if (dep.op == Op::kReduceScatterGrads && dep.bucket == in.bucket) replica_source_[at(i)] = d;
    }
    const int32_t source = replica_source_[at(i)];
    if (source < 0) throw ExecutorError(where(i) + ": a replica all-reduce that follows no reduce-scatter of its bucket");
    if (unsynced[in.bucket] == 1) {
      replica_piece_[at(i)] = 1;
      hands_off_[at(source)] = 1;
    } else if (synced.count(in.bucket) != 0) {
      throw ExecutorError(where(i) + ": all-reduces over the replicas micro-batches of which some were all-reduced before");
    }
    unsynced[in.bucket] = 0;
    synced.insert(in.bucket);
  }
}

void Runner::Interpreter::post_replica_reduce(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  const Channel ch{Group::kDpReplica, in.lane};
  if (replica_piece_[at(i)]) {  // the reduce-scatter's piece (its memory stays counted as it was)
    Pending& source = pending_[at(replica_source_[at(i)])];
    p.range = source.range;
    p.parts = std::move(source.parts);
    p.piece = std::move(source.piece);
    p.packed = std::move(source.packed);
    if (!p.piece.empty()) p.requests.push_back(runner_.comm_.iall_reduce(ch, p.piece.view(), reduce_));
    if (!p.packed.empty()) p.requests.push_back(runner_.comm_.iall_reduce(ch, p.packed.view(), reduce_));
    p.bytes = p.piece.bytes() + p.packed.bytes();
    return;
  }
  // the shard's part of the bucket and the bucket's persistent tensors, as the rank holds them now
  const Range bucket = layout.grad_bucket(in.bucket);
  std::vector<Range> ranges = clip(layout.persistent(), bucket);
  if (const Range own = intersect(bucket, layout.own_shard()); own.size() > 0) ranges.push_back(own);
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (const Range& r : ranges) {
    if (p.parts.empty() || p.parts.back().end < r.begin) {
      p.parts.push_back(r);
    } else {
      p.parts.back().end = std::max(p.parts.back().end, r.end);
    }
  }
  p.range = bucket;
  p.buffer = backend().pack_reduced_grads(p.parts).as(reduce_);
  p.bytes = p.buffer.bytes();
  add_messages(p.bytes);
  p.requests.push_back(runner_.comm_.iall_reduce(ch, p.buffer.view(), reduce_));
}

void Runner::Interpreter::finish_replica_reduce(int32_t i) {
  Pending& p = pending_[at(i)];
  if (replica_piece_[at(i)]) {
    add_reduced_shard(p);
    return;
  }
  backend().unpack_reduced_grads(p.parts, p.buffer.view());
  add_messages(-p.buffer.bytes());
  p.buffer = {};
}

// ---- gathers: whose pieces, hpZ's secondary copy, qwZ's exact shard -------------------------------

// The members' pieces of r: hpZ's secondary slices for a gather from the secondary partition, the
// partition group's shards otherwise (a gather over kDp or, with a shard group, kDpShard).
std::vector<int64_t> Runner::Interpreter::gather_counts(const Instr& in, Range bucket, Range r) const {
  const StageLayout& layout = runner_.layout_;
  return secondary_gather(in, layout) ? layout.secondary_counts(bucket, r) : layout.shard_counts(r);
}

Range Runner::Interpreter::member_piece(const Instr& in, Range bucket, Range r, int64_t member) const {
  const StageLayout& layout = runner_.layout_;
  return intersect(r, secondary_gather(in, layout) ? layout.secondary_slice(bucket, member) : layout.shard(member));
}

// What member `member` quantizes of piece r (qwZ): its positions of the gathered tensors — the
// persistent ones, which every rank holds whole, are no part of a gather (DeepSpeed never gathers a
// persistent parameter), so they neither travel nor share a scale with the others.
std::vector<Range> Runner::Interpreter::quantized_positions(const Instr& in, Range bucket, Range r, int64_t member) const {
  return subtract(member_piece(in, bucket, r, member), runner_.layout_.persistent());
}

int64_t Runner::Interpreter::gather_position(const Instr& in) const {
  const StageLayout& layout = runner_.layout_;
  return secondary_gather(in, layout) ? dp_index_ % layout.hpz_group() : layout.partition_index();
}

// hpZ: before a gather from the secondary partition, this rank's slice back in place.
void Runner::Interpreter::place_secondary(int32_t i) {
  const Instr& in = instrs_[at(i)];
  if (!secondary_gather(in, runner_.layout_)) return;
  const Buffer& slice = secondary_[at(in.bucket)];
  const Range mine = runner_.layout_.own_secondary(runner_.layout_.param_bucket(in.bucket));
  if (slice.size() != mine.size() || (slice.empty() && mine.size() > 0)) {
    throw ExecutorError(where(i) + ": gathers from hpZ's secondary partition, but no release of the bucket made one since "
                                   "the last optimizer step");
  }
  backend().copy(backend().params().subspan(at(mine.begin), at(mine.size())), slice.view());
}

// hpZ (DeepSpeed's _partition_param_sec): when a gathered bucket is released and no secondary copy
// of it exists, this rank keeps its 1/h slice of the whole bucket.
void Runner::Interpreter::keep_secondary(const Instr& in) {
  const StageLayout& layout = runner_.layout_;
  if (layout.hpz_group() <= 0 || !secondary_[at(in.bucket)].empty()) return;
  const Range mine = layout.own_secondary(layout.param_bucket(in.bucket));
  if (mine.size() == 0) return;
  Buffer slice = alloc_as(mine.size(), store_);  // the 16-bit parameters' secondary copy
  backend().copy(slice.view(), backend().params().subspan(at(mine.begin), at(mine.size())));
  runner_.memory_.add(MemoryKind::kBuffers, slice.bytes());
  secondary_[at(in.bucket)] = std::move(slice);
}

void Runner::Interpreter::drop_secondaries() {
  for (Buffer& b : secondary_) {
    runner_.memory_.add(MemoryKind::kBuffers, -b.bytes());
    b = {};
  }
}

void Runner::Interpreter::restore_stash(int32_t bucket) {
  Buffer& stash = stash_[at(bucket)];
  if (stash.empty()) return;
  const Range own = intersect(runner_.layout_.param_bucket(bucket), runner_.layout_.own_shard());
  backend().copy(backend().params().subspan(at(own.begin), at(own.size())), stash.view());
  runner_.memory_.add(MemoryKind::kBuffers, -stash.bytes());
  stash = {};
}

void Runner::Interpreter::restore_stashes() {
  for (int32_t b = 0; b < static_cast<int32_t>(stash_.size()); ++b) restore_stash(b);
}

void Runner::Interpreter::finish_gather(int32_t i) {
  const Instr& in = instrs_[at(i)];
  if (in.flags & program::kFlagQuantized) {
    finish_quantized_gather(i);
  } else if (in.group == Group::kDpLocal) {
    finish_hierarchical_gather(i);
  }
}

// ---- qwZ: int8 gathers -------------------------------------------------------------------------------

// Each member quantizes its piece of each collective (its shard's, or its secondary slice's, less
// the persistent tensors) in DeepSpeed's groups (zero/quantize.hpp qwz_piece); the int8 values and
// the fp32 scales are all-gathered apart (two collectives each) and every piece is dequantized into
// place, this rank's own too, as DeepSpeed computes with the dequantized parameter on every rank.
// The exact shard the optimizer steps is kept aside (stash_) until the bucket is released.
void Runner::Interpreter::post_quantized_gather(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  p.range = layout.param_bucket(in.bucket);
  runner_.memory_.add(MemoryKind::kBuffers, in.elems * bytes_of(store_));
  const Range own = intersect(p.range, layout.own_shard());
  Buffer& stash = stash_[at(in.bucket)];
  if (stash.empty() && own.size() > 0) {
    stash = alloc_as(own.size(), store_);
    backend().copy(stash.view(), backend().params().subspan(at(own.begin), at(own.size())));
    runner_.memory_.add(MemoryKind::kBuffers, stash.bytes());
  }
  // this rank's values: the exact shard, or (hpZ) its secondary slice
  const bool secondary = secondary_gather(in, layout);
  const Range source_range = secondary ? layout.own_secondary(p.range) : own;
  const Buffer& source = secondary ? secondary_[at(in.bucket)] : stash;
  if (secondary && source.size() != source_range.size()) {
    throw ExecutorError(where(i) + ": gathers from hpZ's secondary partition, but no release of the bucket made one since "
                                   "the last optimizer step");
  }
  const int64_t block = prog_.plan.zero.quantized_weights.block, me = gather_position(in);
  const std::vector<Range> ranges = collective_pieces(p.range, prog_.param_buckets[at(in.bucket)].collectives);
  p.received.reserve(ranges.size());
  for (const Range& r : ranges) {
    std::vector<int64_t> values, scales;  // per member: its padded int8 values, its scales
    int64_t value_at = 0, scale_at = 0, all_values = 0, all_scales = 0;
    const int64_t members = static_cast<int64_t>(gather_counts(in, p.range, r).size());
    for (int64_t m = 0; m < members; ++m) {
      const QwzPiece q = qwz_piece(total(quantized_positions(in, p.range, r, m)), block);
      if (q.padded > 0 && q.groups == 0) {
        throw ExecutorError(where(i) + ": DeepSpeed's qwZ group rule finds no groups for a piece of " +
                            std::to_string(q.padded) + " elements with block " + std::to_string(block));
      }
      if (m == me) value_at = all_values, scale_at = all_scales;
      values.push_back(q.padded);
      scales.push_back(q.groups);
      all_values += q.padded;
      all_scales += q.groups;
    }
    QuantizedPayload& payload = p.received.emplace_back();
    payload.values.resize(at(all_values));
    payload.scales.resize(at(all_scales));
    const std::vector<Range> mine = quantized_positions(in, p.range, r, me);
    const int64_t n = total(mine);
    const QwzPiece q = qwz_piece(n, block);
    if (q.padded > 0) {
      std::vector<float> x(at(q.padded), 0.0f), back(x.size());
      int64_t k = 0;
      for (const Range& m : mine) {
        backend().download(source.view().subspan(at(m.begin - source_range.begin), at(m.size())),
                           std::span<float>(x).subspan(at(k), at(m.size())));
        k += m.size();
      }
      const std::vector<int64_t> groups = equal_groups(q.padded, q.groups);
      const std::span<int8_t> qv = std::span<int8_t>(payload.values).subspan(at(value_at), at(q.padded));
      const std::span<float> qs = std::span<float>(payload.scales).subspan(at(scale_at), at(q.groups));
      quantize_symmetric(x, groups, 8, qv, qs);
      dequantize_symmetric(qv, groups, qs, back);
      runner_.quantization_.weights.add(std::span<const float>(x).first(at(n)), std::span<const float>(back).first(at(n)));
    }
    const Channel ch{in.group, in.lane};
    p.requests.push_back(runner_.comm_.iall_gather_typed(ch, std::span<int8_t>(payload.values), values));
    p.requests.push_back(runner_.comm_.iall_gather_typed(ch, std::span<float>(payload.scales), scales));
  }
  p.bytes = payload_bytes(p.received);
  add_messages(p.bytes);
}

void Runner::Interpreter::finish_quantized_gather(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const int64_t block = prog_.plan.zero.quantized_weights.block;
  const std::vector<Range> ranges = collective_pieces(p.range, prog_.param_buckets[at(in.bucket)].collectives);
  std::vector<float> x;
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const QuantizedPayload& payload = p.received[k];
    const int64_t members = static_cast<int64_t>(gather_counts(in, p.range, ranges[k]).size());
    int64_t value_at = 0, scale_at = 0;
    for (int64_t m = 0; m < members; ++m) {
      const std::vector<Range> positions = quantized_positions(in, p.range, ranges[k], m);
      const QwzPiece q = qwz_piece(total(positions), block);
      if (q.padded > 0) {
        x.assign(at(q.padded), 0.0f);
        dequantize_symmetric(std::span<const int8_t>(payload.values).subspan(at(value_at), at(q.padded)),
                             equal_groups(q.padded, q.groups),
                             std::span<const float>(payload.scales).subspan(at(scale_at), at(q.groups)), x);
        int64_t e = 0;
        for (const Range& r : positions) {
          backend().upload(std::span<const float>(x).subspan(at(e), at(r.size())),
                           backend().params().subspan(at(r.begin), at(r.size())));
          e += r.size();
        }
      }
      value_at += q.padded;
      scale_at += q.groups;
    }
  }
  add_messages(-payload_bytes(p.received));
  p.received.clear();
}

// ---- MiCS: the two-level gather ----------------------------------------------------------------------

// The first level (kFlagFirstLevel, over kDpShardCross) gathers, for each collective piece, the
// shards of this rank's local index across the shard group's nodes: 1/l of the piece; the second
// (kDpLocal) gathers the node's l such parts, and places every shard.
void Runner::Interpreter::post_hierarchical_gather(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  const int64_t g = layout.partition(), l = layout.local_group();
  if (l >= g || g % l != 0) {
    throw ExecutorError(where(i) + ": MiCS's hierarchical gather needs the node's " + std::to_string(l) +
                        " data-parallel ranks to divide the shard group's " + std::to_string(g));
  }
  const bool first = (in.flags & program::kFlagFirstLevel) != 0;
  if (first) {
    p.range = layout.param_bucket(in.bucket);
    runner_.memory_.add(MemoryKind::kBuffers, in.elems * bytes_of(store_));
    p.buffer = alloc_as(p.range.size(), store_);
    add_messages(p.buffer.bytes());
  } else {
    Pending& before = pending_[at(first_level_of(i))];
    p.range = before.range;
    p.buffer = std::move(before.buffer);
  }
  const int64_t me = layout.partition_index(), j = me % l;
  for (const Range& r : collective_pieces(p.range, prog_.collectives_of(in))) {
    const TwoLevel t = two_level(layout, r);
    const std::span<float> scratch = p.buffer.view().subspan(at(r.begin - p.range.begin), at(r.size()));
    if (first) {
      const Range mine = intersect(r, layout.own_shard());
      backend().copy(scratch.subspan(at(t.offset[at(me)]), at(mine.size())),
                     backend().params().subspan(at(mine.begin), at(mine.size())));
      std::vector<int64_t> counts;
      for (int64_t s = j; s < g; s += l) counts.push_back(t.size[at(s)]);
      const std::span<float> chunk = scratch.subspan(at(t.chunk_offset[at(j)]), at(t.chunk_size[at(j)]));
      p.requests.push_back(runner_.comm_.iall_gather({in.group, in.lane}, chunk, counts, store_));
    } else {
      p.requests.push_back(runner_.comm_.iall_gather({in.group, in.lane}, scratch, t.chunk_size, store_));
    }
  }
  p.bytes = p.range.size() * bytes_of(store_) / (first ? l : 1);
}

void Runner::Interpreter::finish_hierarchical_gather(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  for (const Range& r : collective_pieces(p.range, prog_.collectives_of(in))) {
    const TwoLevel t = two_level(layout, r);
    const std::span<float> scratch = p.buffer.view().subspan(at(r.begin - p.range.begin), at(r.size()));
    for (int64_t s = 0; s < layout.partition(); ++s) {
      const Range piece = intersect(r, layout.shard(s));
      backend().copy(backend().params().subspan(at(piece.begin), at(piece.size())),
                     scratch.subspan(at(t.offset[at(s)]), at(piece.size())));
    }
  }
  add_messages(-p.buffer.bytes());
  p.buffer = {};
}

// The first level of a two-level operation the instruction completes: the dependency of the same
// op and bucket flagged kFlagFirstLevel.
int32_t Runner::Interpreter::first_level_of(int32_t i) const {
  const Instr& in = instrs_[at(i)];
  for (int32_t d : role_.deps_of(in)) {
    const Instr& dep = instrs_[at(d)];
    if (dep.op == in.op && dep.bucket == in.bucket && (dep.flags & program::kFlagFirstLevel)) return d;
  }
  throw ExecutorError(where(i) + ": the second level of a two-level operation without its first level among its dependencies");
}

// ---- qgZ: int4 all-to-alls -------------------------------------------------------------------------

// The first level (kFlagFirstLevel, over kDpLocal) swizzles and quantizes each matrix of the bucket
// (its snapshot) and all-to-alls values and scales inside the node; the bucket's persistent
// positions among them are all-reduced whole over dp, as a reduce-scatter's are. The second level
// (kDpCross) reduces and requantizes what the first received and all-to-alls it across nodes; its
// completion adds the rank's partition of each matrix's sum to the shard (zero/qgz.hpp).
void Runner::Interpreter::post_all_to_all(int32_t i) {
  named_errors(i, [&] { post_qgz_level(i); });  // the quantizers' size checks, named after the instruction
}

void Runner::Interpreter::post_qgz_level(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  const QgzSplit& split = layout.qgz_split(in.bucket);
  const bool first = (in.flags & program::kFlagFirstLevel) != 0;
  const int64_t members = runner_.comm_.group_size(in.group);
  if (static_cast<int32_t>(2 * split.matrices.size()) != prog_.collectives_of(in) ||
      members != (first ? layout.local_group() : layout.dp() / layout.local_group())) {
    throw ExecutorError(where(i) + ": " + std::to_string(split.matrices.size()) + " matrices over a group of " +
                        std::to_string(members) + " where the Program counts " + std::to_string(prog_.collectives_of(in)) +
                        " collectives and the layout " + std::to_string(layout.local_group()) + " ranks a node");
  }
  const int64_t j = dp_index_ % layout.local_group();
  const Channel ch{in.group, in.lane};
  QuantizationError& error = runner_.quantization_.gradients;
  std::vector<int64_t> send_values, send_scales;
  p.sent.reserve(split.matrices.size());
  p.received.reserve(split.matrices.size());
  if (first) {
    take_snapshot(i);
    overlay_tied_result(i);
  }
  Pending* before = first ? nullptr : &pending_[at(first_level_of(i))];
  std::vector<float> x;
  for (std::size_t t = 0; t < split.matrices.size(); ++t) {
    const QgzMatrix& m = split.matrices[t];
    QuantizedPayload& in_payload = p.received.emplace_back();
    if (first) {
      x.resize(at(m.range().size()));
      backend().download(p.buffer.view().subspan(at(packed_at(p, m.range().begin)), x.size()), x);
      p.sent.push_back(m.swizzle_quantize(x, send_values, send_scales, error));
      in_payload.values.resize(at(m.local() * m.chunk_values(j)));
      in_payload.scales.resize(at(m.local() * m.chunk_scales(j)));
    } else {
      p.sent.push_back(m.reduce_requantize(j, before->received[t], send_values, send_scales, error));
      in_payload.values.resize(at(m.nodes() * m.part_bytes(dp_index_)));
      in_payload.scales.resize(at(m.nodes() * m.part_scales(dp_index_)));
    }
    const std::vector<int64_t> recv_values(at(members), static_cast<int64_t>(in_payload.values.size()) / members);
    const std::vector<int64_t> recv_scales(at(members), static_cast<int64_t>(in_payload.scales.size()) / members);
    QuantizedPayload& out = p.sent.back();
    p.requests.push_back(runner_.comm_.iall_to_all(ch, std::span<int8_t>(out.values), send_values,
                                                   std::span<int8_t>(in_payload.values), recv_values));
    p.requests.push_back(runner_.comm_.iall_to_all(ch, std::span<float>(out.scales), send_scales,
                                                   std::span<float>(in_payload.scales), recv_scales));
  }
  p.bytes = payload_bytes(p.sent);
  add_messages(payload_bytes(p.sent) + payload_bytes(p.received));
  if (!first) {
    add_messages(-payload_bytes(before->received));
    before->received.clear();
    return;
  }
  std::vector<Range> persistent;
  for (const Range& r : p.parts) {
    for (const Range& c : clip(layout.persistent(), r)) persistent.push_back(c);
  }
  if (total(persistent) == 0) return;
  p.packed = alloc_as(total(persistent), reduce_);
  int64_t k = 0;
  for (const Range& r : persistent) {
    backend().copy(p.packed.view().subspan(at(k), at(r.size())),
                   p.buffer.view().subspan(at(packed_at(p, r.begin)), at(r.size())));
    k += r.size();
  }
  add_messages(p.packed.bytes());
  p.requests.push_back(runner_.comm_.iall_reduce({Group::kDp, in.lane}, p.packed.view(), reduce_));
}

void Runner::Interpreter::finish_all_to_all(int32_t i) {
  named_errors(i, [&] { finish_qgz_level(i); });
}

void Runner::Interpreter::finish_qgz_level(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  const StageLayout& layout = runner_.layout_;
  Backend& be = backend();
  add_messages(-payload_bytes(p.sent));
  p.sent.clear();
  if (in.flags & program::kFlagFirstLevel) {  // the received chunks wait for the second level
    add_packed_persistent_grads(p);
    add_messages(-(p.buffer.bytes() + p.packed.bytes()));
    p.buffer = {};
    p.packed = {};
    return;
  }
  const QgzSplit& split = layout.qgz_split(in.bucket);
  const Range own = layout.own_shard();
  for (std::size_t t = 0; t < split.matrices.size(); ++t) {
    const QgzMatrix& m = split.matrices[t];
    const Range part = m.part(dp_index_);
    if (part.size() == 0) continue;
    const std::vector<float> sum = m.dequantize_sum(dp_index_, p.received[t]);
    Buffer values = be.alloc(part.size());
    be.upload(sum, values.view());
    be.add(be.shard_grads().subspan(at(part.begin - own.begin), at(part.size())), values.view());
  }
  add_messages(-payload_bytes(p.received));
  p.received.clear();
}

}  // namespace stagecraft::executor
