#include "sim/chains.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace stagecraft::sim {

using program::Instr;
using program::Lane;

namespace {

// Backward searches from a chain's first member stop after this many instructions and say "not
// an ancestor": a chain then ends early, which costs speed, never exactness.
constexpr int kSearchBudget = 16;

bool dp_collective(const Instr& in) {
  return (in.lane == Lane::kDpGather || in.lane == Lane::kDpReduce) && program::is_collective(in.op);
}

class Finder {
 public:
  Finder(const program::RoleProgram& role, const program::RoleGraph& graph, bool overlap)
      : role_(role), graph_(graph), n_(static_cast<int32_t>(role.instrs.size())), overlap_(overlap) {}

  Chains find() {
    Chains ch;
    ch.overlap_free = overlap_;
    ch.of.assign(static_cast<std::size_t>(n_), -1);
    ch.exit.assign(static_cast<std::size_t>(n_), 0);
    if (!scan()) return ch;
    if (overlap_ && !dp_.empty()) mark_overlaps();
    int32_t k = 0;
    while (k < n_) {
      if (!eligible(k)) {
        ++k;
        continue;
      }
      const int32_t a = k;
      int32_t e = a + 1;
      while (e < n_ && eligible(e) && joins(e, a)) ++e;
      if (e - a >= 2) {
        const auto c = static_cast<int32_t>(ch.begin.size());
        ch.begin.push_back(a);
        ch.end.push_back(e);
        for (int32_t m = a; m < e; ++m) {
          ch.of[static_cast<std::size_t>(m)] = c;
          // successors come later in the list: one at or past e is outside the chain
          ch.exit[static_cast<std::size_t>(m)] = last_succ(m) >= e;
        }
        ch.members += static_cast<std::size_t>(e - a);
        ch.shape.push_back(shape_of(ch, c));
      }
      k = e;
    }
    return ch;
  }

 private:
  // One pass: lane predecessors, compute-lane positions, the latest compute among the ancestors
  // (pulled from the predecessors), the data-parallel collectives; false when a dependency names a
  // later instruction (the index order is then no topological order and no chain is found).
  bool scan() {
    lane_prev_.assign(static_cast<std::size_t>(n_), -1);
    if (overlap_) {
      pos_.assign(static_cast<std::size_t>(n_), -1);
      anc_.assign(static_cast<std::size_t>(n_), -1);
    }
    std::array<int32_t, program::kLaneCount> last;
    last.fill(-1);
    for (int32_t k = 0; k < n_; ++k) {
      const Instr& in = role_.instrs[static_cast<std::size_t>(k)];
      const auto lane = static_cast<std::size_t>(in.lane);
      const int32_t lp = last[lane];
      lane_prev_[static_cast<std::size_t>(k)] = lp;
      last[lane] = k;
      auto latest = [&](int32_t p) { return std::max(anc_[static_cast<std::size_t>(p)], pos_[static_cast<std::size_t>(p)]); };
      int32_t a = overlap_ && lp >= 0 ? latest(lp) : -1;
      for (int32_t d : role_.deps_of(in)) {
        if (d < 0 || d >= k) return false;
        if (overlap_) a = std::max(a, latest(d));
      }
      if (!overlap_) continue;
      anc_[static_cast<std::size_t>(k)] = a;
      if (in.lane == Lane::kCompute) pos_[static_cast<std::size_t>(k)] = computes_++;
      if (dp_collective(in)) dp_.push_back(k);
    }
    return true;
  }

  // What times a member: its work and its collective (Instr without its micro-batch, chunk, peer,
  // bucket and dependency indices), and which members of its chain it releases (by offset).
  bool same_member(int32_t x, int32_t y, int32_t x0, int32_t y0, int32_t len) const {
    const Instr& a = role_.instrs[static_cast<std::size_t>(x)];
    const Instr& b = role_.instrs[static_cast<std::size_t>(y)];
    if (!(a.flops == b.flops && a.bytes == b.bytes && a.elems == b.elems && a.unit_begin == b.unit_begin &&
          a.unit_end == b.unit_end && a.op == b.op && a.lane == b.lane && a.group == b.group && a.flags == b.flags)) {
      return false;
    }
    // the successors inside the chain, by offset from its start (the graph lists them in order)
    auto inside = [&](int32_t s, int32_t base) { return s >= 0 && s - base < len ? s - base : -1; };
    if (inside(graph_.lane_next[static_cast<std::size_t>(x)], x0) != inside(graph_.lane_next[static_cast<std::size_t>(y)], y0)) return false;
    int32_t i = graph_.succ_begin[static_cast<std::size_t>(x)], j = graph_.succ_begin[static_cast<std::size_t>(y)];
    const int32_t ie = graph_.succ_begin[static_cast<std::size_t>(x) + 1], je = graph_.succ_begin[static_cast<std::size_t>(y) + 1];
    for (;; ++i, ++j) {
      const int32_t u = i < ie ? inside(graph_.succ[static_cast<std::size_t>(i)], x0) : -1;
      const int32_t v = j < je ? inside(graph_.succ[static_cast<std::size_t>(j)], y0) : -1;
      if (u != v) return false;
      if (u < 0) return true;
    }
  }

  // The first chain of the same shape as chain c (c itself when none): the same members, one for
  // one (same_member, and exits alike), so its members take the same times from its start.
  int32_t shape_of(const Chains& ch, int32_t c) {
    const int32_t a = ch.begin[static_cast<std::size_t>(c)], e = ch.end[static_cast<std::size_t>(c)];
    uint64_t h = static_cast<uint64_t>(e - a);
    for (int32_t m = a; m < e; ++m) {
      const Instr& in = role_.instrs[static_cast<std::size_t>(m)];
      h = h * 1000003u ^ (static_cast<uint64_t>(in.op) << 8 | static_cast<uint64_t>(in.lane));
      h = h * 1000003u ^ static_cast<uint64_t>(in.unit_begin + 1);
      h = h * 1000003u ^ static_cast<uint64_t>(in.bytes);
    }
    std::vector<int32_t>& same = shapes_[h];
    for (int32_t other : same) {
      const int32_t b = ch.begin[static_cast<std::size_t>(other)];
      if (ch.end[static_cast<std::size_t>(other)] - b != e - a) continue;
      bool match = true;
      for (int32_t i = 0; i < e - a && match; ++i) {
        match = ch.exit[static_cast<std::size_t>(a + i)] == ch.exit[static_cast<std::size_t>(b + i)] && same_member(a + i, b + i, a, b, e - a);
      }
      if (match) return other;
    }
    same.push_back(c);
    return c;
  }

  // The latest successor (the graph lists a dependency's successors in index order).
  int32_t last_succ(int32_t k) const {
    const int32_t lane = graph_.lane_next[static_cast<std::size_t>(k)];
    const int32_t b = graph_.succ_begin[static_cast<std::size_t>(k)], e = graph_.succ_begin[static_cast<std::size_t>(k) + 1];
    return e > b ? std::max(lane, graph_.succ[static_cast<std::size_t>(e) - 1]) : lane;
  }

  // The compute positions that are not overlap-free (see the header): D backwards, then for each
  // data-parallel collective the positions A(d) < p <= D(d) when D(d) - A(d) > 1.
  void mark_overlaps() {
    std::vector<int32_t> desc(static_cast<std::size_t>(n_), computes_);
    for (int32_t k = n_ - 1; k >= 0; --k) {
      int32_t d = computes_;
      auto via = [&](int32_t s) {
        const int32_t p = pos_[static_cast<std::size_t>(s)];
        d = std::min(d, p >= 0 ? p : desc[static_cast<std::size_t>(s)]);
      };
      if (graph_.lane_next[static_cast<std::size_t>(k)] >= 0) via(graph_.lane_next[static_cast<std::size_t>(k)]);
      for (int32_t i = graph_.succ_begin[static_cast<std::size_t>(k)]; i < graph_.succ_begin[static_cast<std::size_t>(k) + 1]; ++i) {
        via(graph_.succ[static_cast<std::size_t>(i)]);
      }
      desc[static_cast<std::size_t>(k)] = d;
    }
    std::vector<int32_t> diff(static_cast<std::size_t>(computes_) + 1, 0);
    for (int32_t k : dp_) {
      const int32_t lo = anc_[static_cast<std::size_t>(k)], hi = desc[static_cast<std::size_t>(k)];
      const int32_t from = lo + 1, to = std::min(hi, computes_ - 1);
      if (hi - lo <= 1 || from > to) continue;
      ++diff[static_cast<std::size_t>(from)];
      --diff[static_cast<std::size_t>(to) + 1];
    }
    overlapped_.assign(static_cast<std::size_t>(computes_), 0);
    int32_t open = 0;
    for (int32_t p = 0; p < computes_; ++p) {
      open += diff[static_cast<std::size_t>(p)];
      overlapped_[static_cast<std::size_t>(p)] = open != 0;
    }
  }

  bool eligible(int32_t k) const {
    const Instr& in = role_.instrs[static_cast<std::size_t>(k)];
    if (in.lane == Lane::kCompute) {
      return program::is_compute(in.op) && (overlapped_.empty() || !overlapped_[static_cast<std::size_t>(pos_[static_cast<std::size_t>(k)])]);
    }
    return in.lane == Lane::kTp && in.group == program::Group::kTp && program::is_collective(in.op);
  }

  template <typename F>
  void for_preds(int32_t k, F&& f) const {
    const int32_t lp = lane_prev_[static_cast<std::size_t>(k)];
    if (lp >= 0) f(lp);
    for (int32_t d : role_.deps_of(role_.instrs[static_cast<std::size_t>(k)])) f(d);
  }

  // e may follow [a, e): a predecessor inside, every other one an ancestor of a
  bool joins(int32_t e, int32_t a) {
    bool inside = false, ok = true;
    for_preds(e, [&](int32_t q) {
      if (!ok) return;
      if (q >= a) {
        inside = true;
      } else if (!ancestor(q, a)) {
        ok = false;
      }
    });
    return ok && inside;
  }

  // Whether p (< a) is an ancestor of a: a backward search from a over instructions after p (p
  // can only reach later ones), within the budget.
  bool ancestor(int32_t p, int32_t a) {
    if (mark_.empty()) mark_.assign(static_cast<std::size_t>(n_), 0);
    ++stamp_;
    stack_.assign(1, a);
    int visited = 0;
    bool found = false;
    while (!stack_.empty() && !found && visited <= kSearchBudget) {
      const int32_t k = stack_.back();
      stack_.pop_back();
      for_preds(k, [&](int32_t q) {
        if (found || q < p) return;
        if (q == p) {
          found = true;
          return;
        }
        uint32_t& m = mark_[static_cast<std::size_t>(q)];
        if (m == stamp_) return;
        m = stamp_;
        if (++visited <= kSearchBudget) stack_.push_back(q);
      });
    }
    return found;
  }

  const program::RoleProgram& role_;
  const program::RoleGraph& graph_;
  const int32_t n_;
  const bool overlap_;
  int32_t computes_ = 0;
  std::vector<int32_t> lane_prev_, pos_, anc_, dp_;
  std::vector<uint8_t> overlapped_;   // by compute position; empty: none
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  std::unordered_map<uint64_t, std::vector<int32_t>> shapes_;   // chain hash -> chains of that hash
  std::vector<int32_t> stack_;
};

}  // namespace

Chains find_chains(const program::RoleProgram& role, const program::RoleGraph& graph, bool overlap_free) {
  return Finder(role, graph, overlap_free).find();
}

std::vector<Chains> find_chains(const program::Program& prog, bool overlap_free) {
  std::vector<Chains> out;
  out.reserve(prog.roles.size());
  for (const program::RoleProgram& role : prog.roles) {
    program::RoleGraph scratch;
    out.push_back(find_chains(role, program::graph_of(role, scratch), overlap_free));
  }
  return out;
}

}  // namespace stagecraft::sim
