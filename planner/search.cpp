#include "planner/search.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>

#include "core/count/count.hpp"
#include "core/program/lower.hpp"
#include "core/program/partition.hpp"
#include "core/program/units.hpp"
#include "core/text/format.hpp"
#include "core/thread/allocator.hpp"
#include "planner/report.hpp"
#include "planner/pool.hpp"
#include "planner/prune.hpp"
#include "planner/store.hpp"
#include "sim/models/memory.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::planner {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Survivor {
  double lb = 0;
  int64_t mem_lb = 0;
  uint64_t ordinal = 0;
  Candidate c;
  int8_t timing_reduce_i = -1;   // Estimate::timing_reduce_i
};
static_assert(std::is_trivially_copyable_v<Survivor>);
static_assert(std::is_trivially_copyable_v<Metrics>);
static_assert(std::is_trivially_copyable_v<Candidate>);

// ---- bytes for exchanging between ranks -------------------------------------------------------

template <typename T>
void put(std::string& out, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T take(const std::string& in, std::size_t& pos) {
  T v;
  std::memcpy(&v, in.data() + pos, sizeof v);
  pos += sizeof v;
  return v;
}

// ---- per-axis statistics ----------------------------------------------------------------------

enum AxisId : int { kTp, kPp, kMicroBatch, kSchedule, kVirtual, kZero, kZeroVariant, kRecompute, kSp, kOffload, kCp, kCpComm,
                    kEp, kEtp, kMoeDispatcher, kAxisCount };
const char* kAxisNames[kAxisCount] = {"tp", "pp", "micro_batch", "schedule", "virtual_stages", "zero", "zero_variant",
                                      "recompute", "sequence_parallel", "offload", "cp", "cp_comm_type", "ep", "etp",
                                      "moe_dispatcher"};

using AxisKey = std::pair<int, int64_t>;
using AxisTable = std::map<AxisKey, AxisCell>;

std::array<int64_t, kAxisCount> axis_codes(const Candidate& c) {
  return {c.tp, c.pp, c.micro_batch, static_cast<int64_t>(c.schedule), c.virtual_stages, c.zero,
          static_cast<int64_t>(c.zero_variant), static_cast<int64_t>(c.recompute), c.sequence_parallel ? 1 : 0, c.offload ? 1 : 0,
          c.cp, static_cast<int64_t>(c.cp_comm), c.ep, c.etp, static_cast<int64_t>(c.moe_dispatcher)};
}

std::string axis_text(int axis, int64_t code) {
  switch (axis) {
    case kSchedule: return spec::to_string(static_cast<spec::Schedule>(code));
    case kRecompute: return spec::to_string(static_cast<spec::Recompute>(code));
    case kSp: return code ? "on" : "off";
    case kOffload: return code ? "cpu" : "none";
    case kZeroVariant: return to_string(static_cast<ZeroVariant>(code));
    case kCpComm: return spec::to_string(static_cast<spec::CpComm>(code));
    case kMoeDispatcher: return spec::to_string(static_cast<spec::MoeDispatcher>(code));
    default: return std::to_string(code);
  }
}

// Each axis's last cell: candidates come nested, most sharing their neighbour's value on most
// axes, and a map's cells stay put, so one comparison replaces most lookups.
struct AxisCursor {
  std::array<int64_t, kAxisCount> code{};
  std::array<AxisCell*, kAxisCount> cell{};
};

void note(AxisTable& t, AxisCursor& at, const Candidate& c, Verdict v, const Estimate& e) {
  const auto codes = axis_codes(c);
  for (int a = 0; a < kAxisCount; ++a) {
    const auto i = static_cast<std::size_t>(a);
    if (at.cell[i] == nullptr || at.code[i] != codes[i]) {
      at.cell[i] = &t[{a, codes[i]}];
      at.code[i] = codes[i];
    }
    AxisCell& cell = *at.cell[i];
    ++cell.candidates;
    if (v == Verdict::kDominated) continue;
    cell.min_memory_lb = std::min(cell.min_memory_lb, e.memory_lb_bytes);
    if (v == Verdict::kMemory) {
      ++cell.pruned_memory;
    } else if (!cell.has_survivor || e.step_time_lb_s < cell.min_step_lb) {
      cell.has_survivor = true;
      cell.min_step_lb = e.step_time_lb_s;
    }
  }
}

void merge(AxisTable& into, const AxisTable& from) {
  for (const auto& [k, c] : from) {
    AxisCell& d = into[k];
    d.candidates += c.candidates;
    d.pruned_memory += c.pruned_memory;
    d.min_memory_lb = std::min(d.min_memory_lb, c.min_memory_lb);
    if (c.has_survivor && (!d.has_survivor || c.min_step_lb < d.min_step_lb)) {
      d.has_survivor = true;
      d.min_step_lb = c.min_step_lb;
    }
  }
}

AxisStats named(const AxisTable& t) {
  AxisStats out;
  for (const auto& [k, c] : t) out[kAxisNames[k.first]][axis_text(k.first, k.second)] = c;
  return out;
}

// ---- enumeration ------------------------------------------------------------------------------

struct Enumerated {
  std::vector<Survivor> survivors;
  Counts counts;
  AxisTable axes;
  int64_t min_mem = std::numeric_limits<int64_t>::max();
  Candidate min_candidate;
};

void enumerate_group(Pruner& pruner, const Group& g, uint64_t group_index, Enumerated& out) {
  uint64_t local = 0;
  AxisCursor at;
  pruner.enumerate(g, [&](const Candidate& c, Verdict v, const Estimate& e) {
    ++out.counts.candidates;
    note(out.axes, at, c, v, e);
    if (v != Verdict::kDominated && e.memory_lb_bytes < out.min_mem) {
      out.min_mem = e.memory_lb_bytes;
      out.min_candidate = c;
    }
    switch (v) {
      case Verdict::kDominated: ++out.counts.dominated; break;
      case Verdict::kMemory: ++out.counts.pruned_memory; break;
      case Verdict::kKeep:
        out.survivors.push_back({e.step_time_lb_s, e.memory_lb_bytes, (group_index << 32) | local, c, e.timing_reduce_i});
        break;
    }
    ++local;
  });
}

std::string serialize(const Enumerated& e) {
  std::string out;
  put(out, e.counts);
  put(out, e.min_mem);
  put(out, e.min_candidate);
  put(out, static_cast<uint64_t>(e.axes.size()));
  for (const auto& [k, c] : e.axes) {
    put(out, k.first);
    put(out, k.second);
    put(out, c);
  }
  put(out, static_cast<uint64_t>(e.survivors.size()));
  out.append(reinterpret_cast<const char*>(e.survivors.data()), e.survivors.size() * sizeof(Survivor));
  return out;
}

void absorb(const std::string& in, Enumerated& all) {
  std::size_t pos = 0;
  const Counts counts = take<Counts>(in, pos);
  all.counts.candidates += counts.candidates;
  all.counts.dominated += counts.dominated;
  all.counts.pruned_memory += counts.pruned_memory;
  const int64_t min_mem = take<int64_t>(in, pos);
  const Candidate min_c = take<Candidate>(in, pos);
  if (min_mem < all.min_mem) {
    all.min_mem = min_mem;
    all.min_candidate = min_c;
  }
  AxisTable axes;
  const uint64_t n_axes = take<uint64_t>(in, pos);
  for (uint64_t i = 0; i < n_axes; ++i) {
    const int a = take<int>(in, pos);
    const int64_t code = take<int64_t>(in, pos);
    axes[{a, code}] = take<AxisCell>(in, pos);
  }
  merge(all.axes, axes);
  const uint64_t n = take<uint64_t>(in, pos);
  const std::size_t first = all.survivors.size();
  all.survivors.resize(first + n);
  if (n > 0) std::memcpy(all.survivors.data() + first, in.data() + pos, n * sizeof(Survivor));  // data() may be null when empty
}

// Enumerates this rank's share of the groups on the pool, then gathers every rank's survivors.
Enumerated enumerate_all(const Space& space, ThreadPool& pool, Shard& shard) {
  const std::vector<Group> gs = groups(space);
  std::vector<std::size_t> mine;
  for (std::size_t g = 0; g < gs.size(); ++g) {
    if (static_cast<int>(g % static_cast<std::size_t>(shard.size())) == shard.rank()) mine.push_back(g);
  }
  std::vector<Enumerated> parts(mine.size());
  std::vector<std::unique_ptr<Pruner>> pruners(static_cast<std::size_t>(pool.size()));
  pool.parallel_for(mine.size(), [&](std::size_t i, int w) {
    auto& pruner = pruners[static_cast<std::size_t>(w)];
    if (!pruner) pruner = std::make_unique<Pruner>(space);
    enumerate_group(*pruner, gs[mine[i]], mine[i], parts[i]);
  });
  Enumerated local;
  for (const Enumerated& p : parts) absorb(serialize(p), local);
  Enumerated all;
  for (const std::string& bytes : shard.allgather(serialize(local))) absorb(bytes, all);
  std::sort(all.survivors.begin(), all.survivors.end(), [](const Survivor& a, const Survivor& b) {
    return a.lb != b.lb ? a.lb < b.lb : a.ordinal < b.ordinal;
  });
  return all;
}

// ---- results so far ---------------------------------------------------------------------------

}  // namespace

// A plan joins the front unless a front plan is no slower and no larger (and strictly better in
// one, or ties and ranks better); it removes the front plans it is no worse than in both.
void add_to_front(std::vector<Evaluated>& front, const Evaluated& e) {
  const double t = e.metrics.step_time_s;
  const int64_t m = e.metrics.peak_memory_bytes;
  for (const Evaluated& f : front) {
    const bool no_worse = f.metrics.step_time_s <= t && f.metrics.peak_memory_bytes <= m;
    if (no_worse && (f.metrics.step_time_s < t || f.metrics.peak_memory_bytes < m || better(f, e))) return;
  }
  std::erase_if(front, [&](const Evaluated& f) { return t <= f.metrics.step_time_s && m <= f.metrics.peak_memory_bytes; });
  front.insert(std::upper_bound(front.begin(), front.end(), e,
                                [](const Evaluated& a, const Evaluated& b) {
                                  return a.metrics.step_time_s != b.metrics.step_time_s ? a.metrics.step_time_s < b.metrics.step_time_s
                                                                                        : a.key < b.key;
                                }),
               e);
}

std::vector<Evaluated> pareto_front(const std::vector<Evaluated>& plans) {
  std::vector<Evaluated> front;
  for (const Evaluated& e : plans) {
    if (e.metrics.fits && !e.metrics.failed) add_to_front(front, e);
  }
  return front;
}

namespace {

class Leaders {
 public:
  explicit Leaders(std::size_t k) : k_(k) {}

  void add(const Evaluated& e) {
    if (!e.metrics.fits || e.metrics.failed) return;
    top_.insert(std::upper_bound(top_.begin(), top_.end(), e, better), e);
    if (top_.size() > k_) top_.pop_back();
    front_add(e);
  }
  // The K-th best step time (infinite until K plans fit), and the best.
  double kth() const { return top_.size() < k_ ? INFINITY : top_.back().metrics.step_time_s; }
  double best() const { return top_.empty() ? INFINITY : top_.front().metrics.step_time_s; }
  // A front plan at least as fast as `time` and at least as small as `memory`.
  bool dominates(double time, int64_t memory) const {
    for (const Evaluated& f : front_) {
      if (f.metrics.step_time_s <= time && f.metrics.peak_memory_bytes <= memory) return true;
    }
    return false;
  }
  // The least time from which dominates(time, memory) holds (infinity: none).
  double dominated_from(int64_t memory) const {
    double least = INFINITY;
    for (const Evaluated& f : front_) {
      if (f.metrics.peak_memory_bytes <= memory) least = std::min(least, f.metrics.step_time_s);
    }
    return least;
  }
  const std::vector<Evaluated>& top() const { return top_; }
  const std::vector<Evaluated>& front() const { return front_; }

 private:
  void front_add(const Evaluated& e) { add_to_front(front_, e); }

  std::size_t k_;
  std::vector<Evaluated> top_;
  std::vector<Evaluated> front_;
};

// Blocks per stage as lowering chooses them, memoised per (tp, pp, v, split).
class StageLayers {
 public:
  explicit StageLayers(const spec::Model& m) : model_(m) {}
  std::vector<int64_t> of(const spec::Plan& p, Split split) {
    if (!p.stage_layers.empty()) return p.stage_layers;
    const auto key = std::make_tuple(p.tp, p.pp, p.virtual_stages, static_cast<int>(split), p.ep, p.etp);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    const auto units = program::shared_model_units(model_, p.tp, p.ep, p.etp);
    const std::vector<int64_t> chunks = program::chunk_layers(model_, p, *units);
    return memo_.emplace(key, program::stage_layers_of(chunks, p.pp)).first->second;
  }

 private:
  const spec::Model& model_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int64_t, int64_t>, std::vector<int64_t>> memo_;
};

// A survivor whose analytic bound is this far below the cut is likely to survive; while most such
// plans have, it is simulated before its contention-free time is computed (lower_and_simulate:
// a matter of speed only). A simulation costs about three contention-free runs (GPT-3 175B on
// 1024 GPUs: 5.8 ms against 1.8 ms a plan), so simulating first pays where more than 3 in 4
// survive: on Llama 3.1 405B over 16,384 GPUs all 67 do, on GPT-3 175B over 1024 GPUs 61 of 439
// (its ZeRO-1/2 bounds sit 7-20% under the simulated times).
constexpr double kLikelyMargin = 0.03;
// Likewise where the last stage's bound (sim::contention_free_stage_s) sits 5% or more under the
// cut, for any ZeRO stage: on the 175B space 542 of 542 such ZeRO-3 plans survived, 87% of those
// 4-5% under it.
constexpr double kStageLikelyMargin = 0.05;

// What became of one survivor in a batch.
struct Outcome {
  Metrics metrics;
  double critical_path_s = 0;   // the contention-free step time (0: not computed; ruled out: a bound past the cut)
  int32_t pruned = 0;           // 1: that bound ruled it out, it was not simulated
  int32_t stage_likely = 0;     // 1: the last stage's bound sat kStageLikelyMargin under the cut
};
static_assert(std::is_trivially_copyable_v<Outcome>);

// Timing twins: survivors that differ only in a reduce bucket that cuts the same gradient
// buckets (Estimate::timing_reduce_i) lower to the same instructions, so they share their
// contention-free times and their simulation, whose metrics differ only in the gradient bucket
// buffer's memory (sim::with_reduce_bucket). On GPT-3 175B over 1024 GPUs, 1,812 of the 7,852
// plans evaluated are such a twin of one evaluated before. What a class has computed, for
// its next member: each bound with the `above` it ran under (a run stopped past `above` gives a
// time past it, not the bound itself), and the simulation.
struct TwinMemo {
  double stage_s = NAN, stage_above = 0;
  double path_s = NAN, path_above = 0;
  std::optional<sim::ReduceBucketBase> simulated;
};

// A bound computed under `used` serves a plan cut past `above` where it is exact (at most `used`:
// the run did not stop early) or already past `above` (the plan is cut either way).
bool serves(double bound, double used, double above) { return !std::isnan(bound) && (bound <= used || bound > above); }

// Lowers the plan; simulates it unless its contention-free step time already rules it out
// (`cut(bound)`, monotone in the bound, true for every bound past `above`: the contention-free
// simulation stops once it passes `above`). A plan that cannot be lowered or simulated is marked
// failed and `warning` says why. With `simulate_first` (where the analytic bound says the plan
// very likely survives) the simulation runs first and the contention-free time only if the
// simulated one is cut: the contention-free time is no more than it, so the outcome is the same,
// one simulation sooner; with `stage_first`, likewise where the last stage's bound says so.
// `memo` holds what the plan's timing twins computed before it, and receives what this one
// computes; `held` the class's Program once lowered (a twin's serves: the same instructions).
template <typename Cut>
Outcome lower_and_simulate(const Space& space, const spec::Plan& plan, const std::string& key, const Cut& cut, double above,
                           bool simulate_first, bool stage_first, std::string& warning, TwinMemo& memo,
                           std::optional<program::Program>& held) {
  Outcome o;
  try {
    // First the last stage's list alone (a fraction of the lowering where pp > 1): its
    // contention-free time without waiting for peers bounds the whole Program's from below
    // (sim::contention_free_stage_s, the pipeline's fill and drain included), and rules out most
    // of the plans the whole Program would (GPT-3 175B on 1024 GPUs: 5,328 of 6,254).
    if (!simulate_first && plan.pp > 1 && !space.cluster().straggler && std::isfinite(above)) {
      if (!serves(memo.stage_s, memo.stage_above, above)) {
        program::LowerOptions one_stage;
        one_stage.only_stage = static_cast<int32_t>(plan.pp - 1);
        memo.stage_s =
            sim::contention_free_stage_s(program::lower(space.model(), space.training(), plan, one_stage), space.cluster(), above);
        memo.stage_above = above;
      }
      if (cut(memo.stage_s)) {
        o.critical_path_s = memo.stage_s;
        o.pruned = 1;
        return o;
      }
      o.stage_likely = memo.stage_s * (1 + kStageLikelyMargin) <= above;
      simulate_first = stage_first && o.stage_likely;
    }
    const auto program = [&]() -> const program::Program& {
      if (!held) held.emplace(program::lower(space.model(), space.training(), plan));
      return *held;
    };
    const auto simulated = [&] {
      if (!memo.simulated) memo.simulated = sim::reduce_bucket_base(sim::simulate(program(), space.cluster()), program());
      return sim::with_reduce_bucket(*memo.simulated, plan.zero.reduce_bucket);
    };
    if (simulate_first) {
      o.metrics = simulated();
      if (!cut(o.metrics.step_time_s)) return o;
    }
    if (!serves(memo.path_s, memo.path_above, above)) {
      memo.path_s = sim::contention_free_step_s(program(), space.cluster(), above);
      memo.path_above = above;
    }
    o.critical_path_s = memo.path_s;
    if (cut(o.critical_path_s)) {
      o.metrics = Metrics{};
      o.pruned = 1;
      return o;
    }
    if (!simulate_first) o.metrics = simulated();
  } catch (const std::exception& e) {
    warning = "plan \"" + key + "\" could not be simulated: " + e.what();
    o.metrics = Metrics{};
    o.metrics.failed = true;
    o.metrics.capacity_bytes = space.cluster().gpu.memory_bytes;
  }
  return o;
}

// ---- the branch-and-bound loop ----------------------------------------------------------------

class Driver {
 public:
  Driver(const Space& space, const SearchOptions& o, ThreadPool& pool, Shard& shard)
      : space_(space), o_(o), pool_(pool), shard_(shard), leaders_(static_cast<std::size_t>(std::max<int64_t>(1, o.top_k))),
        layers_(space.model()) {}

  void open_store(SearchResult& r);
  void run(const std::vector<Survivor>& survivors, Counts& counts, Clock::time_point t0);
  std::vector<Evaluated>& evaluated() { return evaluated_; }
  std::vector<std::string>& warnings() { return warnings_; }
  const Leaders& leaders() const { return leaders_; }
  bool interrupted() const { return interrupted_; }
  void close_store(const Counts& counts, double seconds);

 private:
  bool prune(const Survivor& s, double kth, double window) const {
    return s.lb > kth && (s.lb > window || leaders_.dominates(s.lb, s.mem_lb));
  }
  std::vector<Outcome> evaluate(const std::vector<const Survivor*>& to_simulate, const std::vector<std::string>& keys,
                                std::vector<char>& reused, double kth, double window);
  Evaluated make(const Survivor& s, std::string key, const Outcome& o, bool reused);
  void report(const std::vector<Survivor>& survivors, std::size_t pos, double kth, double window, Clock::time_point t0,
              std::size_t first, const Counts& counts);

  const Space& space_;
  const SearchOptions& o_;
  ThreadPool& pool_;
  Shard& shard_;
  Leaders leaders_;
  StageLayers layers_;
  std::vector<Evaluated> evaluated_;
  std::vector<std::string> warnings_;
  std::unique_ptr<Store> store_;
  int64_t search_id_ = -1;
  std::unordered_map<std::string, Metrics> cache_;
  std::unordered_map<std::string, TwinMemo> twins_;   // by the class's first plan's key
  bool interrupted_ = false;
  int64_t simulated_ = 0;
  int64_t likely_tried_ = 0, likely_kept_ = 0;   // plans whose bound said likely, and those that survived
  int64_t stage_tried_ = 0, stage_kept_ = 0;     // the same by the last stage's bound
  double simulate_s_ = 0;
};

void Driver::open_store(SearchResult& r) {
  std::string cache_bytes;
  if (!o_.db.empty() && shard_.rank() == 0) {
    store_ = std::make_unique<Store>(o_.db, false);
    search_id_ = store_->start_search(space_.to_json(), o_.version, o_.top_k, o_.resume, &r.resumed);
    r.search_id = search_id_;
    if (r.resumed) {
      for (const auto& [key, m] : store_->load_metrics(search_id_)) {
        put(cache_bytes, static_cast<uint64_t>(key.size()));
        cache_bytes += key;
        put(cache_bytes, m);
      }
    }
  }
  if (o_.db.empty() || !o_.resume) return;
  const std::string all = shard_.broadcast(cache_bytes);
  for (std::size_t pos = 0; pos < all.size();) {
    const uint64_t n = take<uint64_t>(all, pos);
    std::string key = all.substr(pos, n);
    pos += n;
    cache_.emplace(std::move(key), take<Metrics>(all, pos));
  }
}

void Driver::close_store(const Counts& counts, double seconds) {
  if (store_) store_->finish(search_id_, interrupted_ ? "interrupted" : "complete", counts, seconds);
}

// Simulates this rank's share of `to_simulate` (index ≡ rank mod size) and gathers every rank's results.
std::vector<Outcome> Driver::evaluate(const std::vector<const Survivor*>& to_simulate, const std::vector<std::string>& keys,
                                      std::vector<char>& reused, double kth, double window) {
  const auto size = static_cast<std::size_t>(shard_.size()), rank = static_cast<std::size_t>(shard_.rank());
  reused.assign(to_simulate.size(), 0);
  // the batch's timing-twin classes (TwinMemo), in order of first member; this rank's share of them
  std::vector<std::vector<std::size_t>> classes;
  std::vector<TwinMemo*> memos;
  {
    std::unordered_map<std::string, std::size_t> class_of;
    for (std::size_t i = 0; i < to_simulate.size(); ++i) {
      if (cache_.count(keys[i])) {
        reused[i] = 1;
        continue;
      }
      Candidate rep = to_simulate[i]->c;
      rep.reduce_i = to_simulate[i]->timing_reduce_i;
      std::string twin_key = rep.reduce_i == to_simulate[i]->c.reduce_i ? keys[i] : plan_key(space_.plan(rep));
      const auto [it, fresh] = class_of.try_emplace(twin_key, classes.size());
      if (fresh) {
        classes.emplace_back();
        memos.push_back(&twins_[std::move(twin_key)]);
      }
      classes[it->second].push_back(i);
    }
  }
  std::vector<std::size_t> mine_classes;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    if (c % size == rank) mine_classes.push_back(c);
  }
  // ZeRO-3's analytic bounds run well below the contention-free time (its gathers' interplay
  // with compute is the lowering's); the others' within a few percent of it
  std::vector<char> likely(to_simulate.size(), 0);
  for (std::size_t i = 0; i < to_simulate.size(); ++i) {
    likely[i] = to_simulate[i]->c.zero < 3 && to_simulate[i]->lb * (1 + kLikelyMargin) <= std::max(kth, window);
  }
  // the share of such plans that survived so far, at least 3 in 4, counting 3 in 4 before any
  // (the same on every rank)
  const bool simulate_first = 4 * (likely_kept_ + 3) >= 3 * (likely_tried_ + 4);
  const bool stage_first = 4 * (stage_kept_ + 3) >= 3 * (stage_tried_ + 4);
  std::vector<Outcome> local(to_simulate.size());   // by batch index: this rank's classes' plans
  std::vector<std::string> warnings(to_simulate.size());
  const auto t0 = Clock::now();
  pool_.parallel_for(mine_classes.size(), [&](std::size_t m, int) {
    const std::size_t c = mine_classes[m];
    std::optional<program::Program> held;   // the class's Program, once one member needs it
    for (std::size_t i : classes[c]) {
      const Survivor& s = *to_simulate[i];
      // prune() cuts a bound b once b > kth and (b > window or a front plan no larger than the plan
      // is no slower than b): every b past this
      const double above = std::max(kth, std::min(window, leaders_.dominated_from(s.mem_lb)));
      local[i] = lower_and_simulate(space_, space_.plan(s.c), keys[i], [&](double bound) {
        return prune(Survivor{bound, s.mem_lb, s.ordinal, s.c, s.timing_reduce_i}, kth, window);
      }, above, simulate_first && likely[i], stage_first, warnings[i], *memos[c], held);
    }
  });
  simulate_s_ += since(t0);
  // per plan: its index, its outcome, its warning (length, then text)
  std::string bytes;
  for (std::size_t c : mine_classes) {
    for (std::size_t i : classes[c]) {
      put(bytes, static_cast<uint64_t>(i));
      put(bytes, local[i]);
      put(bytes, static_cast<uint64_t>(warnings[i].size()));
      bytes += warnings[i];
    }
  }
  std::vector<Outcome> out(to_simulate.size());
  for (std::size_t i = 0; i < to_simulate.size(); ++i) {
    if (reused[i]) out[i].metrics = cache_.at(keys[i]);
  }
  std::vector<std::string> said(to_simulate.size());
  for (const std::string& part : shard_.allgather(bytes)) {
    for (std::size_t pos = 0; pos < part.size();) {
      const uint64_t i = take<uint64_t>(part, pos);
      out[i] = take<Outcome>(part, pos);
      const uint64_t n = take<uint64_t>(part, pos);
      said[i] = part.substr(pos, n);
      pos += n;
      ++simulated_;
    }
  }
  for (std::string& w : said) {  // in batch order, whatever rank simulated the plan
    if (!w.empty()) warnings_.push_back(std::move(w));
  }
  for (std::size_t i = 0; i < to_simulate.size(); ++i) {
    if (!likely[i] || reused[i]) continue;
    ++likely_tried_;
    likely_kept_ += !out[i].pruned && !out[i].metrics.failed;
  }
  for (const Outcome& o : out) {
    stage_tried_ += o.stage_likely;
    stage_kept_ += o.stage_likely && !o.pruned && !o.metrics.failed;
  }
  return out;
}

Evaluated Driver::make(const Survivor& s, std::string key, const Outcome& o, bool reused) {
  Evaluated e;
  e.candidate = s.c;
  e.key = std::move(key);
  e.plan = space_.plan(s.c);
  e.plan.stage_layers = layers_.of(e.plan, s.c.split);
  e.metrics = o.metrics;
  e.estimate = {s.lb, s.mem_lb};
  e.critical_path_s = o.critical_path_s;
  e.reused = reused;
  return e;
}

void Driver::report(const std::vector<Survivor>& survivors, std::size_t pos, double kth, double window,
                    Clock::time_point t0, std::size_t first, const Counts& counts) {
  if ((!o_.on_progress && !o_.on_batch) || shard_.rank() != 0) return;
  const double cut = std::max(kth, window);
  const auto end = std::upper_bound(survivors.begin() + static_cast<std::ptrdiff_t>(pos), survivors.end(), cut,
                                    [](double v, const Survivor& s) { return v < s.lb; });
  Progress p;
  p.evaluated = static_cast<int64_t>(evaluated_.size());
  p.remaining = end - (survivors.begin() + static_cast<std::ptrdiff_t>(pos));
  p.survivors = static_cast<int64_t>(survivors.size());
  p.elapsed_s = since(t0);
  p.rate = simulate_s_ > 0 ? static_cast<double>(simulated_) / simulate_s_ : 0;
  p.eta_s = p.rate > 0 ? static_cast<double>(p.remaining) / p.rate : 0;
  p.best_step_time_s = std::isfinite(leaders_.best()) ? leaders_.best() : 0;
  p.counts = counts;
  if (o_.on_batch) o_.on_batch(std::span<const Evaluated>(evaluated_.data() + first, evaluated_.size() - first), p);
  if (o_.on_progress) o_.on_progress(p);
}

void Driver::run(const std::vector<Survivor>& survivors, Counts& counts, Clock::time_point t0) {
  const auto batch = static_cast<std::size_t>(std::max<int64_t>(1, o_.batch));
  std::size_t pos = 0;
  while (pos < survivors.size()) {
    if (shard_.any(o_.cancel && o_.cancel->load())) {
      interrupted_ = true;
      counts.unexplored = static_cast<int64_t>(survivors.size() - pos);
      break;
    }
    const double kth = leaders_.kth();
    const double window = std::isfinite(leaders_.best()) ? leaders_.best() * (1 + o_.pareto_window) : INFINITY;
    if (survivors[pos].lb > kth && survivors[pos].lb > window) {
      counts.pruned_bound += static_cast<int64_t>(survivors.size() - pos);
      pos = survivors.size();
      break;
    }
    const std::size_t end = std::min(survivors.size(), pos + batch);
    std::vector<const Survivor*> to_simulate;
    std::vector<std::string> keys;
    for (std::size_t i = pos; i < end; ++i) {
      if (prune(survivors[i], kth, window)) {
        ++counts.pruned_bound;
        continue;
      }
      to_simulate.push_back(&survivors[i]);
      keys.push_back(plan_key(space_.plan(survivors[i].c)));
    }
    std::vector<char> reused;
    const std::vector<Outcome> outcomes = evaluate(to_simulate, keys, reused, kth, window);
    std::vector<const Evaluated*> fresh;
    const std::size_t first = evaluated_.size();
    for (std::size_t i = 0; i < to_simulate.size(); ++i) {
      if (outcomes[i].pruned) {
        ++counts.pruned_bound;
        ++counts.pruned_critical_path;
        continue;
      }
      evaluated_.push_back(make(*to_simulate[i], keys[i], outcomes[i], reused[i] != 0));
      const Evaluated& e = evaluated_.back();
      ++counts.evaluated;
      counts.reused += e.reused;
      counts.fitting += e.metrics.fits && !e.metrics.failed;
      counts.failed += e.metrics.failed;
      leaders_.add(e);
    }
    for (std::size_t i = first; i < evaluated_.size(); ++i) {
      if (!evaluated_[i].reused) fresh.push_back(&evaluated_[i]);
    }
    pos = end;
    if (store_) store_->record(search_id_, fresh, counts, since(t0));
    report(survivors, pos, leaders_.kth(), window, t0, first, counts);
  }
}

// The least memory any plan can need per GPU: the model states fully sharded over every GPU
// (ZeRO-3 with dp = all GPUs, optimizer offloaded when the space allows it), plus the cluster's
// reserved bytes: the average over GPUs, which the peak GPU cannot be below. Above capacity, no
// plan fits and the search ends before enumerating (a 13 P-parameter model used to take minutes).
std::string model_state_floor_reason(const Space& space) {
  const spec::Model& m = space.model();
  const int64_t params = count::parameters(m);
  spec::ZeroConfig z;
  z.stage = 3;
  const std::vector<bool>& offload = space.offload_values();
  const bool can_offload = std::find(offload.begin(), offload.end(), true) != offload.end();
  z.offload_optimizer = can_offload ? spec::Offload::kCpu : spec::Offload::kNone;
  const sim::ModelStates floor = sim::model_states(params, 0, z, space.gpus(), space.training().dtype);
  const spec::Gpu& gpu = space.cluster().gpu;
  const double need = static_cast<double>(floor.total()) + static_cast<double>(gpu.reserved_bytes);
  if (need <= static_cast<double>(gpu.memory_bytes)) return "";
  return "no plan fits in memory: " + text::short_count(static_cast<double>(params)) + " parameters need at least " +
         text::gib(need) + " GiB per GPU even fully sharded over all " + std::to_string(space.gpus()) + " GPUs (ZeRO-3" +
         (can_offload ? ", optimizer offloaded" : "") + ", with the " + text::gib(static_cast<double>(gpu.reserved_bytes)) +
         " GiB reserved), above the " + text::gib(static_cast<double>(gpu.memory_bytes)) + " GiB of a " + gpu.name +
         "; use more GPUs (--nodes), or a smaller model";
}

std::string no_plan_reason(const Space& space, const SearchResult& r) {
  if (r.counts.candidates == 0) {
    const std::string why = space.why_empty();
    return why.empty() ? "the axis limits given (schedule, virtual stages, sequence parallelism, split, ZeRO, offload) "
                         "leave no candidate plan for this model and GPU count"
                       : why;
  }
  const int64_t cap = space.cluster().gpu.memory_bytes;
  auto gib = [](int64_t b) { return text::gib(static_cast<double>(b)) + " GiB"; };
  const std::string advice = "; use more GPUs (--nodes), or a smaller model or batch";
  if (r.survivors == 0) {
    return "no plan fits in memory: the smallest peak any of the " + std::to_string(r.counts.candidates) +
           " candidate plans can have is at least " + gib(r.min_memory_lb) + " (" + r.min_memory_key + "), above the " +
           gib(cap) + " of a " + space.cluster().gpu.name + advice;
  }
  if (r.counts.evaluated > 0 && r.counts.fitting == 0 && r.counts.failed < r.counts.evaluated) {
    const Evaluated* closest = nullptr;
    for (const Evaluated& e : r.evaluated) {
      if (!e.metrics.failed && (!closest || e.metrics.peak_memory_bytes < closest->metrics.peak_memory_bytes)) closest = &e;
    }
    return "no plan fits in memory: none of the " + std::to_string(r.counts.evaluated) +
           " simulated plans does; the closest, " + closest->key + ", peaks at " +
           gib(closest->metrics.peak_memory_bytes) + " of the " + gib(cap) + " of a " + space.cluster().gpu.name + advice;
  }
  if (r.interrupted) return "interrupted before any plan that fits was simulated";
  if (r.counts.failed > 0) return std::to_string(r.counts.failed) + " plans could not be simulated (see the warnings)";
  return "no plan was simulated";
}

}  // namespace

std::vector<std::pair<std::string, std::string>> axis_values(const Candidate& c) {
  const auto codes = axis_codes(c);
  std::vector<std::pair<std::string, std::string>> out;
  for (int a = 0; a < kAxisCount; ++a) out.emplace_back(kAxisNames[a], axis_text(a, codes[static_cast<std::size_t>(a)]));
  return out;
}

Metrics simulate_plan(const Space& space, const spec::Plan& plan) {
  const program::Program prog = program::lower(space.model(), space.training(), plan);
  return sim::simulate(prog, space.cluster()).metrics;
}

std::vector<RowErrorBars> top_error_bars(const Space& space, const std::vector<Evaluated>& top, std::size_t n) {
  std::vector<RowErrorBars> out;
  const std::vector<std::size_t> rows = table_rows(top);
  for (std::size_t r = 0; r < std::min(n, rows.size()); ++r) {
    const Evaluated& e = top[rows[r]];
    const program::Program prog = program::lower(space.model(), space.training(), e.plan);
    out.push_back({rows[r], static_cast<int>(r + 1), sim::error_bars(prog, space.cluster(), sim::SimOptions{}, e.metrics)});
  }
  return out;
}

std::vector<std::string> error_bar_lines(const std::vector<Evaluated>& top, const std::vector<RowErrorBars>& bars) {
  std::vector<std::string> lines;
  if (bars.empty() || bars.front().bars.empty()) return lines;
  const sim::ErrorBars& best = bars.front().bars;
  lines.push_back("Uncertainty (the cluster profile's parameter uncertainties, docs/simulator.md): best plan " +
                  text::fmt("%.4g s, ", best.step_time_s) + sim::error_bars_text(best) + ".");
  std::vector<std::string> close;
  std::size_t nearest = 0;  // the distinguishable row with the smallest lead
  for (std::size_t i = 1; i < bars.size(); ++i) {
    const double gap = bars[i].bars.step_time_s - best.step_time_s;
    const double sigma = sim::difference_sigma(best, bars[i].bars);
    if (sim::distinguishable(best, bars[i].bars)) {
      if (nearest == 0 || gap < bars[nearest].bars.step_time_s - best.step_time_s) nearest = i;
      continue;
    }
    std::string what = text::fmt("#%.0f ", bars[i].row);
    what += top[bars[i].index].key;
    what += text::fmt(" (+%.3g s", gap) + text::fmt(", 2σ of the difference %.3g s)", 2 * sigma);
    close.push_back(what);
  }
  if (close.empty() && nearest > 0) {
    const double lead = bars[nearest].bars.step_time_s - best.step_time_s;
    lines.push_back(text::fmt("Its lead over the next %.0f rows exceeds 2σ of each difference (the profile's errors move ",
                              static_cast<double>(bars.size() - 1)) +
                    text::fmt("similar plans together); the smallest lead is #%.0f's ", bars[nearest].row) +
                    text::fmt("%.3g s", lead) + text::fmt(" (%.2g%%).", 100 * lead / best.step_time_s));
  } else if (!close.empty()) {
    lines.push_back("Not distinguishable from the best within 2σ of their difference:");
    for (const std::string& c : close) lines.push_back("  " + c);
  }
  lines.push_back("These ranges cover the profile's parameters only, not the simulator's own model error (docs/validation.md).");
  return lines;
}

std::vector<std::string> model_error_lines(const std::vector<Evaluated>& top, const spec::Model& model, spec::Framework framework,
                                           const sim::ValidationRecord& record, const std::string& gpu) {
  // (ZeRO-3, class across nodes) -> the rows "1, 2, 4", in order of first row
  std::vector<std::pair<std::pair<bool, std::string>, std::string>> classes;
  for (std::size_t i = 0; i < std::min<std::size_t>(top.size(), 5); ++i) {
    const std::pair<bool, std::string> cls{top[i].plan.zero.stage == 3, spec::validation_class(top[i].plan, model)};
    auto it = std::find_if(classes.begin(), classes.end(), [&](const auto& c) { return c.first == cls; });
    if (it == classes.end()) it = classes.insert(classes.end(), {cls, ""});
    it->second += (it->second.empty() ? "" : ", ") + std::to_string(i + 1);
  }
  std::vector<std::string> lines;
  if (classes.empty()) return lines;
  lines.push_back("Model error, measured on published runs of the framework:");
  for (const auto& [cls, rows] : classes) {
    const sim::ModelError e = sim::model_error(record, framework, cls.first ? 3 : 0, gpu, cls.second);
    lines.push_back(std::string("  ") + (rows.find(',') == std::string::npos ? "row " : "rows ") + rows + ": " +
                    sim::model_error_text(e) + ".");
  }
  return lines;
}

SearchResult search(const Space& space, const SearchOptions& options) {
  thread::keep_freed_memory();   // every caller's: the search builds and frees thousands of Programs
  const auto t0 = Clock::now();
  std::unique_ptr<Shard> own;
  Shard* shard = options.shard;
  if (!shard) {
    own = local_shard();
    shard = own.get();
  }
  SearchResult r;
  r.capacity_bytes = space.cluster().gpu.memory_bytes;
  if (std::string why = model_state_floor_reason(space); !why.empty()) {
    r.reason = std::move(why);
    r.seconds = since(t0);
    return r;
  }
  ThreadPool pool(options.threads);
  Driver driver(space, options, pool, *shard);
  driver.open_store(r);

  Enumerated all = enumerate_all(space, pool, *shard);
  r.enumerate_seconds = since(t0);
  r.counts = all.counts;
  r.axes = named(all.axes);
  r.survivors = static_cast<int64_t>(all.survivors.size());
  if (all.min_mem != std::numeric_limits<int64_t>::max()) {
    r.min_memory_lb = all.min_mem;
    r.min_memory_key = plan_key(space.plan(all.min_candidate));
  }
  // Axis minima over survivors are bounds; the explanation compares them with simulated times.
  driver.run(all.survivors, r.counts, t0);
  r.interrupted = driver.interrupted();
  r.top = driver.leaders().top();
  r.pareto = driver.leaders().front();
  r.evaluated = std::move(driver.evaluated());
  r.warnings = std::move(driver.warnings());
  r.seconds = since(t0);
  driver.close_store(r.counts, r.seconds);
  if (r.top.empty()) r.reason = no_plan_reason(space, r);
  return r;
}

}  // namespace stagecraft::planner
