#include "executor/zero/stage_layout.hpp"

#include <algorithm>

#include "core/count/tensors.hpp"
#include "core/program/units.hpp"
#include "core/program/zero.hpp"
#include "core/spec/plan.hpp"
#include "executor/errors.hpp"
#include "executor/zero/ranges.hpp"

namespace stagecraft::executor {

namespace {

void append_merged(std::vector<Range>& out, Range r) {
  if (r.size() <= 0) return;
  if (!out.empty() && out.back().end == r.begin) {
    out.back().end = r.end;
  } else {
    out.push_back(r);
  }
}

std::string where(int64_t stage) { return "stage " + std::to_string(stage) + ": "; }

}  // namespace

StageLayout::StageLayout(const program::Program& prog, int64_t stage, int64_t dp_index, int64_t tp_index)
    : prog_(&prog), stage_(stage), dp_(prog.placement.dp), dp_index_(dp_index), tp_index_(tp_index),
      zero_stage_(prog.plan.zero.stage), precision_(precision_of(prog)) {
  if (stage < 0 || stage >= prog.plan.pp || dp_index < 0 || dp_index >= dp_ || tp_index < 0 || tp_index >= prog.plan.tp) {
    throw ExecutorError("StageLayout: stage " + std::to_string(stage) + ", dp index " + std::to_string(dp_index) +
                        ", tp index " + std::to_string(tp_index) + " outside the plan's pp " +
                        std::to_string(prog.plan.pp) + " x dp " + std::to_string(dp_) + " x tp " +
                        std::to_string(prog.plan.tp));
  }
  const int64_t rank = prog.placement.rank(stage, dp_index, tp_index);
  ep_ = prog.model.moe.on() ? prog.placement.ep : 1;
  ep_index_ = ep_ > 1 ? prog.placement.ep_index_of(rank) : 0;
  const int64_t etp = prog.model.moe.on() ? prog.placement.etp : 1;
  const int64_t etp_index = etp > 1 ? prog.placement.etp_index_of(rank) : 0;
  edp_ = prog.plan.expert_dp();
  edp_index_ = prog.model.moe.on() ? prog.placement.expert_dp_index_of(rank) : dp_index;
  experts_apart_ = prog.placement.experts_apart;
  for (int64_t c = 0; c < prog.plan.virtual_stages; ++c) {
    const program::ChunkInfo& info = prog.chunk(stage, c);
    chunks_.emplace_back(prog.model, info.unit_begin, info.unit_end, prog.plan.tp, tp_index, ep_, ep_index_, etp, etp_index);
    offsets_.push_back(elems_);
    for (const Range& r : chunks_.back().expert_ranges()) append_merged(experts_, {elems_ + r.begin, elems_ + r.end});
    elems_ += chunks_.back().size();
  }
  partition_ = spec::partition_group(prog.plan.zero, dp_);
  const int64_t h = prog.plan.zero.hpz_group;
  hpz_ = prog.plan.zero.stage == 3 && h > 1 && h < dp_ ? h : 0;
  local_ = prog.placement.local_size();
  shard_ = program::shard_elems(elems_, partition_);
  padded_ = shard_ * partition_;
  split_ = experts_apart_ && zero_stage_ >= 1;
  build_sets();
  // the lowering's rule (FSDP flattens every tensor: nothing persists)
  const int64_t threshold = program::persistence_threshold(prog.plan.zero, prog.training.framework_profile());
  for (int64_t c = 0; c < chunk_count(); ++c) {
    const int64_t off = offsets_[static_cast<std::size_t>(c)];
    for (const Range& r : chunk(c).decayed_ranges()) append_merged(decayed_, {off + r.begin, off + r.end});
    for (const TensorSlot& t : chunk(c).tensors()) {
      const Range r{off + t.offset, off + t.offset + t.size()};
      if (zero3_gathers() && t.size() < threshold) append_merged(persistent_, r);
      // the global norm counts a replicated tensor once, on tp rank 0, and the tied copy on stage 0
      const bool tied_copy = t.name == "embedding.wte" && chunk(c).head_has_wte_copy();
      // (a routed expert's tensor is whole on each rank, but with ep > 1 the ranks' experts differ: counted())
      if (tied_copy || (t.replicated && tp_index > 0 && !t.expert)) append_merged(norm_excluded_, r);
      // sequence parallelism: each tp rank's gradient covers its rows, summed over tp once a step —
      // the norms', and a MoE unit's router's (Megatron-Core marks it sequence_parallel): its weight,
      // gpt-oss's logit bias and DeepSeek-V3's selection bias (no gradient: zeros, as the Program counts it);
      // and Qwen2-MoE's shared gate (likewise marked), whose gradient each rank took from its slice of
      // the shared experts' output
      const bool router = prog.plan.sequence_parallel && (t.name.ends_with(".mlp.router.w") || t.name.ends_with(".mlp.router.b") ||
                                                          t.name.ends_with(".mlp.router.logit_b") ||
                                                          t.name.ends_with(".mlp.shared_gate.w"));
      // without sequence parallelism, the query and key norms' alone (each tp rank's heads': Megatron-Core
      // sums them over tp under qk_layernorm too)
      if (prog.plan.sequence_parallel ? (t.spec.norm || router) : count::is_qk_norm(t.name)) append_merged(norms_, r);
    }
  }
  for (const Range& r : persistent_) {
    persistent_prefix_.push_back(persistent_elems_);
    persistent_elems_ += r.size();
  }
  int64_t piece[2] = {0, 0};  // by set: the next coordinate
  for (const program::Bucket& b : prog.param_buckets) {
    const bool mine = b.stage == stage && b.chunk < 0;
    int64_t& next = piece[split_ && b.experts ? 1 : 0];
    allgather_pieces_.push_back(mine ? Range{next, next + b.elems} : Range{0, 0});
    if (mine) next += b.elems;
  }
  build_qgz(prog);
  check_against(prog);
}

void StageLayout::build_sets() {
  if (!split_) {
    PartitionSet all;
    all.positions = {{0, padded_}};
    all.group = partition_;
    all.index = partition_index();
    all.shard = shard_;
    all.reduced = zero_stage_ >= 1 && dp_ > 1;
    sets_.push_back(std::move(all));
  } else {
    const int64_t ne = total(experts_), nd = elems_ - ne;
    const int64_t sd = program::shard_elems(nd, partition_), se = program::shard_elems(ne, edp_);
    const int64_t pad_d = sd * partition_ - nd, pad_e = se * edp_ - ne;
    padded_ = elems_ + pad_d + pad_e;
    PartitionSet dense;
    dense.positions = subtract(Range{0, elems_}, experts_);
    append_merged(dense.positions, {elems_, elems_ + pad_d});
    dense.group = partition_;
    dense.index = partition_index();
    dense.shard = sd;
    dense.reduced = dp_ > 1;  // the lowering reduces the dense gradients over dp (emit.cpp grads_ready)
    PartitionSet ex;
    ex.positions = experts_;
    append_merged(ex.positions, {elems_ + pad_d, padded_});
    ex.group = edp_;
    ex.index = edp_index_;
    ex.shard = se;
    ex.packed = sd;
    ex.experts = true;
    ex.reduced = edp_ > 1;
    sets_.push_back(std::move(dense));
    sets_.push_back(std::move(ex));
  }
  if (zero_stage_ == 0) {
    owned_.push_back({{0, padded_}, 0, false});
  } else {
    for (const PartitionSet& set : sets_) {
      int64_t k = set.packed;
      for (const Range& r : positions(set, set.coordinates(set.index))) {
        owned_.push_back({r, k, set.reduced});
        k += r.size();
      }
    }
  }
  for (const Owned& o : owned_) owned_elems_ += o.flat.size();
}

std::vector<Range> StageLayout::positions(const PartitionSet& s, Range c) const {
  std::vector<Range> out;
  int64_t k = 0;  // the coordinate of r.begin
  for (const Range& r : s.positions) {
    if (k >= c.end) break;
    const Range in = intersect({k, k + r.size()}, c);
    if (in.size() > 0) out.push_back({r.begin + (in.begin - k), r.begin + (in.end - k)});
    k += r.size();
  }
  return out;
}

int64_t StageLayout::coordinate(const PartitionSet& s, int64_t pos) const {
  int64_t k = 0;
  for (const Range& r : s.positions) {
    if (pos >= r.begin && pos < r.end) return k + (pos - r.begin);
    k += r.size();
  }
  throw ExecutorError(where(stage_) + "position " + std::to_string(pos) + " is not in the " +
                      (s.experts ? "experts'" : "dense") + " partition");
}

std::vector<int64_t> StageLayout::member_counts(const PartitionSet& s, Range c) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < s.group; ++i) out.push_back(intersect(c, s.coordinates(i)).size());
  return out;
}

std::vector<Range> StageLayout::owned_ranges() const {
  std::vector<Range> out;
  for (const Owned& o : owned_) out.push_back(o.flat);
  std::sort(out.begin(), out.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  return out;
}

std::vector<Range> QgzSplit::matrix_ranges() const {
  std::vector<Range> out;
  for (const QgzMatrix& m : matrices) out.push_back(m.range());
  return out;
}

// Each qgZ bucket's tensors: a matrix (rows > 1) whose elements divide by 2·dp is all-to-all'd,
// anything else reduce-scattered on its own (program/zero.cpp grad_buckets, the same rule).
void StageLayout::build_qgz(const program::Program& prog) {
  qgz_.resize(prog.grad_buckets.size());
  for (std::size_t b = 0; b < prog.grad_buckets.size(); ++b) {
    const program::Bucket& bucket = prog.grad_buckets[b];
    if (bucket.stage != stage_ || bucket.qgz_matrices + bucket.qgz_fallbacks == 0) continue;
    if (partition_ != dp_) throw ExecutorError(where(stage_) + "qgZ with a shard group smaller than dp");
    QgzSplit& split = qgz_[b];
    const int64_t off = chunk_offset(bucket.chunk);
    for (const TensorSlot& t : chunk(bucket.chunk).tensors()) {
      if (t.unit < bucket.unit_begin || t.unit >= bucket.unit_end) continue;
      const Range r{off + t.offset, off + t.offset + t.size()};
      if (t.rows > 1 && t.size() % (2 * dp_) == 0) {
        std::vector<Range> parts;  // r ∩ shard d, written so that empty ones keep the tiling's place
        for (int64_t d = 0; d < dp_; ++d) {
          parts.push_back({std::clamp(shard(d).begin, r.begin, r.end), std::clamp(shard(d).end, r.begin, r.end)});
        }
        try {
          split.matrices.emplace_back(r, std::move(parts), t.rows, t.cols, local_);
        } catch (const ExecutorError& e) {
          throw ExecutorError(where(stage_) + "gradient bucket " + std::to_string(b) + ", " + t.name + ": " + e.what());
        }
      } else {
        split.fallbacks.push_back(r);
      }
    }
  }
}

bool StageLayout::qgz(int32_t bucket) const {
  const QgzSplit& s = qgz_.at(static_cast<std::size_t>(bucket));
  return !s.matrices.empty() || !s.fallbacks.empty();
}

const QgzSplit& StageLayout::qgz_split(int32_t bucket) const {
  if (!qgz(bucket)) throw ExecutorError(where(stage_) + "gradient bucket " + std::to_string(bucket) + " is not reduced by qgZ");
  return qgz_[static_cast<std::size_t>(bucket)];
}

Range StageLayout::secondary_slice(Range bucket, int64_t j) const {
  if (hpz_ <= 0) throw ExecutorError(where(stage_) + "no hpZ secondary partition in this plan");
  const int64_t size = (bucket.size() + hpz_ - 1) / hpz_;
  const int64_t begin = std::min(bucket.end, bucket.begin + j * size);
  return {begin, std::min(bucket.end, begin + size)};
}

std::vector<int64_t> StageLayout::secondary_counts(Range bucket, Range r) const {
  std::vector<int64_t> out;
  for (int64_t j = 0; j < hpz_; ++j) out.push_back(intersect(r, secondary_slice(bucket, j)).size());
  return out;
}

std::vector<Range> StageLayout::grad_bucket_parts(int32_t bucket) const {
  const Range r = grad_bucket(bucket);
  if (!experts_apart_) return {r};
  return prog_->grad_buckets.at(static_cast<std::size_t>(bucket)).experts ? clip(experts_, r) : subtract(r, experts_);
}

std::vector<Range> StageLayout::counted() const {
  if (split_) return owned_ranges();
  if (!experts_apart_) return {own_shard()};
  std::vector<Range> out = subtract(own_shard(), experts_);
  const int64_t slice = program::shard_elems(elems_, edp_);
  for (const Range& r : clip(experts_, {edp_index_ * slice, (edp_index_ + 1) * slice})) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  return out;
}

void StageLayout::check_against(const program::Program& prog) const {
  for (int64_t c = 0; c < chunk_count(); ++c) {
    const int64_t want = prog.chunk(stage_, c).params;
    if (want != chunk(c).size()) {
      throw ExecutorError(where(stage_) + "chunk " + std::to_string(c) + " holds " + std::to_string(want) +
                          " parameters in the Program but " + std::to_string(chunk(c).size()) +
                          " in the model layout of units [" + std::to_string(chunk(c).begin()) + ", " +
                          std::to_string(chunk(c).end()) + ")");
    }
  }
  for (std::size_t b = 0; b < prog.grad_buckets.size(); ++b) {
    if (prog.grad_buckets[b].stage != stage_) continue;
    const int64_t got = total(grad_bucket_parts(static_cast<int32_t>(b)));
    if (got != prog.grad_buckets[b].elems) {
      throw ExecutorError(where(stage_) + "gradient bucket " + std::to_string(b) + " has " +
                          std::to_string(prog.grad_buckets[b].elems) + " elements in the Program, " +
                          std::to_string(got) + " in the layout");
    }
  }
  int64_t pieces = 0, expert_pieces = 0;
  for (std::size_t b = 0; b < prog.param_buckets.size(); ++b) {
    const program::Bucket& bucket = prog.param_buckets[b];
    if (bucket.stage != stage_) continue;
    if (bucket.chunk < 0) {
      (split_ && bucket.experts ? expert_pieces : pieces) += bucket.elems;
      continue;
    }
    const Range r = param_bucket(static_cast<int32_t>(b));
    const int64_t kept = total(clip(persistent_, r));
    if (r.size() - kept != bucket.elems || kept != bucket.persistent_elems) {
      throw ExecutorError(where(stage_) + "parameter bucket " + std::to_string(b) + " gathers " +
                          std::to_string(bucket.elems) + " and keeps " + std::to_string(bucket.persistent_elems) +
                          " elements in the Program, but the layout has " + std::to_string(r.size() - kept) +
                          " partitioned and " + std::to_string(kept) + " persistent");
    }
  }
  for (std::size_t b = 0; b < prog.grad_buckets.size(); ++b) {
    const program::Bucket& bucket = prog.grad_buckets[b];
    if (bucket.stage != stage_ || !qgz(static_cast<int32_t>(b))) continue;
    const QgzSplit& split = qgz_[b];
    int64_t elems = 0, groups = 0;
    for (const QgzMatrix& m : split.matrices) elems += m.range().size(), groups += m.groups();
    if (static_cast<int64_t>(split.matrices.size()) != bucket.qgz_matrices || elems != bucket.qgz_elems ||
        groups != bucket.qgz_groups || static_cast<int64_t>(split.fallbacks.size()) != bucket.qgz_fallbacks) {
      throw ExecutorError(where(stage_) + "gradient bucket " + std::to_string(b) + " all-to-alls " +
                          std::to_string(bucket.qgz_matrices) + " matrices of " + std::to_string(bucket.qgz_elems) +
                          " elements in " + std::to_string(bucket.qgz_groups) + " groups and reduce-scatters " +
                          std::to_string(bucket.qgz_fallbacks) + " tensors in the Program, the layout " +
                          std::to_string(split.matrices.size()) + ", " + std::to_string(elems) + ", " +
                          std::to_string(groups) + " and " + std::to_string(split.fallbacks.size()));
    }
  }
  if (split_ && pieces + expert_pieces != 0) {
    const int64_t ne = total(experts_);
    if (pieces != elems_ - ne || expert_pieces != ne) {
      throw ExecutorError(where(stage_) + "the Program's all-gather buckets cover " + std::to_string(pieces) + " of the stage's " +
                          std::to_string(elems_ - ne) + " dense parameters and " + std::to_string(expert_pieces) + " of its " +
                          std::to_string(ne) + " routed experts'");
    }
  } else if (pieces != 0 && pieces != elems_) {
    throw ExecutorError(where(stage_) + "the Program's all-gather buckets cover " + std::to_string(pieces) +
                        " of the stage's " + std::to_string(elems_) + " parameters");
  }
}

int64_t StageLayout::chunk_of_unit(int64_t unit) const {
  for (int64_t c = 0; c < chunk_count(); ++c) {
    if (chunk(c).holds(unit)) return c;
  }
  throw ExecutorError(where(stage_) + "unit " + std::to_string(unit) + " is in none of the stage's chunks");
}

Range StageLayout::units(int64_t c, int64_t unit_begin, int64_t unit_end) const {
  const ParamLayout& l = chunk(c);
  if (unit_begin >= unit_end || !l.holds(unit_begin) || !l.holds(unit_end - 1)) {
    throw ExecutorError(where(stage_) + "units [" + std::to_string(unit_begin) + ", " + std::to_string(unit_end) +
                        ") are not all in chunk " + std::to_string(c));
  }
  const int64_t off = chunk_offset(c);
  return {off + l.unit_range(unit_begin).begin, off + l.unit_range(unit_end - 1).end};
}

Range StageLayout::tensor(int64_t c, const std::string& name) const {
  const Range r = chunk(c).find(name).range();
  return {chunk_offset(c) + r.begin, chunk_offset(c) + r.end};
}

Range StageLayout::grad_bucket(int32_t bucket) const {
  const program::Bucket& b = prog_->grad_buckets.at(static_cast<std::size_t>(bucket));
  if (b.stage != stage_) throw ExecutorError(where(stage_) + "gradient bucket " + std::to_string(bucket) + " is another stage's");
  return units(b.chunk, b.unit_begin, b.unit_end);
}

Range StageLayout::param_bucket(int32_t bucket) const {
  const program::Bucket& b = prog_->param_buckets.at(static_cast<std::size_t>(bucket));
  if (b.stage != stage_) throw ExecutorError(where(stage_) + "parameter bucket " + std::to_string(bucket) + " is another stage's");
  if (b.chunk < 0) return allgather_pieces_[static_cast<std::size_t>(bucket)];
  return units(b.chunk, b.unit_begin, b.unit_end);
}

Range StageLayout::tied_table(int32_t unit) const {
  const int64_t c = chunk_of_unit(unit);
  if (unit != 0 && !chunk(c).head_has_wte_copy()) {
    throw ExecutorError(where(stage_) + "unit " + std::to_string(unit) + " holds no copy of the tied embedding table");
  }
  return tensor(c, "embedding.wte");
}

std::vector<int64_t> StageLayout::shard_counts(Range r) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < partition_; ++i) out.push_back(intersect(r, shard(i)).size());
  return out;
}

int64_t StageLayout::persistent_index(int64_t pos) const {
  auto it = std::upper_bound(persistent_.begin(), persistent_.end(), pos,
                             [](int64_t p, const Range& r) { return p < r.begin; });
  if (it == persistent_.begin() || pos >= std::prev(it)->end) {
    throw ExecutorError(where(stage_) + "position " + std::to_string(pos) + " is not persistent");
  }
  const std::size_t k = static_cast<std::size_t>(std::prev(it) - persistent_.begin());
  return persistent_prefix_[k] + (pos - persistent_[k].begin);
}

}  // namespace stagecraft::executor
