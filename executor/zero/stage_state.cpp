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
    const int64_t opt = layout.optimizer_range().size(), persistent = layout.persistent_elems();
    grads_ = mem_.allocate(padded);
    if (reduces_into_shard()) shard_grads_ = mem_.allocate(layout.shard_elems());
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
  const Range opt = layout_.optimizer_range();
  if (offload_) mem_.download(params_.subspan(at(opt.begin), at(opt.size())), host_params_);
  if (store_ != Format::kFp32) {
    if (!master_.empty()) mem_.copy(master_, params_.subspan(at(opt.begin), at(opt.size())));
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
  const Range opt = layout_.optimizer_range();
  return params_.subspan(at(opt.begin), at(opt.size()));
}

std::span<float> StageState::persistent_values(const Range& r) {
  if (store_ == Format::kFp32) return params_.subspan(at(r.begin), at(r.size()));
  return persistent_master_.subspan(at(layout_.persistent_index(r.begin)), at(r.size()));
}

void StageState::refresh_working_sharded() {
  const int64_t first = layout_.optimizer_range().begin;
  const std::span<float> masters = opt_masters();
  for (const Range& r : sharded_ranges()) {
    const std::span<float> working = params_.subspan(at(r.begin), at(r.size()));
    const std::span<float> master = masters.subspan(at(r.begin - first), at(r.size()));
    if (offload_) {
      mem_.upload(master, working);
      if (store_ != Format::kFp32) mem_.round_copy(working, working, store_);
    } else {
      mem_.round_copy(working, master, store_);
    }
  }
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

std::span<float> StageState::optimizer_grads() {
  if (reduces_into_shard()) return shard_grads_;
  const Range opt = layout_.optimizer_range();
  return grads_.subspan(at(opt.begin), at(opt.size()));
}

// Pieces cut at every edge of a persistent range and of the own shard inside each range.
std::vector<StageState::Piece> StageState::reduced_pieces(const std::vector<Range>& ranges) {
  const Range own = layout_.own_shard();
  const bool into_shard = reduces_into_shard();
  const std::vector<Range>& kept = layout_.persistent();
  std::vector<Piece> out;
  for (const Range& r : ranges) {
    std::vector<int64_t> cuts = {r.begin, r.end};
    for (const Range& k : kept) {
      for (int64_t e : {k.begin, k.end}) {
        if (e > r.begin && e < r.end) cuts.push_back(e);
      }
    }
    for (int64_t e : {own.begin, own.end}) {
      if (e > r.begin && e < r.end) cuts.push_back(e);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      const int64_t a = cuts[i], n = cuts[i + 1] - cuts[i];
      const auto k = std::find_if(kept.begin(), kept.end(), [&](const Range& q) { return q.begin <= a && a < q.end; });
      if (k != kept.end()) {
        out.push_back({persistent_grads_.subspan(at(layout_.persistent_index(a)), at(n)), n});
      } else if (!into_shard) {
        out.push_back({grads_.subspan(at(a), at(n)), n});
      } else if (a >= own.begin && a < own.end) {
        out.push_back({shard_grads_.subspan(at(a - own.begin), at(n)), n});
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
  // its shard (with experts apart, StageLayout::counted: reduced in place, never into a shard)
  for (const Range& r : subtract(subtract(layout_.counted(), layout_.persistent()), layout_.norm_excluded())) {
    const std::span<float> g = reduces_into_shard() ? shard_grads_.subspan(at(r.begin - own.begin), at(r.size()))
                                                    : grads_.subspan(at(r.begin), at(r.size()));
    mem_.add_sum_sq(g, sum);
  }
  for (const Range& r : subtract(clip(layout_.persistent(), own), layout_.norm_excluded())) {
    mem_.add_sum_sq(persistent_grads_.subspan(at(layout_.persistent_index(r.begin)), at(r.size())), sum);
  }
  return sum;
}

std::vector<Range> StageState::sharded_ranges() const {
  return subtract(layout_.optimizer_range(), layout_.persistent());
}

// AdamW over the sharded ranges; params_base and grads_base cover optimizer_range() in `where`.
void StageState::step_ranges(const AdamWConfig& cfg, int64_t step, float clip_scale, StateMemory& where,
                             std::span<float> params_base, std::span<const float> grads_base) {
  const int64_t first = layout_.optimizer_range().begin;
  for (const Range& r : sharded_ranges()) {
    const std::size_t off = at(r.begin - first), n = at(r.size());
    const AdamWShard shard{r.begin, params_base.subspan(off, n), grads_base.subspan(off, n), m_.subspan(off, n),
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
  step_ranges(cfg, step, clip_scale, mem_, opt_masters(), optimizer_grads());
  if (store_ != Format::kFp32) refresh_working_sharded();
  step_persistent(cfg, step, clip_scale);
}

void StageState::copy_grads_to_host() {
  if (!offload_) throw ExecutorError("StageState: OffloadCopy in a plan without optimizer offload");
  mem_.download(optimizer_grads(), host_grads_);
}

void StageState::host_optimizer_step(const AdamWConfig& cfg, int64_t step, float clip_scale) {
  if (!offload_) throw ExecutorError("StageState: host optimizer step in a plan without optimizer offload");
  step_ranges(cfg, step, clip_scale, host_, host_params_, host_grads_);
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

// ---- checkpoint -----------------------------------------------------------------------------------

int64_t StageState::owned_state_elems() const {
  return 3 * layout_.optimizer_range().size() + 3 * layout_.persistent_elems();
}

std::vector<float> StageState::owned_state() {
  const Range opt = layout_.optimizer_range();
  std::vector<float> out(at(owned_state_elems()));
  std::size_t k = 0;
  auto take = [&](std::span<const float> src, StateMemory& from) {
    from.download(src, std::span<float>(out).subspan(k, src.size()));
    k += src.size();
  };
  StateMemory& moments = offload_ ? static_cast<StateMemory&>(host_) : mem_;
  take(opt_masters(), opt_master_memory());  // the values AdamW updates: fp32 whatever the working copy
  // the persistent tensors inside the range step apart (step_persistent): their current values, so
  // that the first values are the rank's parameters for whoever reads them (export, peers)
  for (const Range& r : clip(layout_.persistent(), opt)) {
    mem_.download(persistent_values(r), std::span<float>(out).subspan(at(r.begin - opt.begin), at(r.size())));
  }
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
  put(opt_masters(), opt_master_memory());
  put(m_, moments);
  put(v_, moments);
  for (const Range& r : layout_.persistent()) put(persistent_values(r), mem_);
  put(persistent_m_, mem_);
  put(persistent_v_, mem_);
  // the working copy from the masters where they are apart (mixed precision, offload)
  if (store_ != Format::kFp32 || offload_) refresh_working_sharded();
  refresh_working_persistent();
}

void StageState::load_peer_shard(int64_t shard, std::span<const float> peer_state) {
  const Range r = layout_.shard(shard);
  if (static_cast<int64_t>(peer_state.size()) < r.size()) {
    throw CheckpointError("stage " + std::to_string(layout_.stage()) + ": the owner of shard " + std::to_string(shard) +
                          "'s checkpoint holds fewer values than its shard of " + std::to_string(r.size()));
  }
  const std::span<float> working = params_.subspan(at(r.begin), at(r.size()));
  mem_.upload(peer_state.first(at(r.size())), working);  // the peer's masters (owned_state's first values)
  if (store_ != Format::kFp32) mem_.round_copy(working, working, store_);
}

}  // namespace stagecraft::executor
