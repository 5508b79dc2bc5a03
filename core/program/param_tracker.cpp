#include "core/program/param_tracker.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace stagecraft::program::detail {

namespace {
constexpr std::size_t kNpos = std::numeric_limits<std::size_t>::max();
}

ParamTracker::ParamTracker(const Program& prog, const spec::FrameworkProfile& framework, std::vector<int32_t> uses,
                           std::vector<int32_t> passes, EmitFn emit)
    : prog_(prog),
      prefetch_(framework.prefetch),
      reshard_after_use_(framework.reshard_after_use),
      uses_(std::move(uses)),
      passes_(std::move(passes)),
      emit_(std::move(emit)) {
  const std::size_t n = uses_.size(), buckets = prog_.param_buckets.size();
  next_same_.assign(n, kNpos);
  std::vector<std::size_t> seen(buckets, kNpos);
  for (std::size_t i = n; i-- > 0;) {
    next_same_[i] = seen[uses_[i]];
    seen[uses_[i]] = i;
  }
  use_prefix_.assign(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) use_prefix_[i + 1] = use_prefix_[i] + elems(uses_[i]);
  gather_instr_.assign(buckets, -1);
  last_use_.assign(buckets, -1);
  used_.assign(buckets, 0);
}

std::size_t ParamTracker::next_use_of(int32_t b, std::size_t from) const {
  for (std::size_t i = from; i < uses_.size(); ++i) {
    if (uses_[i] == b) return i;
  }
  return kNpos;
}

void ParamTracker::gather(int32_t b, std::size_t use) {
  gather_instr_[b] = emit_(Op::kGatherParams, b, -1, use);
  used_[b] = 0;
  resident_.push_back(b);
  live_ += elems(b);
}

void ParamTracker::release(int32_t b) {
  emit_(Op::kReleaseParams, b, last_use_[b], kNpos);
  gather_instr_[b] = -1;
  resident_.erase(std::find(resident_.begin(), resident_.end(), b));
  live_ -= elems(b);
}

// Releases resident buckets other than `keep` (latest next use first) until `need` more elements
// fit under max_live_parameters. Returns whether they fit.
bool ParamTracker::make_room(int64_t need, int32_t keep) {
  const int64_t max_live = prog_.plan.zero.max_live_parameters;
  while (live_ + need > max_live) {
    int32_t victim = -1;
    std::size_t victim_next = 0;
    for (int32_t b : resident_) {
      // not the bucket being prepared, nor one prepared for the instruction being emitted
      const bool pending = std::find(uses_.begin() + static_cast<std::ptrdiff_t>(cursor_),
                                     uses_.begin() + static_cast<std::ptrdiff_t>(next_before_), b) !=
                           uses_.begin() + static_cast<std::ptrdiff_t>(next_before_);
      if (b == keep || pending) continue;
      const std::size_t next = next_use_of(b, next_before_);
      if (victim < 0 || next > victim_next) {
        victim = b;
        victim_next = next;
      }
    }
    if (victim < 0) return false;
    release(victim);
  }
  return true;
}

int32_t ParamTracker::before_use(int32_t bucket) {
  const std::size_t at = next_before_++;
  if (at >= uses_.size() || uses_[at] != bucket) {
    throw std::logic_error("ParamTracker: bucket use out of the precomputed order");
  }
  if (gather_instr_[bucket] < 0) {
    make_room(elems(bucket), bucket);  // a bucket larger than max_live is still gathered alone
    gather(bucket, at);
  }
  const int32_t dep = gather_instr_[bucket];
  if (at + 1 < uses_.size()) {
    const int32_t next = uses_[at + 1];
    bool prefetch = false;
    switch (prefetch_) {
      case spec::Prefetch::kLookAhead: prefetch = live_ < prog_.plan.zero.max_live_parameters; break;
      case spec::Prefetch::kNextUnit: prefetch = true; break;
      case spec::Prefetch::kNone: break;
    }
    if (gather_instr_[next] < 0 && prefetch) gather(next, at + 1);
  }
  return dep;
}

void ParamTracker::after_use(int32_t instr) {
  const std::size_t i = cursor_++;
  const int32_t b = uses_[i];
  last_use_[b] = instr;
  used_[b] = 1;
  const std::size_t next = next_same_[i];
  // the same pass goes on with it (or, resharding after use, the next use is this one's neighbour)
  if (next == i + 1 && (passes_[next] == passes_[i] || reshard_after_use_)) return;
  if (next == kNpos) {
    release(b);
    return;
  }
  const spec::ZeroConfig& z = prog_.plan.zero;
  if (z.keep_gathered_across_microbatches) return;
  const int64_t distance = use_prefix_[next] - use_prefix_[i + 1];
  if (!reshard_after_use_ && distance < z.max_reuse_distance) return;
  release(b);
}

void ParamTracker::release_all() {
  while (!resident_.empty()) release(resident_.front());
}

}  // namespace stagecraft::program::detail
