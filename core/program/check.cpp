#include "core/program/check.hpp"

#include <array>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/program/format.hpp"

namespace stagecraft::program {

namespace {

[[noreturn]] void fail(const Program& prog, int64_t rank, const RoleProgram& role, int32_t index,
                       const std::string& why) {
  throw ProgramError("program check: rank " + std::to_string(rank) + ", instruction " +
                     describe(prog, role, index) + ": " + why);
}

void check_local(const Program& prog, const RoleProgram& role) {
  const int64_t rank = role.ranks.empty() ? -1 : role.ranks.front();
  std::map<std::pair<int32_t, int32_t>, std::array<int, 4>> seen;  // (chunk, mb) -> F, B, Bi, W counts
  for (int32_t i = 0; i < static_cast<int32_t>(role.instrs.size()); ++i) {
    const Instr& in = role.instrs[i];
    for (int32_t d : role.deps_of(in)) {
      if (d < 0 || d >= i) fail(prog, rank, role, i, "depends on instruction index " + std::to_string(d) + ", not an earlier one");
    }
    if (!is_compute(in.op) || in.op == Op::kRecompute) continue;
    auto& c = seen[{in.chunk, in.mb}];
    const bool first_of_pass = i == 0 || role.instrs[i - 1].op != in.op || role.instrs[i - 1].mb != in.mb ||
                               role.instrs[i - 1].chunk != in.chunk;
    switch (in.op) {
      case Op::kForward:
        if (c[1] + c[2] > 0) fail(prog, rank, role, i, "forward after this micro-batch's backward");
        c[0] += first_of_pass && c[0] == 0 ? 1 : 0;
        break;
      case Op::kBackward:
      case Op::kBackwardInput:
        if (c[0] == 0) fail(prog, rank, role, i, "backward before this micro-batch's forward");
        c[in.op == Op::kBackward ? 1 : 2] = 1;
        break;
      default:
        if (c[2] == 0) fail(prog, rank, role, i, "weight gradients before this micro-batch's input gradients");
        c[3] = 1;
        break;
    }
  }
  for (const auto& [key, c] : seen) {
    if (!prog.forward_only && c[1] == 0 && (c[2] == 0 || c[3] == 0)) {
      throw ProgramError("program check: rank " + std::to_string(rank) + ": micro-batch " + std::to_string(key.second) +
                         " chunk " + std::to_string(key.first) + " runs forward but never completes its backward");
    }
  }
}

// Abstract execution of the step over a set of ranks.
class Executor {
 public:
  Executor(const Program& prog, bool quotient) : prog_(prog), quotient_(quotient) {
    const Placement& pl = prog.placement;
    if (quotient) {
      for (int64_t s = 0; s < pl.pp; ++s) ranks_.push_back(pl.rank(s, 0, 0));
    } else {
      for (int64_t r = 0; r < pl.world(); ++r) ranks_.push_back(r);
    }
    for (std::size_t i = 0; i < ranks_.size(); ++i) index_of_[ranks_[i]] = i;
    state_.resize(ranks_.size());
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      const RoleProgram& role = prog.role_of(ranks_[i]);
      State& st = state_[i];
      st.role = &role;
      st.done.assign(role.instrs.size(), 0);
      for (int32_t k = 0; k < static_cast<int32_t>(role.instrs.size()); ++k) {
        st.lanes[static_cast<std::size_t>(role.instrs[k].lane)].push_back(k);
      }
    }
  }

  void run();

 private:
  using MsgKey = std::tuple<int64_t, int64_t, bool, int32_t, int16_t, int16_t>;  // src, dst, grad?, mb, src/dst chunk
  struct Pending {
    int64_t bytes;
    std::size_t rank;
    int32_t index;
  };
  struct State {
    const RoleProgram* role = nullptr;
    std::array<std::vector<int32_t>, kLaneCount> lanes;
    std::array<std::size_t, kLaneCount> cursor{};
    std::vector<char> done;
    std::map<std::pair<int, int64_t>, int64_t> seq;  // group -> collectives completed
    std::set<int32_t> arrived;
  };

  std::vector<int64_t> members(Group g, int64_t rank) const;
  int64_t peer_rank(int64_t rank, const Instr& in) const;
  bool step(std::size_t r, int32_t k);
  bool collective(std::size_t r, int32_t k);
  void report_stuck() const;

  const Program& prog_;
  bool quotient_;
  std::vector<int64_t> ranks_;
  std::map<int64_t, std::size_t> index_of_;
  std::vector<State> state_;
  std::map<MsgKey, std::vector<Pending>> messages_;
  std::map<std::tuple<int, int64_t, int64_t>, std::vector<std::pair<std::size_t, int32_t>>> arrivals_;
};

std::vector<int64_t> Executor::members(Group g, int64_t rank) const {
  const Placement& pl = prog_.placement;
  if (!quotient_) return pl.group_members(g, rank);
  switch (g) {
    case Group::kEmbedding: return pl.pp > 1 ? std::vector<int64_t>{ranks_.front(), ranks_.back()} : std::vector<int64_t>{rank};
    case Group::kWorld: return ranks_;
    default: return {rank};  // tp and dp peers run this very list
  }
}

int64_t Executor::peer_rank(int64_t rank, const Instr& in) const {
  const Placement& pl = prog_.placement;
  return pl.rank(in.peer_stage, pl.dp_index_of(rank), pl.tp_index_of(rank));
}

bool Executor::collective(std::size_t r, int32_t k) {
  State& st = state_[r];
  const Instr& in = st.role->instrs[k];
  const std::vector<int64_t> group = members(in.group, ranks_[r]);
  const std::pair<int, int64_t> gkey{static_cast<int>(in.group), group.front()};
  const int64_t seq = st.seq[gkey];
  auto& list = arrivals_[{gkey.first, gkey.second, seq}];
  if (!st.arrived.count(k)) {
    st.arrived.insert(k);
    list.emplace_back(r, k);
  }
  if (list.size() < group.size()) return false;
  const Instr& first = state_[list.front().first].role->instrs[list.front().second];
  for (const auto& [mr, mk] : list) {
    const Instr& other = state_[mr].role->instrs[mk];
    const bool same = other.op == first.op && other.bytes == first.bytes && other.mb == first.mb &&
                      (!is_dp_group(in.group) || other.bucket == first.bucket);
    if (!same) {
      fail(prog_, ranks_[mr], *state_[mr].role, mk,
           "is collective number " + std::to_string(seq) + " of its " + to_string(in.group) + " group, but rank " +
               std::to_string(ranks_[list.front().first]) + " issues " +
               describe(prog_, *state_[list.front().first].role, list.front().second) + " there");
    }
  }
  for (const auto& [mr, mk] : list) {
    state_[mr].done[mk] = 1;
    ++state_[mr].seq[gkey];
  }
  list.clear();
  return true;
}

// Tries to run instruction k on rank r; false when it must wait.
bool Executor::step(std::size_t r, int32_t k) {
  State& st = state_[r];
  const Instr& in = st.role->instrs[k];
  if (st.done[k]) return true;
  for (int32_t d : st.role->deps_of(in)) {
    if (!st.done[d]) return false;
  }
  const int64_t me = ranks_[r];
  if (is_send(in.op)) {
    const int64_t peer = peer_rank(me, in);
    if (!index_of_.count(peer)) fail(prog_, me, *st.role, k, "sends to a rank outside the program");
    messages_[{me, peer, in.op == Op::kSendGrad, in.mb, in.chunk, in.peer_chunk}].push_back({in.bytes, r, k});
  } else if (is_recv(in.op)) {
    const int64_t peer = peer_rank(me, in);
    auto it = messages_.find({peer, me, in.op == Op::kRecvGrad, in.mb, in.peer_chunk, in.chunk});
    if (it == messages_.end() || it->second.empty()) return false;
    const Pending msg = it->second.front();
    if (msg.bytes != in.bytes) {
      fail(prog_, me, *st.role, k, "expects " + std::to_string(in.bytes) + " bytes but the matching send " +
                                       describe(prog_, *state_[msg.rank].role, msg.index) + " on rank " +
                                       std::to_string(peer) + " sends " + std::to_string(msg.bytes));
    }
    it->second.erase(it->second.begin());
  } else if (is_collective(in.op)) {
    return collective(r, k);
  }
  st.done[k] = 1;
  return true;
}

// Reports the instruction the deadlock is about: a lane head whose own dependencies are done (so
// it waits on another rank), or else the first stuck head.
void Executor::report_stuck() const {
  std::optional<std::pair<std::size_t, int32_t>> first, blocked;
  for (std::size_t r = 0; r < state_.size() && !blocked; ++r) {
    const State& st = state_[r];
    for (std::size_t lane = 0; lane < kLaneCount && !blocked; ++lane) {
      if (st.cursor[lane] >= st.lanes[lane].size()) continue;
      const int32_t k = st.lanes[lane][st.cursor[lane]];
      if (!first) first = {r, k};
      bool ready = true;
      for (int32_t d : st.role->deps_of(st.role->instrs[k])) ready = ready && st.done[d];
      if (ready) blocked = {r, k};
    }
  }
  if (!first) return;
  const auto [r, k] = blocked ? *blocked : *first;
  const Instr& in = state_[r].role->instrs[k];
  std::string why = "deadlock: never completes";
  if (is_recv(in.op)) why = "deadlock: waits for a send from rank " + std::to_string(peer_rank(ranks_[r], in)) + " that never comes";
  if (is_collective(in.op)) why = "deadlock: waits for the other members of its " + std::string(to_string(in.group)) + " group";
  fail(prog_, ranks_[r], *state_[r].role, k, why);
}

void Executor::run() {
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < state_.size(); ++r) {
      State& st = state_[r];
      for (std::size_t lane = 0; lane < kLaneCount; ++lane) {
        while (st.cursor[lane] < st.lanes[lane].size() && step(r, st.lanes[lane][st.cursor[lane]])) {
          ++st.cursor[lane];
          progress = true;
        }
      }
    }
  }
  report_stuck();
  for (const auto& [key, list] : messages_) {
    if (!list.empty()) {
      const Pending& m = list.front();
      fail(prog_, ranks_[m.rank], *state_[m.rank].role, m.index,
           "has no matching receive on rank " + std::to_string(std::get<1>(key)));
    }
  }
}

// Exact to check one representative per stage when every rank of a stage runs that stage's list.
bool stage_uniform(const Program& prog) {
  const Placement& pl = prog.placement;
  for (int64_t r = 0; r < pl.world(); ++r) {
    if (prog.rank_role[r] != prog.rank_role[pl.rank(pl.stage_of(r), 0, 0)]) return false;
  }
  return true;
}

}  // namespace

void check(const Program& prog) {
  if (static_cast<int64_t>(prog.rank_role.size()) != prog.placement.world()) {
    throw ProgramError("program check: rank_role has " + std::to_string(prog.rank_role.size()) + " entries for " +
                       std::to_string(prog.placement.world()) + " ranks");
  }
  for (const RoleProgram& role : prog.roles) check_local(prog, role);
  Executor(prog, stage_uniform(prog)).run();
  check_p2p_order(prog);
}

void check_p2p_order(const Program& prog) {
  const Placement& pl = prog.placement;
  struct Message {
    int32_t mb, from_chunk, to_chunk;
    int32_t index;  // the instruction, in its rank's list
    bool operator==(const Message& o) const { return mb == o.mb && from_chunk == o.from_chunk && to_chunk == o.to_chunk; }
  };
  using Key = std::tuple<int64_t, int64_t, bool>;  // sender, receiver, gradient
  std::map<Key, std::vector<Message>> sent, received;
  for (int64_t r = 0; r < pl.world(); ++r) {
    const RoleProgram& role = prog.role_of(r);
    for (int32_t i = 0; i < static_cast<int32_t>(role.instrs.size()); ++i) {  // a lane's order is list order
      const Instr& in = role.instrs[static_cast<std::size_t>(i)];
      if (!is_send(in.op) && !is_recv(in.op)) continue;
      const int64_t peer = pl.rank(in.peer_stage, pl.dp_index_of(r), pl.tp_index_of(r));
      const bool grad = in.op == Op::kSendGrad || in.op == Op::kRecvGrad;
      if (is_send(in.op)) {
        sent[{r, peer, grad}].push_back({in.mb, in.chunk, in.peer_chunk, i});
      } else {
        received[{peer, r, grad}].push_back({in.mb, in.peer_chunk, in.chunk, i});
      }
    }
  }
  for (const auto& [key, sends] : sent) {
    const auto& [from, to, grad] = key;
    const std::vector<Message>& recvs = received[key];
    for (std::size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k) {
      if (sends[k] == recvs[k]) continue;
      fail(prog, to, prog.role_of(to), recvs[k].index,
           "is " + std::string(grad ? "gradient" : "activation") + " receive number " + std::to_string(k + 1) +
               " from rank " + std::to_string(from) + ", whose send number " + std::to_string(k + 1) + " is " +
               describe(prog, prog.role_of(from), sends[k].index) +
               ": the messages between the two ranks are not received in the order they are sent");
    }
  }
}

}  // namespace stagecraft::program
