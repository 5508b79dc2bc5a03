// The Program interpreter's expert parallelism (docs/program.md, "In the executor"): a MoE unit's
// pass runs in the phases its two all-to-alls over the expert-parallel group separate
// (model/layers.hpp, LayerT::moe_*), Megatron-Core's alltoall dispatcher:
//   pass       compute                     all-to-all (posted, then finished)        compute / finish
//   forward    Forward: route and permute  dispatch: the rows to the experts' ranks  Forward (experts)
//                                          combine: their outputs back               -> y (at the finish)
//   backward   (at the post) d(outputs)    the combine's gradient to the experts     Backward (experts)
//                                          the dispatch's gradient back              Backward: -> dx
//   recompute  Recompute: the route again  dispatch again                            Recompute (experts)
//              from the kept input         combine again (its y unused)
// Under full recompute a forward keeps only the unit's input once its combine is done; the
// Recompute pass (Megatron-Core recomputes the whole layer, its all-to-alls included) restores
// the source side's and the experts' caches for the backward.
// The dispatch first exchanges how many rows go to each member's each expert (Megatron-Core's
// tokens-per-expert all-to-all, here E/ep counts a member), then the rows with those counts; the
// combine and the backward's two reuse the dispatch's counts the other way. The counts travel as
// fp32 values (exact below 2^24 rows). What the Program's instruction says it moves is the mean
// (T/t · k · h · w); the executor moves what the router chose and traces those bytes.
// Expert tensor parallelism (etp > 1; Megatron-Core's "A2A(EP) → AG(TP) → experts → RS(TP) →
// A2A(EP)", its tp group the experts' own, Group::kExpertTp): each rank holds 1/etp of each of its
// experts' width (gate and up by columns, down by rows: ParamLayout), so the experts phase runs
// over the rows every etp peer received — gathered after the dispatch (their counts first, then
// the rows, peer-major) — and its partial outputs are summed and scattered back, each peer keeping
// its own rows, before the combine; the backward gathers d(outputs) and reduce-scatters
// d(inputs) the same way. With ep 1 the gather takes the route's own rows and the scatter's
// result goes to the combine.
#include <chrono>
#include <map>
#include <string>
#include <tuple>

#include "core/program/units.hpp"
#include "executor/errors.hpp"
#include "executor/interpreter.hpp"

namespace stagecraft::executor {

using namespace interp;  // the interpreter's own names (interpreter.hpp)

bool Runner::Interpreter::ep_moe(int32_t unit) const {
  return (ep_ > 1 || etp_ > 1) && unit_kind(prog_.model, unit) == UnitKind::kMoe;
}

// The rows the experts phase takes, by (source, local expert): the dispatch's (ep 1: the route's
// own, one source), or with etp > 1 every peer's, gathered.
const std::vector<int64_t>& Runner::Interpreter::expert_counts(const EpRoute& route) const {
  if (allgather_) return route.recv_counts;   // this rank's experts' blocks of every member's copies
  if (etp_ > 1) return route.gathered;
  return ep_ > 1 ? route.recv_counts : route.experts;
}

// Each MoE pass's two all-to-alls, found by (chunk, micro-batch, unit, pass), in Program order.
void Runner::Interpreter::plan_ep_passes() {
  const std::size_t n = instrs_.size();
  ep_ = prog_.model.moe.on() ? prog_.placement.ep : 1;
  etp_ = prog_.model.moe.on() ? prog_.placement.etp : 1;
  allgather_ = prog_.plan.moe_dispatcher == spec::MoeDispatcher::kAllGather && ep_ * etp_ > 1;
  ep_role_.assign(n, EpRole::kNone);
  if (ep_ <= 1 && etp_ <= 1) return;
  std::map<std::tuple<int32_t, int32_t, int32_t, int>, std::vector<int32_t>> by_pass;
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) {
    const Instr& in = instrs_[at(i)];
    if (in.lane != Lane::kEp) continue;
    const int pass = (in.flags & program::kFlagGrad) ? 1 : (in.flags & program::kFlagRecompute) ? 2 : 0;
    by_pass[{in.chunk, in.mb, in.unit_begin, pass}].push_back(i);
  }
  const std::size_t want = allgather_ ? 2 : (ep_ > 1 ? 2 : 0) + (etp_ > 1 ? 2 : 0);
  for (const auto& [key, list] : by_pass) {
    if (list.size() != want) {
      throw ExecutorError(where(list.front()) + ": a MoE pass has " + std::to_string(list.size()) +
                          " expert-parallel collectives, expected " + std::to_string(want) +
                          " (dispatch and combine with ep > 1, gather and scatter with etp > 1 or the all-gather dispatcher)");
    }
    const bool grad = std::get<3>(key) == 1;  // a recompute's are a forward's
    int a2a = 0;
    for (int32_t i : list) {
      const Instr& in = instrs_[at(i)];
      EpRole& role = ep_role_[at(i)];
      if (in.op != Op::kAllToAll && (in.group == Group::kExpertTp || in.group == Group::kExpertTpEp)) {
        role = in.op == Op::kTpAllGather ? EpRole::kGather : EpRole::kScatter;
      } else if (a2a++ == 0) {
        role = grad ? EpRole::kGradCombine : EpRole::kDispatch;
      } else {
        role = grad ? EpRole::kGradDispatch : EpRole::kCombine;
      }
    }
  }
}

// A phase of the MoE pass of instruction `in`'s unit, on the backend.
Buffer Runner::Interpreter::ep_run(MoePhase phase, const Instr& in, MicroState& ms, std::span<const float> data,
                                   std::span<int64_t> counts, bool flag) {
  return backend().moe(phase, in.chunk, in.unit_begin, ms.slot, unit_tokens(ms, in.unit_begin), data, counts, flag).as(store_);
}

// A phase run when an all-to-all is posted or finished, its time counted as compute (a compute
// instruction's own phase is timed as every compute is).
Buffer Runner::Interpreter::ep_phase(MoePhase phase, const Instr& in, MicroState& ms, std::span<const float> data,
                                     std::span<int64_t> counts, bool flag) {
  const auto t0 = std::chrono::steady_clock::now();
  Buffer out = ep_run(phase, in, ms, data, counts, flag);
  compute_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// A MoE unit's compute instruction with expert parallelism: the route (Forward), the experts
// (kFlagExperts), or the backward's last phase.
void Runner::Interpreter::ep_compute(const Instr& in, bool backward, bool input_only) {
  MicroState& ms = micro(in);
  const bool experts = (in.flags & program::kFlagExperts) != 0;
  auto run = [&](MoePhase phase, std::span<const float> data, std::span<int64_t> counts, bool flag) {
    return ep_run(phase, in, ms, data, counts, flag);
  };
  EpRoute& route = ms.ep_routes[in.unit_begin];
  if (!backward && !experts) {
    route.experts.assign(at(prog_.model.moe.experts), 0);
    ms.ep_out = run(MoePhase::kDispatch, ms.act.view(), route.experts, false);
    ms.act = {};
  } else if (!backward) {
    std::vector<int64_t> counts = expert_counts(route);
    ms.ep_out = run(MoePhase::kExperts, ms.ep_in.view(), counts, false);
    ms.ep_in = {};
  } else if (experts) {
    ms.ep_out = run(MoePhase::kExpertsBackward, ms.ep_in.view(), {}, !input_only);
    ms.ep_in = {};
  } else {
    ms.grad = run(MoePhase::kBackwardFinish, ms.ep_in.view(), {}, !input_only);
    ms.ep_in = {};
    ms.ep_routes.erase(in.unit_begin);
    maybe_retire(ms);
  }
}

// A MoE unit's Recompute with expert parallelism: the route from the kept input, or the experts
// over what the recomputed dispatch delivered.
void Runner::Interpreter::ep_recompute(const Instr& in) {
  MicroState& ms = micro(in);
  EpRoute& route = ms.ep_routes[in.unit_begin];
  if ((in.flags & program::kFlagExperts) == 0) {
    route.experts.assign(at(prog_.model.moe.experts), 0);
    ms.ep_out = ep_run(MoePhase::kDispatch, in, ms, {}, route.experts, true);
  } else {
    std::vector<int64_t> counts = expert_counts(route);
    ms.ep_out = ep_run(MoePhase::kExperts, in, ms, ms.ep_in.view(), counts, false);
    ms.ep_in = {};
  }
}

void Runner::Interpreter::post_ep(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  const EpRole role = ep_role_[at(i)];
  if (role == EpRole::kNone) throw ExecutorError(where(i) + ": an expert-parallel all-to-all of no MoE pass");
  if (role == EpRole::kDispatch) {  // first the rows of each member's each expert
    EpRoute& route = ms.ep_routes[in.unit_begin];
    const int64_t local = prog_.model.moe.experts / ep_;
    p.buffer = std::move(ms.ep_out);
    std::vector<float> counts(route.experts.begin(), route.experts.end());
    route.sent_rows.assign(at(ep_), 0);
    for (int64_t e = 0; e < prog_.model.moe.experts; ++e) route.sent_rows[at(e / local)] += route.experts[at(e)];
    p.extra = alloc_as(ep_ * local, Format::kFp32);
    p.packed = alloc_as(ep_ * local, Format::kFp32);
    backend().upload(counts, p.extra.view());
    const std::vector<int64_t> each(at(ep_), local);
    p.requests.push_back(runner_.comm_.iall_to_all({Group::kEp, Lane::kEp}, p.extra.view(), each, p.packed.view(), each));
    p.then = [this, i] { post_ep_rows(i); };
    return;
  }
  if (role == EpRole::kGradCombine) {
    p.buffer = ep_phase(MoePhase::kBackwardSend, in, ms, ms.grad.view(), {}, false);
    ms.grad = {};
  } else {
    p.buffer = std::move(ms.ep_out);
  }
  post_ep_rows(i);
}

// The rows: the dispatch's counts (received by its first phase) or the dispatch's, the other way.
void Runner::Interpreter::post_ep_rows(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  const EpRole role = ep_role_[at(i)];
  const int64_t h = prog_.model.hidden;
  EpRoute& route = ms.ep_routes[in.unit_begin];
  if (role == EpRole::kDispatch) {
    std::vector<float> counts(at(p.packed.size()));
    backend().download(p.packed.view(), counts);
    const int64_t local = prog_.model.moe.experts / ep_;
    route.recv_counts.assign(counts.size(), 0);
    route.recv_rows.assign(at(ep_), 0);
    for (std::size_t k = 0; k < counts.size(); ++k) {
      route.recv_counts[k] = static_cast<int64_t>(counts[k]);
      route.recv_rows[k / at(local)] += route.recv_counts[k];
    }
    p.requests.clear();
    p.extra = {};
    p.packed = {};
  }
  // the dispatch and the combine's gradient go out by the route; the combine and the dispatch's
  // gradient come back by it
  const bool out = role == EpRole::kDispatch || role == EpRole::kGradCombine;
  const std::vector<int64_t>& sent = out ? route.sent_rows : route.recv_rows;
  const std::vector<int64_t>& received = out ? route.recv_rows : route.sent_rows;
  std::vector<int64_t> send_counts, recv_counts;
  int64_t rows = 0, want = 0;
  for (int64_t j = 0; j < ep_; ++j) {
    send_counts.push_back(sent[at(j)] * h);
    recv_counts.push_back(received[at(j)] * h);
    rows += received[at(j)];
    want += sent[at(j)];
  }
  if (p.buffer.size() != want * h) {
    throw ExecutorError(where(i) + ": has " + std::to_string(p.buffer.size()) + " elements to send, its route says " +
                        std::to_string(want * h));
  }
  p.piece = alloc_as(rows * h, store_);
  // the values are the storage format's already; MPI's all-to-all moves them as fp32
  p.requests.push_back(runner_.comm_.iall_to_all({Group::kEp, Lane::kEp}, p.buffer.view(), send_counts, p.piece.view(), recv_counts));
  p.bytes = p.buffer.bytes();
  add_messages(p.buffer.bytes() + p.piece.bytes());
}

void Runner::Interpreter::finish_ep(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  add_messages(-(p.buffer.bytes() + p.piece.bytes()));
  Buffer got = std::move(p.piece);
  p.buffer = {};
  p.piece = {};
  if (ep_role_[at(i)] == EpRole::kCombine && (in.flags & program::kFlagRecompute)) {
    ep_phase(MoePhase::kCombine, in, ms, got.view(), {}, false);  // the caches back; y was the forward's
  } else if (ep_role_[at(i)] == EpRole::kCombine) {
    ms.act = ep_phase(MoePhase::kCombine, in, ms, got.view(), {}, full_recompute_);
  } else {
    ms.ep_in = std::move(got);
  }
}

// Expert tensor parallelism's gather (the rows to the experts: after the dispatch, or of d(outputs)
// after the combine's gradient) and scatter (their partial outputs or d(inputs), summed over the
// etp peers, each keeping its own rows) over Group::kExpertTp; or the all-gather dispatcher's over
// the expert grid's G = etp·ep ranks (Group::kExpertTpEp, Megatron-Core's
// MoEAllGatherTokenDispatcher): every member's routed copies (sorted by expert) are gathered, and
// each rank takes the blocks of its experts from every member — what an all-to-all would have
// delivered, member-major — and after the experts puts their outputs back at those places in a
// zeroed buffer of every member's copies, whose reduce-scatter gives each member its copies'
// outputs (summed over the etp peers' partial outputs; the others add zeros).

namespace {

// The block of experts [e0, e0 + local) in each member's copies (sorted by expert; `counts` the
// members' copies by expert, member-major): where it starts among every member's copies, and its rows.
struct Block {
  int64_t at = 0, rows = 0;
};
std::vector<Block> expert_blocks(const std::vector<int64_t>& counts, const std::vector<int64_t>& member_rows, int64_t experts,
                                 int64_t e0, int64_t local) {
  std::vector<Block> out;
  int64_t base = 0;
  for (std::size_t j = 0; j < member_rows.size(); ++j) {
    const auto row = [&](int64_t e) { return counts[j * static_cast<std::size_t>(experts) + static_cast<std::size_t>(e)]; };
    Block b{base, 0};
    for (int64_t e = 0; e < e0; ++e) b.at += row(e);
    for (int64_t e = e0; e < e0 + local; ++e) b.rows += row(e);
    out.push_back(b);
    base += member_rows[j];
  }
  return out;
}

}  // namespace

void Runner::Interpreter::post_etp(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  const EpRole role = ep_role_[at(i)];
  EpRoute& route = ms.ep_routes[in.unit_begin];
  const int64_t h = prog_.model.hidden;
  const bool grad = (in.flags & program::kFlagGrad) != 0;
  const bool grid = in.group == Group::kExpertTpEp;
  const int64_t members = grid ? ep_ * etp_ : etp_, me = prog_.placement.stage_place_of(runner_.rank_) % members;
  const Channel ch{in.group, Lane::kEp};
  if (role == EpRole::kScatter) {
    Buffer rows = std::move(ms.ep_out);
    int64_t total = 0;
    for (int64_t r : route.peer_rows) total += r;
    if (grid) {  // the experts' rows (received order) back at their places among every member's copies
      const int64_t E = prog_.model.moe.experts, local = E / ep_, e0 = prog_.placement.ep_index_of(runner_.rank_) * local;
      p.buffer = alloc_as(total * h, store_);
      int64_t from = 0;
      for (const Block& b : expert_blocks(route.gathered, route.peer_rows, E, e0, local)) {
        if (b.rows > 0) {
          backend().copy(p.buffer.view().subspan(at(b.at * h), at(b.rows * h)), rows.view().subspan(at(from * h), at(b.rows * h)));
        }
        from += b.rows;
      }
      if (rows.size() != from * h) {
        throw ExecutorError(where(i) + ": has " + std::to_string(rows.size()) + " elements of its experts' rows, its route says " +
                            std::to_string(from * h));
      }
    } else {  // the experts' rows, peer-major: each peer's block summed to it
      p.buffer = std::move(rows);
      if (p.buffer.size() != total * h) {
        throw ExecutorError(where(i) + ": has " + std::to_string(p.buffer.size()) +
                            " elements to reduce-scatter, its peers' rows say " + std::to_string(total * h));
      }
    }
    p.piece = alloc_as(route.peer_rows[at(me)] * h, store_);
    p.bytes = p.buffer.bytes();
    add_messages(p.buffer.bytes() + p.piece.bytes());
    p.requests.push_back(runner_.comm_.ireduce_scatter(ch, p.buffer.view(), p.piece.view(), route.peer_elems, store_));
    return;
  }
  if (role != EpRole::kGather) throw ExecutorError(where(i) + ": an expert tensor-parallel collective of no MoE pass");
  // this rank's rows: what the dispatch (or the combine's gradient) delivered, or with ep 1 and
  // with the all-gather dispatcher the route's own (the backward's from d(outputs))
  const bool own_rows = grid || ep_ <= 1;
  if (grad && own_rows) {
    p.packed = ep_phase(MoePhase::kBackwardSend, in, ms, ms.grad.view(), {}, false);
    ms.grad = {};
  } else {
    p.packed = std::move(own_rows ? ms.ep_out : ms.ep_in);
  }
  if (grad) {  // the forward's counts
    post_etp_rows(i);
    return;
  }
  // first every member's counts (the all-gather dispatcher: its copies by global expert; else the
  // rows by source and local expert), in place, member-major
  const std::vector<int64_t>& own = own_rows ? route.experts : route.recv_counts;
  const auto n = static_cast<int64_t>(own.size());
  std::vector<float> counts(at(members * n), 0.0f);
  for (int64_t k = 0; k < n; ++k) counts[at(me * n + k)] = static_cast<float>(own[at(k)]);
  p.extra = alloc_as(members * n, Format::kFp32);
  backend().upload(counts, p.extra.view());
  route.count_elems.assign(at(members), n);
  p.requests.push_back(runner_.comm_.iall_gather(ch, p.extra.view(), route.count_elems));
  p.then = [this, i] { post_etp_rows(i); };
}

// The gather's rows, by the members' counts (received by its first phase, or the forward's).
void Runner::Interpreter::post_etp_rows(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  EpRoute& route = ms.ep_routes[in.unit_begin];
  const int64_t h = prog_.model.hidden;
  const bool grid = in.group == Group::kExpertTpEp;
  const int64_t members = grid ? ep_ * etp_ : etp_, me = prog_.placement.stage_place_of(runner_.rank_) % members;
  if (!p.extra.empty()) {
    std::vector<float> counts(at(p.extra.size()));
    backend().download(p.extra.view(), counts);
    const int64_t n = static_cast<int64_t>(counts.size()) / members;
    route.gathered.assign(counts.size(), 0);
    route.peer_rows.assign(at(members), 0);
    for (std::size_t k = 0; k < counts.size(); ++k) {
      route.gathered[k] = static_cast<int64_t>(counts[k]);
      route.peer_rows[k / at(n)] += route.gathered[k];
    }
    route.peer_elems.assign(at(members), 0);
    for (int64_t j = 0; j < members; ++j) route.peer_elems[at(j)] = route.peer_rows[at(j)] * h;
    p.requests.clear();
    p.extra = {};
  }
  if (p.packed.size() != route.peer_elems[at(me)]) {
    throw ExecutorError(where(i) + ": has " + std::to_string(p.packed.size()) + " elements to gather, its counts say " +
                        std::to_string(route.peer_elems[at(me)]));
  }
  int64_t total = 0, before = 0;
  for (int64_t j = 0; j < members; ++j) {
    if (j < me) before += route.peer_elems[at(j)];
    total += route.peer_elems[at(j)];
  }
  p.buffer = alloc_as(total, store_);
  backend().copy(p.buffer.view().subspan(at(before), at(p.packed.size())), p.packed.view());
  p.bytes = p.packed.bytes();   // this rank's piece, in its storage format
  p.packed = {};
  add_messages(p.buffer.bytes());
  p.requests.push_back(runner_.comm_.iall_gather({in.group, Lane::kEp}, p.buffer.view(), route.peer_elems, store_));
}

void Runner::Interpreter::finish_etp(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  const bool grad = (in.flags & program::kFlagGrad) != 0;
  const bool grid = in.group == Group::kExpertTpEp;
  if (ep_role_[at(i)] == EpRole::kGather) {
    add_messages(-p.buffer.bytes());
    if (!grid) {
      ms.ep_in = std::move(p.buffer);
      return;
    }
    // the blocks of this rank's experts from every member, member-major: the received rows, with
    // their counts by (member, local expert) for the experts phase
    const int64_t E = prog_.model.moe.experts, local = E / ep_, e0 = prog_.placement.ep_index_of(runner_.rank_) * local;
    const int64_t members = ep_ * etp_, h = prog_.model.hidden;
    EpRoute& route = ms.ep_routes[in.unit_begin];
    std::vector<int64_t> mine(at(members * local));
    int64_t rows = 0;
    for (int64_t j = 0; j < members; ++j) {
      for (int64_t le = 0; le < local; ++le) rows += mine[at(j * local + le)] = route.gathered[at(j * E + e0 + le)];
    }
    Buffer received = alloc_as(rows * h, store_);
    int64_t to = 0;
    for (const Block& b : expert_blocks(route.gathered, route.peer_rows, E, e0, local)) {
      if (b.rows > 0) {
        backend().copy(received.view().subspan(at(to * h), at(b.rows * h)), p.buffer.view().subspan(at(b.at * h), at(b.rows * h)));
      }
      to += b.rows;
    }
    route.recv_counts = std::move(mine);
    p.buffer = {};
    ms.ep_in = std::move(received);
    return;
  }
  add_messages(-(p.buffer.bytes() + p.piece.bytes()));
  Buffer got = std::move(p.piece);
  p.buffer = {};
  if (ep_ > 1 && !grid) {  // to the combine (or the dispatch's gradient) all-to-all
    ms.ep_out = std::move(got);
  } else if (grad) {  // to the backward's last phase
    ms.ep_in = std::move(got);
  } else if (in.flags & program::kFlagRecompute) {
    ep_phase(MoePhase::kCombine, in, ms, got.view(), {}, false);  // the caches back; y was the forward's
  } else {
    ms.act = ep_phase(MoePhase::kCombine, in, ms, got.view(), {}, full_recompute_);
  }
}

}  // namespace stagecraft::executor
