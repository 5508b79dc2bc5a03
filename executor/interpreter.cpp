// The Program interpreter's loop: lanes, dependencies, requests in flight, dispatch (runner.hpp has
// the semantics; interpreter_compute.cpp and interpreter_comm.cpp the instructions).
#include "executor/interpreter.hpp"

#include <algorithm>
#include <string>
#include <thread>

#include "core/program/format.hpp"
#include "core/program/units.hpp"
#include "executor/errors.hpp"

namespace stagecraft::executor {

using namespace interp;  // the interpreter's own names (interpreter.hpp)

namespace {

// Communication lanes first, so requests a compute made ready are posted before the next one.
constexpr std::array<Lane, program::kLaneCount> kIssueOrder = {Lane::kPpRecv,   Lane::kPpSend,    Lane::kDpReduce,
                                                               Lane::kDpReplica, Lane::kDpGather, Lane::kTp,
                                                               Lane::kCp,        Lane::kEp,        Lane::kOffload,
                                                               Lane::kCompute};
static_assert(kIssueOrder.back() == Lane::kCompute, "every lane listed");


}  // namespace

Runner::Interpreter::Interpreter(Runner& runner)
    : runner_(runner), prog_(runner.prog_), role_(prog_.role_of(runner.rank_)), instrs_(role_.instrs) {
  const program::Placement& pl = prog_.placement;
  dp_index_ = pl.dp_index_of(runner.rank_);
  tp_index_ = pl.tp_index_of(runner.rank_);
  cp_ = pl.cp;
  cp_index_ = pl.cp_index_of(runner.rank_);
  batch_index_ = pl.batch_index_of(runner.rank_);
  dims_ = Dims{prog_.plan.micro_batch, prog_.model.seq_len / cp_, CpSplit{cp_, cp_index_, prog_.plan.cp_comm}};
  tokens_ = prog_.tokens_per_micro_batch();
  act_elems_ = tokens_ * prog_.model.hidden;
  tp_ = prog_.plan.tp;
  piece_elems_ = act_elems_ / tp_;
  // each of the dp·cp ranks of a stage has the mean loss over its tokens; the reductions sum them
  loss_weight_ = static_cast<float>(1.0 / static_cast<double>(prog_.plan.micro_batches * pl.dp));
  full_recompute_ = prog_.plan.recompute == spec::Recompute::kFull;
  store_ = runner.layout_.precision().store;
  reduce_ = runner.layout_.precision().reduce;
  for (int32_t i = 0; i < static_cast<int32_t>(instrs_.size()); ++i) lanes_[lane_index(instrs_[at(i)].lane)].push_back(i);
  plan_cp_passes();
  plan_ep_passes();
  snapshot_after_.resize(instrs_.size());
  for (int32_t i = 0; i < static_cast<int32_t>(instrs_.size()); ++i) {
    const Instr& in = instrs_[at(i)];
    const bool first_all_to_all = in.op == Op::kAllToAll && (in.flags & program::kFlagFirstLevel);
    if (in.op != Op::kReduceScatterGrads && in.op != Op::kAllReduceGrads && !first_all_to_all) continue;
    int32_t compute = -1;  // the latest instruction it depends on that completes gradients
    for (int32_t d : role_.deps_of(instrs_[at(i)])) {
      if (completes_grads(d)) compute = std::max(compute, d);
    }
    // a context-parallel attention backward's gradients are complete once its last cp collective is
    if (compute >= 0 && cp_last_[at(compute)] >= 0) compute = cp_last_[at(compute)];
    if (compute >= 0) snapshot_after_[at(compute)].push_back(i);
  }
  plan_replica_reductions();
  secondary_.resize(prog_.param_buckets.size());
  stash_.resize(prog_.param_buckets.size());
}

// ---- the loop -------------------------------------------------------------------------------------

void Runner::Interpreter::reset(int64_t step) {
  const std::size_t n = instrs_.size();
  step_ = step;
  satisfied_.assign(n, 0);
  pending_.clear();
  pending_.resize(n);
  running_.clear();
  head_.fill(0);
  blocked_by_.fill(-1);
  done_ = 0;
  micro_.clear();
  micro_.resize(at(prog_.plan.virtual_stages * prog_.plan.micro_batches));
  for (std::size_t s = 0; s < micro_.size(); ++s) backend().clear_slot(static_cast<int64_t>(s));
  restore_stashes();    // a step that ended (or failed) with a dequantized bucket gathered
  drop_secondaries();   // made by releases after the last optimizer step
  weighted_loss_ = 0;
  micro_losses_.clear();
  norm_sq_ = 0;
  norm_known_ = false;
  loss_scale_ = runner_.loss_scale();
  overflow_ = false;
  compute_seconds_ = 0;
  const RunnerOptions& o = runner_.options_;
  fault_armed_ = o.fault_rank == runner_.rank_ && o.fault_step == step &&
                 (o.fault_kind == FaultKind::kThrow || o.fault_kind == FaultKind::kKill);
  backend().zero_grads();
}

Runner::Interpreter::Outcome Runner::Interpreter::run(int64_t step) {
  reset(step);
  // a device's clock times the step's instructions where the backend has one (instr_clock.hpp)
  InstrClock* clock = runner_.tracer_.enabled() ? backend().clock() : nullptr;
  const std::size_t first_event = runner_.tracer_.events().size();
  if (clock != nullptr) clock->step_begin(now_ns());
  last_progress_ = std::chrono::steady_clock::now();
  while (done_ < instrs_.size()) {
    bool progressed = complete_ready();
    for (Lane lane : kIssueOrder) progressed = issue(lane) || progressed;
    if (progressed) {
      last_progress_ = std::chrono::steady_clock::now();
      continue;
    }
    stalled();
    std::this_thread::yield();
  }
  backend().finish_step();  // an asynchronous backend's queued work is the step's too
  if (clock != nullptr) runner_.tracer_.retime(first_event, clock->step_end());
  check_step_end();
  return {weighted_loss_, norm_sq_ / (loss_scale_ * loss_scale_), overflow_, compute_seconds_, micro_losses_};
}

// Starts the lane's next instructions while they are ready: at most one compute per round, and
// none behind a receive or collective still in flight on the lane.
bool Runner::Interpreter::issue(Lane lane) {
  const std::vector<int32_t>& list = lanes_[lane_index(lane)];
  std::size_t& head = head_[lane_index(lane)];
  bool any = false;
  while (head < list.size() && blocked_by_[lane_index(lane)] < 0) {
    const int32_t i = list[head];
    if (!deps_ready(i)) break;
    ++head;
    start(i);
    any = true;
    if (lane == Lane::kCompute) break;
  }
  return any;
}

bool Runner::Interpreter::deps_ready(int32_t i) const {
  for (int32_t d : role_.deps_of(instrs_[at(i)])) {
    if (!satisfied_[at(d)]) return false;
  }
  for (int32_t d : data_deps_[at(i)]) {
    if (!satisfied_[at(d)]) return false;
  }
  return true;
}

void Runner::Interpreter::start(int32_t i) {
  const Instr& in = instrs_[at(i)];
  pending_[at(i)].start_ns = now_ns();
  if (fault_armed_ && program::is_compute(in.op)) {
    fault_armed_ = false;
    if (runner_.options_.fault_kind == FaultKind::kKill) fault_kill(runner_.rank_, "in step " + std::to_string(step_ + 1));
    throw InjectedFault("injected fault in step " + std::to_string(step_ + 1) + " at " +
                        program::describe(prog_, role_, i) + " (STAGECRAFT_FAULT_RANK=" +
                        std::to_string(runner_.rank_) + ", STAGECRAFT_FAULT_STEP=" + std::to_string(step_ + 1) + ")");
  }
  if (runs_inline(in.op)) {
    run_inline(i);
    pending_[at(i)].end_ns = now_ns();
    finish(i);
    return;
  }
  runner_.comm_.label_next(role_.first_id + i);
  issue_async(i);
  running_.push_back(i);
  // A send does not hold its lane (sends are asynchronous), but an instruction depending on it
  // (overlap_p2p false: compute waits for the previous send) waits until it completed.
  if (!program::is_send(in.op)) blocked_by_[lane_index(in.lane)] = i;
}

void Runner::Interpreter::poll() {
  for (int32_t i : running_) {
    Pending& p = pending_[at(i)];
    bool all = true;
    for (Request& r : p.requests) {
      if (r.valid() && !runner_.comm_.test(r)) all = false;
    }
    if (all && p.then) {  // a multi-phase collective posts its next phase
      std::function<void()> next = std::move(p.then);
      p.then = nullptr;
      runner_.comm_.label_next(role_.first_id + i);
      next();
      continue;
    }
    if (all && p.end_ns < 0) p.end_ns = now_ns();
  }
}

bool Runner::Interpreter::complete_ready() {
  poll();
  bool any = false;
  for (std::size_t k = 0; k < running_.size();) {
    const int32_t i = running_[k];
    if (pending_[at(i)].end_ns < 0) {
      ++k;
      continue;
    }
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(k));
    finish(i);
    any = true;
  }
  return any;
}

void Runner::Interpreter::finish(int32_t i) {
  const Instr& in = instrs_[at(i)];
  runner_.memory_.attribute_to(role_.first_id + i);
  switch (in.op) {
    case Op::kRecvActivation:
    case Op::kRecvGrad: finish_recv(i); break;
    case Op::kSendActivation:
    case Op::kSendGrad:
      add_messages(-pending_[at(i)].buffer.bytes());
      pending_[at(i)].buffer = {};
      break;
    case Op::kReduceScatterGrads: finish_dp_reduce(i); break;
    case Op::kAllReduceGrads:
      if (in.group == Group::kEmbedding) {
        finish_tied_reduce(i);
      } else if (in.group == Group::kDpReplica) {
        finish_replica_reduce(i);
      } else {
        finish_dp_reduce(i);
      }
      break;
    case Op::kGatherParams: finish_gather(i); break;
    case Op::kAllGatherParams:
      if (runner_.layout_.split()) finish_set_gather(i);
      break;
    case Op::kAllToAll:
      if (in.group == Group::kCp) {
        finish_cp(i);
      } else if (in.group == Group::kEp || in.group == Group::kExpertTpEp) {   // flex: etp 1 (plan_unsupported)
        finish_ep(i);
      } else {
        finish_all_to_all(i);
      }
      break;
    case Op::kCpAllGather:
    case Op::kCpReduceScatter: finish_cp(i); break;
    case Op::kGradNormAllReduce:
      norm_sq_ = pending_[at(i)].norm.at(0);
      routed_.assign(pending_[at(i)].norm.begin() + 1, pending_[at(i)].norm.end());
      norm_known_ = true;
      break;
    case Op::kTpAllReduce:
    case Op::kTpAllGather:
    case Op::kTpReduceScatter:
      if (in.group == Group::kExpertTp || in.group == Group::kExpertTpEp) {
        finish_etp(i);
      } else if (in.group == Group::kTpCp) {
        finish_moe_counts(i);
      } else {
        finish_tp(i);
      }
      break;
    default: break;
  }
  satisfied_[at(i)] = 1;
  ++done_;
  if (blocked_by_[lane_index(in.lane)] == i) blocked_by_[lane_index(in.lane)] = -1;
  record(i);
  update_activation_memory();
}

void Runner::Interpreter::record(int32_t i) {
  if (!runner_.tracer_.enabled()) return;
  const Instr& in = instrs_[at(i)];
  const Pending& p = pending_[at(i)];
  trace::Event e;
  e.rank = runner_.rank_;
  e.lane = in.lane;
  e.op = in.op;
  e.instr = role_.first_id + i;
  e.start_ns = p.start_ns;
  e.end_ns = p.end_ns;
  e.mb = in.mb;
  e.stage = role_.stage;
  e.chunk = in.chunk;
  e.bytes = p.bytes;
  e.flops = in.flops;
  runner_.tracer_.record(e);
}

void Runner::Interpreter::stalled() const {
  const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress_).count();
  if (idle < runner_.options_.stall_timeout_s) return;
  std::string waiting;
  for (int32_t i : running_) waiting += "\n  in flight: " + where(i);
  for (Lane lane : kIssueOrder) {
    const std::vector<int32_t>& list = lanes_[lane_index(lane)];
    if (head_[lane_index(lane)] < list.size()) waiting += "\n  next: " + where(list[head_[lane_index(lane)]]);
  }
  const std::string verdict = runner_.comm_.ask_watchdog().text();
  throw ExecutorError("rank " + std::to_string(runner_.rank_) + ": step " + std::to_string(step_) + " made no progress for " +
                      std::to_string(static_cast<int>(idle)) + " s (the watchdog's deadline, run --watchdog)" +
                      (verdict.empty() ? "" : "; " + verdict) + waiting);
}

void Runner::Interpreter::check_step_end() const {
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].tied_result) {
      throw ExecutorError("rank " + std::to_string(runner_.rank_) + ": " + where(static_cast<int32_t>(i)) +
                          " left an embedding-group gradient no dp reduction took");
    }
  }
  for (const MicroState& ms : micro_) {
    if (ms.active && !prog_.forward_only) {  // a forward-only Program keeps them until the next step
      throw ExecutorError("rank " + std::to_string(runner_.rank_) + ": step " + std::to_string(step_) +
                          " ended with a micro-batch's activations still held (forward without backward)");
    }
  }
}

std::string Runner::Interpreter::where(int32_t i) const {
  return "rank " + std::to_string(runner_.rank_) + " " + program::describe(prog_, role_, i);
}

// ---- dispatch ---------------------------------------------------------------------------------------

bool Runner::Interpreter::runs_inline(Op op) const {
  return program::is_compute(op) || op == Op::kOptimizerStep || op == Op::kOffloadCopy || op == Op::kReleaseParams;
}

void Runner::Interpreter::run_inline(int32_t i) {
  const Instr& in = instrs_[at(i)];
  runner_.memory_.attribute_to(role_.first_id + i);
  backend().label_next(role_.first_id + i);
  const auto t0 = std::chrono::steady_clock::now();
  switch (in.op) {
    case Op::kForward: forward(in); break;
    case Op::kRecompute: recompute(in); break;
    case Op::kBackward: backward(in, false); break;
    case Op::kBackwardInput: backward(in, true); break;
    case Op::kBackwardWeight: backward_weight(in); break;
    case Op::kOptimizerStep: optimizer(in); break;
    case Op::kOffloadCopy: offload_copy(in); break;
    case Op::kReleaseParams: release_params(in); break;
    default: throw ExecutorError(where(i) + ": not an inline instruction");
  }
  backend().label_next(-1);
  if (program::is_compute(in.op)) {
    compute_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int32_t r : snapshot_after_[at(i)]) take_snapshot(r);
  }
}

void Runner::Interpreter::issue_async(int32_t i) {
  const Instr& in = instrs_[at(i)];
  runner_.memory_.attribute_to(role_.first_id + i);
  switch (in.op) {
    case Op::kRecvActivation:
    case Op::kRecvGrad: post_recv(i); return;
    case Op::kSendActivation:
    case Op::kSendGrad: post_send(i); return;
    case Op::kGatherParams:
    case Op::kAllGatherParams: post_gather(i); return;
    case Op::kReduceScatterGrads: post_dp_reduce(i); return;
    case Op::kAllReduceGrads:
      if (in.group == Group::kEmbedding) {
        post_tied_reduce(i);
      } else if (in.group == Group::kDpReplica) {
        post_replica_reduce(i);
      } else {
        post_dp_reduce(i);
      }
      return;
    case Op::kAllToAll:
      if (in.group == Group::kCp) {
        post_cp(i);
      } else if (in.group == Group::kEp || in.group == Group::kExpertTpEp) {   // flex: its members are the ep group's
        post_ep(i);
      } else {
        post_all_to_all(i);
      }
      return;
    case Op::kCpAllGather:
    case Op::kCpReduceScatter: post_cp(i); return;
    case Op::kGradNormAllReduce: post_grad_norm(i); return;
    case Op::kTpAllReduce:
    case Op::kTpAllGather:
    case Op::kTpReduceScatter:
      if (in.group == Group::kExpertTp || in.group == Group::kExpertTpEp) {
        post_etp(i);
      } else if (in.group == Group::kTpCp) {
        post_moe_counts(i);
      } else {
        post_tp(i);
      }
      return;
    default: throw ExecutorError(where(i) + ": not an asynchronous instruction");
  }
}

}  // namespace stagecraft::executor
