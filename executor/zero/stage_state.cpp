#include "executor/zero/stage_state.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "executor/errors.hpp"
#include "executor/index.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor {

namespace {

constexpr float kReleased = std::numeric_limits<float>::quiet_NaN();

int64_t bytes_of(std::span<const float> v) { return static_cast<int64_t>(v.size() * sizeof(float)); }

std::unique_ptr<StateMemory> host_if_null(StateMemory* given) {
  return given ? nullptr : std::make_unique<HostMemory>();
}

}  // namespace

StageState::StageState(const StageLayout& layout, bool offload, MemoryTracker& memory, bool forward_only,
                       StateMemory* storage)
    : layout_(layout),
      offload_(offload && !forward_only),
      memory_(memory),
      own_storage_(host_if_null(storage)),
      mem_(storage ? *storage : *own_storage_),
      store_(layout.precision().store) {
  const int64_t padded = layout.padded_elems();
  params_ = mem_.allocate(padded);
  if (!forward_only) {
    const int64_t opt = layout.owned_elems(), persistent = layout.persistent_elems();
    grads_ = mem_.allocate(padded);
    if (reduces_into_shard()) shard_grads_ = mem_.allocate(opt);
    StateMemory& moments = offload_ ? static_cast<StateMemory&>(host_) : mem_;  // DeepSpeed's CPU Adam keeps them on the host
    m_ = moments.allocate(opt);
    v_ = moments.allocate(opt);
    persistent_grads_ = mem_.allocate(persistent);
    persistent_m_ = mem_.allocate(persistent);
    persistent_v_ = mem_.allocate(persistent);
    if (offload_) {
      host_params_ = host_.allocate(opt);
      host_grads_ = host_.allocate(opt);
    }
    if (store_ != Format::kFp32) {
      if (!offload_) master_ = mem_.allocate(opt);
      persistent_master_ = mem_.allocate(persistent);
    }
  }
  // ZeRO-3 keeps its shard and the persistent tensors; gathered buckets count when gathered.
  int64_t kept = padded;
  if (layout.zero3_gathers()) kept = layout.shard_elems() + total(subtract(layout.persistent(), {layout.own_shard()}));
  memory_.set(MemoryKind::kParams, kept * bytes_of(store_));
  memory_.set(MemoryKind::kGrads, bytes_of(grads_) + bytes_of(shard_grads_) + bytes_of(persistent_grads_));
  memory_.set(MemoryKind::kOptimizer, bytes_of(m_) + bytes_of(v_) + bytes_of(persistent_m_) + bytes_of(persistent_v_) +
                                       bytes_of(host_params_) + bytes_of(host_grads_) + bytes_of(master_) +
                                       bytes_of(persistent_master_));
}

// Initial values are computed on the host (ParamLayout::init, the same for every backend) and
// copied into the storage chunk by chunk.
void StageState::init_params(uint64_t seed) {
  for (int64_t c = 0; c < layout_.chunk_count(); ++c) {
    std::vector<float> values(at(layout_.chunk_range(c).size()), 0.0f);
    layout_.chunk(c).init<float>(values, seed);
    mem_.upload(values, chunk_params(c));
  }
  finish_init();
}

void StageState::init_params(ParamSource& source) {
  std::vector<Range> kept;
  if (layout_.zero3_gathers()) {
    kept = subtract(layout_.persistent(), {layout_.own_shard()});  // each position read once
    kept.push_back(layout_.own_shard());
  }
  std::vector<float> values;
  for (int64_t c = 0; c < layout_.chunk_count(); ++c) {
    for (const TensorSlot& t : layout_.chunk(c).tensors()) {
      const Range tr{layout_.chunk_offset(c) + t.offset, layout_.chunk_offset(c) + t.offset + t.size()};
      const std::vector<Range> pieces = layout_.zero3_gathers() ? [&] {
        std::vector<Range> out;
        for (const Range& k : kept) {
          if (const Range i = intersect(tr, k); i.size() > 0) out.push_back(i);
        }
        return out;
      }() : std::vector<Range>{tr};
      for (const Range& r : pieces) {
        values.assign(at(r.size()), 0.0f);
        source.read(t, r.begin - tr.begin, r.end - tr.begin, values);
        mem_.upload(values, params_.subspan(at(r.begin), at(r.size())));
      }
    }
  }
  finish_init();
}

// The values just read are fp32: the masters take them, then the working copy is rounded.
void StageState::finish_init() {
  for (const StageLayout::Owned& o : layout_.owned()) {
    const std::span<float> values = params_.subspan(at(o.flat.begin), at(o.flat.size()));
    if (offload_) mem_.download(values, host_params_.subspan(at(o.packed), at(o.flat.size())));
    if (!offload_ && store_ != Format::kFp32) mem_.copy(master_.subspan(at(o.packed), at(o.flat.size())), values);
  }
  if (store_ != Format::kFp32) {
    if (!persistent_master_.empty()) {
      for (const Range& r : layout_.persistent()) mem_.copy(persistent_values(r), params_.subspan(at(r.begin), at(r.size())));
    }
    mem_.round_copy(params_, params_, store_);
  }
  if (layout_.zero3_gathers()) release({0, layout_.padded_elems()});
}

std::span<float> StageState::opt_masters() {
  if (offload_) return host_params_;
  if (store_ != Format::kFp32) return master_;
  return {};  // the working copy itself: opt_values
}

std::span<float> StageState::opt_values(Range flat, int64_t packed) {
  if (offload_ || store_ != Format::kFp32) return opt_masters().subspan(at(packed), at(flat.size()));
  return params_.subspan(at(flat.begin), at(flat.size()));
}

std::span<float> StageState::reduced_grads(Range flat, int64_t packed, bool reduced) {
  return reduced ? shard_grads_.subspan(at(packed), at(flat.size())) : grads_.subspan(at(flat.begin), at(flat.size()));
}

std::span<float> StageState::persistent_values(const Range& r) {
  if (store_ == Format::kFp32) return params_.subspan(at(r.begin), at(r.size()));
  return persistent_master_.subspan(at(layout_.persistent_index(r.begin)), at(r.size()));
}

void StageState::refresh_working(Range r, int64_t packed) {
  const std::span<float> working = params_.subspan(at(r.begin), at(r.size()));
  const std::span<float> master = opt_masters().subspan(at(packed), at(r.size()));
  if (offload_) {
    mem_.upload(master, working);
    if (store_ != Format::kFp32) mem_.round_copy(working, working, store_);
  } else {
    mem_.round_copy(working, master, store_);
  }
}

void StageState::refresh_working_sharded() {
  for (const StageLayout::Owned& o : sharded_ranges()) refresh_working(o.flat, o.packed);
}

void StageState::refresh_working_persistent() {
  if (store_ == Format::kFp32) return;
  for (const Range& r : layout_.persistent()) {
    mem_.round_copy(params_.subspan(at(r.begin), at(r.size())), persistent_values(r), store_);
  }
}

std::span<float> StageState::chunk_params(int64_t c) {
  const Range r = layout_.chunk_range(c);
  return params_.subspan(at(r.begin), at(r.size()));
}

std::span<float> StageState::chunk_grads(int64_t c) {
  const Range r = layout_.chunk_range(c);
  return grads_.subspan(at(r.begin), at(r.size()));
}

void StageState::zero_grads() {
  for (std::span<float> v : {grads_, shard_grads_, persistent_grads_}) mem_.fill(v, 0.0f);
}

// Pieces cut at every edge of a persistent range and of an owned range inside each range.
std::vector<StageState::Piece> StageState::reduced_pieces(const std::vector<Range>& ranges) {
  const std::vector<Range>& kept = layout_.persistent();
  const std::vector<StageLayout::Owned>& owned = layout_.owned();
  std::vector<Piece> out;
  for (const Range& r : ranges) {
    std::vector<int64_t> cuts = {r.begin, r.end};
    for (const Range& k : kept) {
      for (int64_t e : {k.begin, k.end}) {
        if (e > r.begin && e < r.end) cuts.push_back(e);
      }
    }
    for (const StageLayout::Owned& o : owned) {
      for (int64_t e : {o.flat.begin, o.flat.end}) {
        if (e > r.begin && e < r.end) cuts.push_back(e);
      }
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      const int64_t a = cuts[i], n = cuts[i + 1] - cuts[i];
      const auto k = std::find_if(kept.begin(), kept.end(), [&](const Range& q) { return q.begin <= a && a < q.end; });
      const auto o = std::find_if(owned.begin(), owned.end(), [&](const auto& q) { return q.flat.begin <= a && a < q.flat.end; });
      if (k != kept.end()) {
        out.push_back({persistent_grads_.subspan(at(layout_.persistent_index(a)), at(n)), n});
      } else if (o != owned.end()) {
        out.push_back({reduced_grads({a, a + n}, o->packed + (a - o->flat.begin), o->reduced), n});
      } else {
        out.push_back({{}, n});
      }
    }
  }
  return out;
}

void StageState::pack_reduced_grads(const std::vector<Range>& ranges, std::span<float> out) {
  if (static_cast<int64_t>(out.size()) != total(ranges)) {
    throw ExecutorError("StageState: packing " + std::to_string(total(ranges)) + " positions into " +
                        std::to_string(out.size()) + " values");
  }
  std::size_t k = 0;
  for (const Piece& p : reduced_pieces(ranges)) {
    const std::span<float> dst = out.subspan(k, at(p.size));
    if (p.where.empty()) {
      mem_.fill(dst, 0.0f);
    } else {
      mem_.copy(dst, p.where);
    }
    k += at(p.size);
  }
}

void StageState::unpack_reduced_grads(const std::vector<Range>& ranges, std::span<const float> values) {
  if (static_cast<int64_t>(values.size()) != total(ranges)) {
    throw ExecutorError("StageState: " + std::to_string(values.size()) + " values to unpack into " +
                        std::to_string(total(ranges)) + " positions");
  }
  std::size_t k = 0;
  for (const Piece& p : reduced_pieces(ranges)) {
    if (!p.where.empty()) mem_.copy(p.where, values.subspan(k, at(p.size)));
    k += at(p.size);
  }
}

double StageState::owned_grad_norm_sq() {
  // the dp/g replicas of a shard hold the same reduced gradients: the first replica counts them
  if (layout_.replica_index() > 0) return 0;
  const Range own = layout_.own_shard();
  double sum = 0;
  // what it counts (StageLayout::counted), inside its owned ranges: each piece where it was reduced
  // (with experts apart at ZeRO-0 a slice of the local buffer, all owned)
  for (const StageLayout::Owned& o : layout_.owned()) {
    for (const Range& r : subtract(subtract(clip(layout_.counted(), o.flat), layout_.persistent()), layout_.norm_excluded())) {
      mem_.add_sum_sq(reduced_grads(r, o.packed + (r.begin - o.flat.begin), o.reduced), sum);
    }
  }
  for (const Range& r : subtract(clip(layout_.persistent(), own), layout_.norm_excluded())) {
    mem_.add_sum_sq(persistent_grads_.subspan(at(layout_.persistent_index(r.begin)), at(r.size())), sum);
  }
  return sum;
}

std::vector<StageLayout::Owned> StageState::sharded_ranges() const {
  std::vector<StageLayout::Owned> out;
  for (const StageLayout::Owned& o : layout_.owned()) {
    for (const Range& r : subtract(o.flat, layout_.persistent())) out.push_back({r, o.packed + (r.begin - o.flat.begin), o.reduced});
  }
  return out;
}

// AdamW over the sharded ranges: on the host copies (optimizer offload, `on_host`: packed as the
// moments), else on opt_values and the reduced gradients.
void StageState::step_ranges(const AdamWConfig& cfg, int64_t step, float clip_scale, bool on_host) {
  StateMemory& where = on_host ? static_cast<StateMemory&>(host_) : mem_;
  for (const auto& [r, packed, reduced] : sharded_ranges()) {
    const std::size_t off = at(packed), n = at(r.size());
    const AdamWShard shard{r.begin, on_host ? host_params_.subspan(off, n) : opt_values(r, packed),
                           on_host ? host_grads_.subspan(off, n) : reduced_grads(r, packed, reduced), m_.subspan(off, n),
                           v_.subspan(off, n)};
    where.adamw(cfg, step, shard, layout_.decayed(), clip_scale);
  }
}

void StageState::step_persistent(const AdamWConfig& cfg, int64_t step, float clip_scale) {
  for (const Range& r : layout_.persistent()) {
    const std::size_t k = at(layout_.persistent_index(r.begin)), n = at(r.size());
    const AdamWShard shard{r.begin, persistent_values(r), persistent_grads_.subspan(k, n), persistent_m_.subspan(k, n),
                           persistent_v_.subspan(k, n)};
    mem_.adamw(cfg, step, shard, layout_.decayed(), clip_scale);
  }
  refresh_working_persistent();
}

void StageState::optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale) {
  step_ranges(cfg, step, clip_scale, false);
  if (store_ != Format::kFp32) refresh_working_sharded();
  step_persistent(cfg, step, clip_scale);
}

void StageState::copy_grads_to_host() {
  if (!offload_) throw ExecutorError("StageState: OffloadCopy in a plan without optimizer offload");
  for (const StageLayout::Owned& o : layout_.owned()) {
    mem_.download(reduced_grads(o.flat, o.packed, o.reduced), host_grads_.subspan(at(o.packed), at(o.flat.size())));
  }
}

void StageState::host_optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale) {
  if (!offload_) throw ExecutorError("StageState: host optimizer step in a plan without optimizer offload");
  step_ranges(cfg, step, clip_scale, true);
  step_persistent(cfg, step, clip_scale);
}

void StageState::copy_params_from_host() {
  if (!offload_) throw ExecutorError("StageState: OffloadCopy in a plan without optimizer offload");
  refresh_working_sharded();
}

void StageState::release(Range r) {
  if (!layout_.zero3_gathers()) throw ExecutorError("StageState: ReleaseParams outside ZeRO-3 with dp > 1");
  for (const Range& d : subtract(subtract(r, {layout_.own_shard()}), layout_.persistent())) {
    mem_.fill(params_.subspan(at(d.begin), at(d.size())), kReleased);
  }
}

void StageState::nudge(Range r, std::span<const float> delta) {
  if (static_cast<int64_t>(delta.size()) != r.size()) {
    throw ExecutorError("StageState: " + std::to_string(delta.size()) + " values to add to " + std::to_string(r.size()) + " positions");
  }
  std::vector<float> values;
  auto add = [&](std::span<float> where, StateMemory& mem, int64_t first) {
    values.resize(where.size());
    mem.download(where, values);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] += delta[at(first - r.begin) + i];
    mem.upload(values, where);
  };
  for (const StageLayout::Owned& o : sharded_ranges()) {
    const Range x = intersect(o.flat, r);
    if (x.size() == 0) continue;
    const int64_t packed = o.packed + (x.begin - o.flat.begin);
    add(opt_values(x, packed), opt_master_memory(), x.begin);
    if (offload_ || store_ != Format::kFp32) refresh_working(x, packed);  // the working copy from its master
  }
  for (const Range& x : clip(layout_.persistent(), r)) {
    add(persistent_values(x), mem_, x.begin);
    if (store_ != Format::kFp32) mem_.round_copy(params_.subspan(at(x.begin), at(x.size())), persistent_values(x), store_);
  }
}

// ---- checkpoint -----------------------------------------------------------------------------------

int64_t StageState::owned_state_elems() const {
  return 3 * layout_.owned_elems() + 3 * layout_.persistent_elems();
}

std::vector<float> StageState::owned_state() {
  std::vector<float> out(at(owned_state_elems()));
  std::size_t k = 0;
  auto take = [&](std::span<const float> src, StateMemory& from) {
    from.download(src, std::span<float>(out).subspan(k, src.size()));
    k += src.size();
  };
  StateMemory& moments = offload_ ? static_cast<StateMemory&>(host_) : mem_;
  // the values AdamW updates, packed as owned(): fp32 whatever the working copy
  for (const StageLayout::Owned& o : layout_.owned()) {
    opt_master_memory().download(opt_values(o.flat, o.packed), std::span<float>(out).subspan(at(o.packed), at(o.flat.size())));
    // the persistent tensors inside the range step apart (step_persistent): their current values, so
    // that the first values are the rank's parameters for whoever reads them (export, peers)
    for (const Range& r : clip(layout_.persistent(), o.flat)) {
      mem_.download(persistent_values(r), std::span<float>(out).subspan(at(o.packed + (r.begin - o.flat.begin)), at(r.size())));
    }
  }
  k = at(layout_.owned_elems());
  take(m_, moments);
  take(v_, moments);
  for (const Range& r : layout_.persistent()) take(persistent_values(r), mem_);
  take(persistent_m_, mem_);
  take(persistent_v_, mem_);
  return out;
}

void StageState::load_owned_state(std::span<const float> state) {
  if (static_cast<int64_t>(state.size()) != owned_state_elems()) {
    throw CheckpointError("stage " + std::to_string(layout_.stage()) + ", dp rank " +
                          std::to_string(layout_.dp_index()) + ": checkpoint state has " +
                          std::to_string(state.size()) + " values, expected " + std::to_string(owned_state_elems()));
  }
  if (layout_.zero3_gathers()) mem_.fill(params_, kReleased);
  std::size_t k = 0;
  auto put = [&](std::span<float> dst, StateMemory& to) {
    to.upload(state.subspan(k, dst.size()), dst);
    k += dst.size();
  };
  StateMemory& moments = offload_ ? static_cast<StateMemory&>(host_) : mem_;
  for (const StageLayout::Owned& o : layout_.owned()) {
    opt_master_memory().upload(state.subspan(at(o.packed), at(o.flat.size())), opt_values(o.flat, o.packed));
  }
  k = at(layout_.owned_elems());
  put(m_, moments);
  put(v_, moments);
  for (const Range& r : layout_.persistent()) put(persistent_values(r), mem_);
  put(persistent_m_, mem_);
  put(persistent_v_, mem_);
  // the working copy from the masters where they are apart (mixed precision, offload)
  if (store_ != Format::kFp32 || offload_) refresh_working_sharded();
  refresh_working_persistent();
}

void StageState::load_peer_shard(int64_t set, int64_t shard, std::span<const float> peer_state) {
  const StageLayout::PartitionSet& s = layout_.partition_sets().at(at(set));
  // the peer's masters (owned_state's first values), its shard of this set at the set's packed place
  int64_t k = s.packed;
  for (const Range& r : layout_.positions(s, s.coordinates(shard))) {
    if (static_cast<int64_t>(peer_state.size()) < k + r.size()) {
      throw CheckpointError("stage " + std::to_string(layout_.stage()) + ": the owner of shard " + std::to_string(shard) +
                            "'s checkpoint holds fewer values than its shard of " + std::to_string(s.shard));
    }
    const std::span<float> working = params_.subspan(at(r.begin), at(r.size()));
    mem_.upload(peer_state.subspan(at(k), at(r.size())), working);
    if (store_ != Format::kFp32) mem_.round_copy(working, working, store_);
    k += r.size();
  }
}

}  // namespace stagecraft::executor
