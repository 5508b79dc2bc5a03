// The Program interpreter's context parallelism (docs/program.md, "Context parallelism"): each
// rank holds its load-balanced chunk pair of every sequence (ops::cp_positions), and an attention
// unit's pass runs in the phases its cp collectives separate (model/layers.hpp, LayerT::cp_*):
//   pass          first cp collective (posted)          compute            last cp collective (finished)
//   forward       project x; K/V gathered (a2a: Q|K|V)  attend             a2a: the output back, out-projection
//   recompute     the same from the kept input          attend             a2a: the same, result dropped
//   backward      dy; K/V gathered (a2a: d(out))        attend backward    dK/dV reduce-scattered (a2a:
//                                                                          dQ|dK|dV back), then dx
// So a projection (a backward's out-projection input gradient under a2a) runs when its collective
// is posted and the unit's last linear layers when the last one finishes: the trace times them on
// the cp lane, and compute_seconds counts them. p2p's ring runs beside the compute in the Program
// (the simulator overlaps it, as Transformer Engine does block by block); here the compute waits
// for the whole gather and the reduce-scatter for the compute (data_deps_), since the host
// attention is one call, not a loop over arriving K/V blocks; and what depends on a pass's
// compute waits for its last collective, which completes it.
#include <chrono>
#include <map>
#include <string>
#include <tuple>

#include "core/program/units.hpp"
#include "executor/errors.hpp"
#include "executor/interpreter.hpp"

namespace stagecraft::executor {

using namespace interp;  // the interpreter's own names (interpreter.hpp)

namespace {
// 0 forward, 1 recompute, 2 backward: the pass a compute runs, or a cp collective serves (its flags).
int pass_of_compute(Op op) { return op == Op::kForward ? 0 : op == Op::kRecompute ? 1 : 2; }
int pass_of_collective(const Instr& in) {
  return (in.flags & program::kFlagGrad) ? 2 : (in.flags & program::kFlagRecompute) ? 1 : 0;
}
}  // namespace

bool Runner::Interpreter::cp_attention(int32_t unit) const {
  return cp_ > 1 && unit_kind(prog_.model, unit) == UnitKind::kAttention;
}

// Each attention pass's cp collectives, found by (chunk, micro-batch, unit, pass): the first
// delivers the compute's input, a second takes its output.
void Runner::Interpreter::plan_cp_passes() {
  const std::size_t n = instrs_.size();
  cp_compute_.assign(n, -1);
  cp_last_.assign(n, -1);
  cp_delivers_.assign(n, 0);
  data_deps_.assign(n, {});
  if (cp_ <= 1) return;
  std::map<std::tuple<int32_t, int32_t, int32_t, int>, std::vector<int32_t>> by_pass;
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) {
    const Instr& in = instrs_[at(i)];
    if (in.lane == Lane::kCp) by_pass[{in.chunk, in.mb, in.unit_begin, pass_of_collective(in)}].push_back(i);
  }
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) {
    const Instr& in = instrs_[at(i)];
    if (!program::is_compute(in.op) || in.op == Op::kBackwardWeight || !cp_attention(in.unit_begin)) continue;
    if (in.unit_end != in.unit_begin + 1) {
      throw ExecutorError(where(i) + ": a context-parallel attention pass shares its instruction with other units");
    }
    const auto it = by_pass.find({in.chunk, in.mb, in.unit_begin, pass_of_compute(in.op)});
    const std::vector<int32_t> none;
    const std::vector<int32_t>& list = it == by_pass.end() ? none : it->second;
    const bool a2a = prog_.plan.cp_comm == spec::CpComm::kA2a, backward = pass_of_compute(in.op) == 2;
    const Op first = a2a ? Op::kAllToAll : Op::kCpAllGather, last = a2a ? Op::kAllToAll : Op::kCpReduceScatter;
    const std::size_t want = a2a || backward ? 2 : 1;
    if (list.size() != want || instrs_[at(list[0])].op != first || (want == 2 && instrs_[at(list[1])].op != last)) {
      throw ExecutorError(where(i) + ": expected its " + std::to_string(want) + " context-parallel collective(s) (" +
                          program::to_string(first) + (want == 2 ? std::string(", ") + program::to_string(last) : "") +
                          "), the Program has " + std::to_string(list.size()));
    }
    cp_compute_[at(list[0])] = i;
    cp_delivers_[at(list[0])] = 1;
    data_deps_[at(i)].push_back(list[0]);
    if (want == 2) {
      cp_last_[at(i)] = list[1];
      cp_compute_[at(list[1])] = i;
      data_deps_[at(list[1])].push_back(i);
    }
  }
  for (const auto& [key, list] : by_pass) {
    for (int32_t i : list) {
      if (cp_compute_[at(i)] < 0) throw ExecutorError(where(i) + ": a context-parallel collective of no attention pass");
    }
  }
  // A pass's results exist once its last phase ran: what depends on its compute waits for its last
  // cp collective too (p2p's dK/dV reduce runs beside the compute in the Program, so a reduction or
  // release of the unit's gradients or parameters may depend on the compute alone).
  for (int32_t j = 0; j < static_cast<int32_t>(n); ++j) {
    for (int32_t d : role_.deps_of(instrs_[at(j)])) {
      const int32_t last = cp_last_[at(d)];
      if (last >= 0 && last != j) data_deps_[at(j)].push_back(last);
    }
  }
}

// Whether instruction d completes gradients a reduction moves: a compute, a backward tp collective
// (it finishes the input gradient and the norm's), a backward's last cp collective.
bool Runner::Interpreter::completes_grads(int32_t d) const {
  const Instr& dep = instrs_[at(d)];
  if (program::is_compute(dep.op)) return true;
  if (dep.lane == Lane::kTp) return (dep.flags & program::kFlagGrad) != 0;
  return dep.lane == Lane::kCp && (dep.flags & program::kFlagGrad) && cp_compute_[at(d)] >= 0 && !cp_delivers_[at(d)];
}

// The rank's tokens of each sequence, in its order.
Batch Runner::Interpreter::rank_batch(Batch whole) const {
  if (cp_ == 1) return whole;
  const std::vector<int64_t> pos = dims_.positions();
  Batch b;
  b.sequences = whole.sequences;
  b.seq = dims_.seq;
  for (int64_t s = 0; s < whole.sequences; ++s) {
    for (int64_t p : pos) {
      b.inputs.push_back(whole.inputs[at(s * whole.seq + p)]);
      b.targets.push_back(whole.targets[at(s * whole.seq + p)]);
    }
  }
  return b;
}

// The attention core of a forward or recompute pass at its compute, on what the first cp
// collective delivered: y for the gather variants; a2a leaves the output for the collective
// after it (ms.cp_out) and returns nothing.
Buffer Runner::Interpreter::cp_attend(const Instr& in, int32_t unit, MicroState& ms) {
  Buffer out = backend().cp_attention(CpPhase::kAttend, in.chunk, unit, ms.slot, dims_, ms.cp_in.view(), false).as(store_);
  ms.cp_in = {};
  if (prog_.plan.cp_comm != spec::CpComm::kA2a) return out;
  ms.cp_out = std::move(out);
  return {};
}

// A phase on the backend, its time counted as compute.
Buffer Runner::Interpreter::cp_phase(CpPhase phase, const Instr& in, MicroState& ms, std::span<const float> data, bool flag) {
  const auto t0 = std::chrono::steady_clock::now();
  Buffer out = backend().cp_attention(phase, in.chunk, in.unit_begin, ms.slot, dims_, data, flag).as(store_);
  compute_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void Runner::Interpreter::post_cp(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  const Instr& pass = instrs_[at(cp_compute_[at(i)])];
  Buffer send;
  if (!cp_delivers_[at(i)]) {
    send = std::move(ms.cp_out);
  } else if (pass.op == Op::kForward) {
    send = cp_phase(CpPhase::kProject, in, ms, ms.act.view(), full_recompute_);
    ms.act = {};
  } else if (pass.op == Op::kRecompute) {
    send = cp_phase(CpPhase::kProject, in, ms, {}, false);
  } else {
    send = cp_phase(CpPhase::kBackwardSend, in, ms, ms.grad.view(), false);
    ms.grad = {};
  }
  if (send.empty()) throw ExecutorError(where(i) + ": its attention pass left nothing to send");
  const Channel ch{Group::kCp, Lane::kCp};
  const int64_t piece = in.op == Op::kCpAllGather ? send.size() : send.size() / cp_;
  const std::vector<int64_t> counts(at(cp_), piece);
  if (in.op == Op::kCpAllGather) {  // this rank's block in place, the others' around it
    p.buffer = alloc_as(cp_ * piece, store_);
    backend().copy(p.buffer.view().subspan(at(cp_index_ * piece), at(piece)), send.view());
    p.requests.push_back(runner_.comm_.iall_gather(ch, p.buffer.view(), counts, store_));
  } else if (in.op == Op::kCpReduceScatter) {
    p.buffer = std::move(send);
    p.piece = alloc_as(piece, store_);
    p.requests.push_back(runner_.comm_.ireduce_scatter(ch, p.buffer.view(), p.piece.view(), counts, store_));
  } else {  // the values are the storage format's already; MPI's all-to-all moves them as fp32
    p.buffer = std::move(send);
    p.piece = alloc_as(p.buffer.size(), store_);
    p.requests.push_back(runner_.comm_.iall_to_all(ch, p.buffer.view(), counts, p.piece.view(), counts));
  }
  // what the Program says it moves (nccl-tests' S: the gathered output, the reduced or sent input)
  p.bytes = p.buffer.bytes();
  if (p.bytes != in.bytes) {
    throw ExecutorError(where(i) + ": moves " + std::to_string(p.bytes) + " bytes, the Program says " + std::to_string(in.bytes));
  }
  add_messages(p.buffer.bytes() + p.piece.bytes());
}

void Runner::Interpreter::finish_cp(int32_t i) {
  const Instr& in = instrs_[at(i)];
  Pending& p = pending_[at(i)];
  MicroState& ms = micro(in);
  const Instr& pass = instrs_[at(cp_compute_[at(i)])];
  add_messages(-(p.buffer.bytes() + p.piece.bytes()));
  Buffer got = std::move(in.op == Op::kCpAllGather ? p.buffer : p.piece);
  p.buffer = {};
  p.piece = {};
  if (cp_delivers_[at(i)]) {
    ms.cp_in = std::move(got);
    return;
  }
  if (pass.op == Op::kForward) {
    ms.act = cp_phase(CpPhase::kFinishForward, in, ms, got.view(), false);
  } else if (pass.op == Op::kRecompute) {
    cp_phase(CpPhase::kFinishForward, in, ms, got.view(), false);  // the cache refilled; y was the forward's
  } else {
    ms.grad = cp_phase(CpPhase::kBackwardFinish, in, ms, got.view(), pass.op == Op::kBackwardInput);
    for (int32_t r : snapshot_after_[at(i)]) take_snapshot(r);
    maybe_retire(ms);
  }
}

}  // namespace stagecraft::executor
