#include "sim/network/max_min.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

namespace stagecraft::sim {

namespace {

constexpr double kSaturatedFraction = 1e-9;  // λ_l ≤ λ·(1 + this) saturates with λ
constexpr double kCapTolerance = 1e-12;      // B_f ≤ λ·(1 + this) counts as reached

}  // namespace

void MaxMinSolver::validate(const MaxMinProblem& p, std::size_t rate_count) const {
  const std::size_t links = p.capacity_Bps.size();
  if (p.path_offsets.empty()) throw std::invalid_argument("MaxMinSolver: path_offsets needs flows + 1 entries, got 0");
  const std::size_t flows = p.path_offsets.size() - 1;
  if (rate_count != flows) {
    throw std::invalid_argument("MaxMinSolver: " + std::to_string(flows) + " flows but " + std::to_string(rate_count) +
                                " rate slots");
  }
  if (!p.rate_cap_Bps.empty() && p.rate_cap_Bps.size() != flows) {
    throw std::invalid_argument("MaxMinSolver: " + std::to_string(flows) + " flows but " +
                                std::to_string(p.rate_cap_Bps.size()) + " rate caps");
  }
  if (p.path_offsets.front() != 0 || static_cast<std::size_t>(p.path_offsets.back()) != p.path_links.size()) {
    throw std::invalid_argument("MaxMinSolver: path_offsets must run from 0 to path_links.size() (" +
                                std::to_string(p.path_links.size()) + ")");
  }
  for (std::size_t f = 0; f < flows; ++f) {
    if (p.path_offsets[f + 1] < p.path_offsets[f]) {
      throw std::invalid_argument("MaxMinSolver: path_offsets decrease at flow " + std::to_string(f));
    }
    if (!p.rate_cap_Bps.empty() && !(p.rate_cap_Bps[f] > 0)) {
      throw std::invalid_argument("MaxMinSolver: flow " + std::to_string(f) + " has rate cap " +
                                  std::to_string(p.rate_cap_Bps[f]) + " B/s; expected > 0");
    }
  }
  for (LinkId l : p.path_links) {
    if (l < 0 || static_cast<std::size_t>(l) >= links) {
      throw std::invalid_argument("MaxMinSolver: link id " + std::to_string(l) + " outside [0, " +
                                  std::to_string(links) + ")");
    }
    if (!(p.capacity_Bps[static_cast<std::size_t>(l)] > 0)) {
      throw std::invalid_argument("MaxMinSolver: link " + std::to_string(l) + " has capacity " +
                                  std::to_string(p.capacity_Bps[static_cast<std::size_t>(l)]) + " B/s; expected > 0");
    }
  }
}

// ---- Indexed min-heap of links by (λ_l, l): each link with unfrozen flows is in it once. ----
// Entries carry their key, so sifting reads the heap array only.

bool MaxMinSolver::heap_less(const HeapEntry& a, const HeapEntry& b) {
  return a.level < b.level || (a.level == b.level && a.link < b.link);
}

void MaxMinSolver::heap_place(std::size_t slot, HeapEntry entry) {
  heap_[slot] = entry;
  heap_slot_[static_cast<std::size_t>(entry.link)] = static_cast<int32_t>(slot);
}

void MaxMinSolver::heap_sift_down(std::size_t slot) {
  const HeapEntry e = heap_[slot];
  for (;;) {
    std::size_t child = 2 * slot + 1;
    if (child >= heap_.size()) break;
    if (child + 1 < heap_.size() && heap_less(heap_[child + 1], heap_[child])) ++child;
    if (!heap_less(heap_[child], e)) break;
    heap_place(slot, heap_[child]);
    slot = child;
  }
  heap_place(slot, e);
}

// Restores the heap after the entry at `slot` changed its key either way.
void MaxMinSolver::heap_sift(std::size_t slot) {
  const HeapEntry e = heap_[slot];
  if (slot == 0 || !heap_less(e, heap_[(slot - 1) / 2])) {
    heap_sift_down(slot);
    return;
  }
  while (slot > 0 && heap_less(e, heap_[(slot - 1) / 2])) {
    heap_place(slot, heap_[(slot - 1) / 2]);
    slot = (slot - 1) / 2;
  }
  heap_place(slot, e);
}

void MaxMinSolver::heap_remove(LinkId link) {
  const int32_t slot = heap_slot_[static_cast<std::size_t>(link)];
  if (slot < 0) return;
  heap_slot_[static_cast<std::size_t>(link)] = -1;
  const HeapEntry last = heap_.back();
  heap_.pop_back();
  if (last.link == link) return;
  heap_place(static_cast<std::size_t>(slot), last);
  heap_sift(static_cast<std::size_t>(slot));
}

// λ_l = (C_l − frozen_l) / n_l, never below the current level (rounding could put it a hair under).
void MaxMinSolver::update_link(const MaxMinProblem& p, LinkId link, double level) {
  const auto li = static_cast<std::size_t>(link);
  if (unfrozen_on_link_[li] == 0) {
    heap_remove(link);
    return;
  }
  const double lambda = (p.capacity_Bps[li] - frozen_Bps_[li]) / static_cast<double>(unfrozen_on_link_[li]);
  const HeapEntry e{std::max(lambda, level), link};
  if (heap_slot_[li] < 0) {
    heap_.push_back(e);
    heap_slot_[li] = static_cast<int32_t>(heap_.size() - 1);
  }
  heap_[static_cast<std::size_t>(heap_slot_[li])] = e;
  heap_sift(static_cast<std::size_t>(heap_slot_[li]));
}

// Initial state: n_l, the link -> flows transpose, λ_l = C_l / n_l in the heap, the capped flows
// sorted by cap, and the flows with empty paths settled at their cap.
void MaxMinSolver::prepare(const MaxMinProblem& p, std::span<double> rate_Bps) {
  const std::size_t links = p.capacity_Bps.size();
  const std::size_t flows = p.path_offsets.size() - 1;
  unfrozen_on_link_.assign(links, 0);
  for (LinkId l : p.path_links) ++unfrozen_on_link_[static_cast<std::size_t>(l)];
  frozen_Bps_.assign(links, 0.0);

  link_flow_offsets_.assign(links + 1, 0);
  for (std::size_t l = 0; l < links; ++l) link_flow_offsets_[l + 1] = link_flow_offsets_[l] + unfrozen_on_link_[l];
  link_flows_.resize(p.path_links.size());
  fill_cursor_.assign(link_flow_offsets_.begin(), link_flow_offsets_.end() - 1);
  for (std::size_t f = 0; f < flows; ++f) {
    for (int32_t i = p.path_offsets[f]; i < p.path_offsets[f + 1]; ++i) {
      const auto slot = fill_cursor_[static_cast<std::size_t>(p.path_links[static_cast<std::size_t>(i)])]++;
      link_flows_[static_cast<std::size_t>(slot)] = static_cast<int32_t>(f);
    }
  }
  heap_.clear();
  heap_slot_.assign(links, -1);
  touched_.assign(links, 0);
  touched_links_.clear();
  for (std::size_t l = 0; l < links; ++l) {  // λ_l = C_l / n_l, then heapify bottom-up in O(L)
    if (unfrozen_on_link_[l] == 0) continue;
    heap_slot_[l] = static_cast<int32_t>(heap_.size());
    heap_.push_back({p.capacity_Bps[l] / static_cast<double>(unfrozen_on_link_[l]), static_cast<LinkId>(l)});
  }
  for (std::size_t slot = heap_.size() / 2; slot-- > 0;) heap_sift_down(slot);

  frozen_.assign(flows, 0);
  capped_.clear();
  unfrozen_ = 0;
  for (std::size_t f = 0; f < flows; ++f) {
    const double cap = p.rate_cap_Bps.empty() ? kNoRateCap : p.rate_cap_Bps[f];
    if (p.path_offsets[f] == p.path_offsets[f + 1]) {
      rate_Bps[f] = cap;  // no link constrains it
      frozen_[f] = 1;
      continue;
    }
    ++unfrozen_;
    if (cap < kNoRateCap) capped_.push_back(static_cast<int32_t>(f));
  }
  std::sort(capped_.begin(), capped_.end(), [&](int32_t a, int32_t b) {
    const double ca = p.rate_cap_Bps[static_cast<std::size_t>(a)], cb = p.rate_cap_Bps[static_cast<std::size_t>(b)];
    return ca < cb || (ca == cb && a < b);
  });
  next_capped_ = 0;
}

// Freezes one flow; its links get their new λ_l in update_touched(), once per link per batch.
void MaxMinSolver::freeze_flow(const MaxMinProblem& p, int32_t flow, double rate, std::span<double> rate_Bps) {
  const auto fi = static_cast<std::size_t>(flow);
  frozen_[fi] = 1;
  rate_Bps[fi] = rate;
  --unfrozen_;
  for (int32_t i = p.path_offsets[fi]; i < p.path_offsets[fi + 1]; ++i) {
    const LinkId l = p.path_links[static_cast<std::size_t>(i)];
    const auto li = static_cast<std::size_t>(l);
    --unfrozen_on_link_[li];
    frozen_Bps_[li] += rate;
    if (!touched_[li]) {
      touched_[li] = 1;
      touched_links_.push_back(l);
    }
  }
}

void MaxMinSolver::freeze_link(const MaxMinProblem& p, LinkId link, double level, std::span<double> rate_Bps) {
  const auto li = static_cast<std::size_t>(link);
  for (int32_t i = link_flow_offsets_[li]; i < link_flow_offsets_[li + 1]; ++i) {
    const int32_t f = link_flows_[static_cast<std::size_t>(i)];
    if (!frozen_[static_cast<std::size_t>(f)]) freeze_flow(p, f, level, rate_Bps);
  }
}

void MaxMinSolver::update_touched(const MaxMinProblem& p, double level) {
  for (LinkId l : touched_links_) {
    touched_[static_cast<std::size_t>(l)] = 0;
    update_link(p, l, level);
  }
  touched_links_.clear();
}

void MaxMinSolver::solve(const MaxMinProblem& p, std::span<double> rate_Bps) {
  validate(p, rate_Bps.size());
  solve_prevalidated(p, rate_Bps);
}

void MaxMinSolver::solve_prevalidated(const MaxMinProblem& p, std::span<double> rate_Bps) {
  if (p.capacity_Bps.size() <= kSmallLinks && p.path_offsets.size() <= kSmallFlows + 1) {
    solve_small(p, rate_Bps);
    return;
  }
  prepare(p, rate_Bps);
  fill(p, rate_Bps);
}

// solve_heap() for a handful of links and flows: the heap becomes a linear scan for the smallest
// (λ_l, l), the transpose a scan over the flows in order. Rounds, freezing order and every
// floating-point operation are the heap version's.
void MaxMinSolver::solve_small(const MaxMinProblem& p, std::span<double> rate_Bps) {
  const std::size_t links = p.capacity_Bps.size();
  const std::size_t flows = p.path_offsets.size() - 1;
  std::array<int32_t, kSmallLinks> unfrozen_on{};
  std::array<double, kSmallLinks> frozen_sum{};
  std::array<double, kSmallLinks> key{};
  std::array<bool, kSmallLinks> in_heap{};
  std::array<bool, kSmallLinks> touched{};
  std::array<LinkId, kSmallLinks> touched_links{};
  std::size_t touched_count = 0;
  std::array<bool, kSmallFlows> frozen{};
  std::array<int32_t, kSmallFlows> capped{};
  std::size_t capped_count = 0, next_capped = 0;
  for (LinkId l : p.path_links) ++unfrozen_on[static_cast<std::size_t>(l)];
  for (std::size_t l = 0; l < links; ++l) {
    in_heap[l] = unfrozen_on[l] > 0;
    if (in_heap[l]) key[l] = p.capacity_Bps[l] / static_cast<double>(unfrozen_on[l]);
  }
  int64_t unfrozen = 0;
  for (std::size_t f = 0; f < flows; ++f) {
    const double cap = p.rate_cap_Bps.empty() ? kNoRateCap : p.rate_cap_Bps[f];
    if (p.path_offsets[f] == p.path_offsets[f + 1]) {
      rate_Bps[f] = cap;
      frozen[f] = true;
      continue;
    }
    ++unfrozen;
    if (cap < kNoRateCap) {  // insertion into (cap, flow) order
      std::size_t i = capped_count++;
      while (i > 0 && p.rate_cap_Bps[static_cast<std::size_t>(capped[i - 1])] > cap) {
        capped[i] = capped[i - 1];
        --i;
      }
      capped[i] = static_cast<int32_t>(f);
    }
  }
  auto freeze_flow = [&](std::size_t f, double rate) {
    frozen[f] = true;
    rate_Bps[f] = rate;
    --unfrozen;
    for (int32_t i = p.path_offsets[f]; i < p.path_offsets[f + 1]; ++i) {
      const auto l = static_cast<std::size_t>(p.path_links[static_cast<std::size_t>(i)]);
      --unfrozen_on[l];
      frozen_sum[l] += rate;
      if (!touched[l]) {
        touched[l] = true;
        touched_links[touched_count++] = static_cast<LinkId>(l);
      }
    }
  };
  auto update_touched = [&](double level) {
    for (std::size_t i = 0; i < touched_count; ++i) {
      const auto l = static_cast<std::size_t>(touched_links[i]);
      touched[l] = false;
      if (unfrozen_on[l] == 0) {
        in_heap[l] = false;
        continue;
      }
      key[l] = std::max((p.capacity_Bps[l] - frozen_sum[l]) / static_cast<double>(unfrozen_on[l]), level);
      in_heap[l] = true;
    }
    touched_count = 0;
  };
  auto top = [&]() {  // the smallest (λ_l, l) among links with unfrozen flows; links when none
    std::size_t best = links;
    for (std::size_t l = 0; l < links; ++l) {
      if (in_heap[l] && (best == links || key[l] < key[best])) best = l;
    }
    return best;
  };
  rounds_ = 0;
  double level = 0;
  while (unfrozen > 0) {
    ++rounds_;
    while (next_capped < capped_count && frozen[static_cast<std::size_t>(capped[next_capped])]) ++next_capped;
    const double cap_level =
        next_capped < capped_count ? p.rate_cap_Bps[static_cast<std::size_t>(capped[next_capped])] : kNoRateCap;
    std::size_t t = top();
    const double link_level = t == links ? kNoRateCap : key[t];
    if (t == links && cap_level == kNoRateCap) {
      throw std::logic_error("MaxMinSolver: unfrozen flows but no link or cap left to bound them");
    }
    level = std::max(level, std::min(link_level, cap_level));
    for (; next_capped < capped_count; ++next_capped) {
      const auto f = static_cast<std::size_t>(capped[next_capped]);
      if (frozen[f]) continue;
      const double cap = p.rate_cap_Bps[f];
      if (cap > level * (1 + kCapTolerance)) break;
      freeze_flow(f, cap);
    }
    update_touched(level);
    for (t = top(); t != links && key[t] <= level * (1 + kSaturatedFraction); t = top()) {
      for (std::size_t f = 0; f < flows; ++f) {  // the link's flows in flow order, once per crossing
        for (int32_t i = p.path_offsets[f]; i < p.path_offsets[f + 1]; ++i) {
          if (static_cast<std::size_t>(p.path_links[static_cast<std::size_t>(i)]) == t && !frozen[f]) freeze_flow(f, level);
        }
      }
      update_touched(level);
    }
  }
}

void MaxMinSolver::solve_heap(const MaxMinProblem& p, std::span<double> rate_Bps) {
  validate(p, rate_Bps.size());
  prepare(p, rate_Bps);
  fill(p, rate_Bps);
}

void MaxMinSolver::fill(const MaxMinProblem& p, std::span<double> rate_Bps) {
  rounds_ = 0;
  double level = 0;
  while (unfrozen_ > 0) {
    ++rounds_;
    while (next_capped_ < capped_.size() && frozen_[static_cast<std::size_t>(capped_[next_capped_])]) ++next_capped_;
    const double cap_level = next_capped_ < capped_.size()
                                 ? p.rate_cap_Bps[static_cast<std::size_t>(capped_[next_capped_])]
                                 : kNoRateCap;
    const double link_level = heap_.empty() ? kNoRateCap : heap_[0].level;
    if (heap_.empty() && cap_level == kNoRateCap) {
      throw std::logic_error("MaxMinSolver: unfrozen flows but no link or cap left to bound them");
    }
    level = std::max(level, std::min(link_level, cap_level));
    // Flows that reached their own bound keep exactly that bound.
    for (; next_capped_ < capped_.size(); ++next_capped_) {
      const int32_t f = capped_[next_capped_];
      if (frozen_[static_cast<std::size_t>(f)]) continue;
      const double cap = p.rate_cap_Bps[static_cast<std::size_t>(f)];
      if (cap > level * (1 + kCapTolerance)) break;
      freeze_flow(p, f, cap, rate_Bps);
    }
    update_touched(p, level);
    // Links that saturate at this level freeze their flows at it.
    while (!heap_.empty() && heap_[0].level <= level * (1 + kSaturatedFraction)) {
      freeze_link(p, heap_[0].link, level, rate_Bps);
      update_touched(p, level);  // removes the saturated link (no unfrozen flows left on it)
    }
  }
}

std::vector<double> max_min_rates(std::span<const double> capacity_Bps, const std::vector<std::vector<LinkId>>& paths,
                                  const std::vector<double>& rate_cap_Bps) {
  std::vector<int32_t> offsets{0};
  std::vector<LinkId> links;
  for (const auto& path : paths) {
    links.insert(links.end(), path.begin(), path.end());
    offsets.push_back(static_cast<int32_t>(links.size()));
  }
  std::vector<double> rates(paths.size(), 0.0);
  MaxMinSolver solver;
  solver.solve({capacity_Bps, offsets, links, rate_cap_Bps}, rates);
  return rates;
}

}  // namespace stagecraft::sim
