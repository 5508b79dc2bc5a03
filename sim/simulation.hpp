// Simulation: the Program rules on virtual time, for the simulated ranks (symmetry.hpp). Internal
// to the simulator (simulator.hpp describes the whole); it returns what each rank did, from
// which simulator.cpp reads the metrics.
//   * lanes and dependencies: an instruction starts when the previous instruction of its lane and
//     its explicit dependencies (the Program's RoleGraph) are done;
//   * compute, optimizer, offload copies: the compute model's time (models/compute.hpp), rounded
//     to whole ns; ReleaseParams takes no time;
//   * pipeline messages: the send moves its bytes (a flow on the route between the two GPUs, or
//     its contention-free time); the receive completes when the message has arrived and the
//     receive is posted;
//   * collectives: start when every simulated member of the group has issued them, then take
//     their collective-model time T (costs.hpp) or, for data-parallel ones on the shared network,
//     the flows of models/collective_flows.hpp;
//   * memory: memory_accounting.hpp's rules at each instruction's start and end;
//   * SMs shared with NCCL (shared network, GPU sm_count known): a data-parallel collective's
//     kernel runs one CTA per channel (NCCL src/enqueue.cc: grid = {channelCount}; large buffers
//     use every channel, the channel tuning only drops them below nChannels·nThreads·64 bytes), and
//     a GEMM's CTA cannot share an SM with it, so compute beside it runs on SMs − C of the SMs:
//     f = min(C, SMs)/SMs of its rate lost, C = nccl.channels. A compute-lane instruction that
//     overlaps a gather or reduction for Δ takes Δ·f/(1 − f) longer; per data-parallel lane
//     (gathers and reductions each add their own kernel). The overlap is taken with the
//     collective's contention-free end; when the collective starts after the compute did, the
//     extra time goes to the next compute-lane instruction. Off on the contention-free and free
//     networks, whose fast paths complete instructions out of time order (and whose step time
//     stays a lower bound). Tensor-parallel collectives run on the compute stream, not beside it.
//   * HBM shared with NCCL (the same switch): a collective between processes moves its data
//     through FIFO buffers in device memory — P2P_DIRECT, writing straight into the peer's
//     buffer, is taken only between GPUs of one process (NCCL src/transport/p2p.cc,
//     P2P_SAME_PID), and every framework here runs a process per GPU — so each byte a rank
//     receives is written into its FIFO (by the peer over NVLink, or by the NIC), read back and
//     written to the output, the read also feeding the next hop (src/device/prims_simple.h
//     recvCopySend; a reduction reads its own input for the sum instead of writing an output):
//     3 bytes of HBM traffic per bus byte, an HBM demand h = 3·S·F/(T·hbm_Bps) of the rate while
//     the collective runs (S·F its bus bytes, nccl-tests' F, T its contention-free time). The
//     compute kernels that stream at memory_efficiency e (work.hpp streaming_seconds) then get
//     e − h of the rate, at least half of e (the DRAM controller serves both streams): they take
//     g = min(e/(e − h), 2) − 1 longer, while the rest of the compute (GEMMs, attention, the
//     memory kernels bound per SM) loses its SMs as above. A compute-lane instruction whose
//     streaming share is c overlapping a collective for Δ takes Δ·((1 − c)·f/(1 − f) + c·g)
//     longer. Each lane's collective is charged apart (a gather and a reduction together demand
//     h₁ + h₂, charged as g(h₁) + g(h₂): a little less than g(h₁ + h₂)); they only run together
//     where the framework gives them a communicator each (spec/framework.hpp, Communicators).
// An instruction starts at the latest end among its predecessors, so the order in which
// finished instructions are processed does not matter: with the shared network they come off the
// time-ordered event queue (flows make durations depend on what runs at the same time); with a
// contention-free or free network every duration is known when an instruction starts, and
// instructions complete at once, off a stack (eager completion, a fast path).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"
#include "core/trace/trace.hpp"
#include "sim/chains.hpp"
#include "sim/costs.hpp"
#include "sim/engine/event_queue.hpp"
#include "sim/engine/intervals.hpp"
#include "sim/memory_accounting.hpp"
#include "sim/models/collective_flows.hpp"
#include "sim/models/compute.hpp"
#include "sim/network/flows.hpp"
#include "sim/network/topology.hpp"
#include "sim/simulator.hpp"

namespace stagecraft::sim {

// What one simulated rank did in the step.
struct RankRecord {
  int64_t rank = 0;
  int64_t last_end_ns = 0;
  std::vector<Interval> compute;                                    // compute lane busy, in order
  std::array<std::vector<Interval>, program::kTrafficClasses> traffic;  // tp, pp, dp lanes busy
  trace::MemorySample peak;                                         // the largest memory sample
  std::vector<trace::MemorySample> memory;                          // every sample, in time order, when tracing
  // per lane: time its instructions waited for other ranks — a collective from this rank's issue
  // to the last member's, a receive from its post to the message's arrival
  std::array<int64_t, program::kLaneCount> waited_ns{};
};

struct RunRecord {
  std::vector<RankRecord> ranks;
  std::vector<trace::Event> events;   // when recording a trace
  int64_t instructions = 0;           // instructions executed
};

class Simulation {
 public:
  Simulation(const program::Program& prog, const spec::Cluster& cluster, const SimOptions& options);
  RunRecord run();
  double peak_flops() const { return compute_.peak_flops(); }

 private:
  // A rank's view of one of its groups: who leads it, how many simulated members must arrive,
  // its cost group, and where its collective flow goes.
  bool every_rank_ = false;   // every rank simulated (else one replica per stage)
  struct GroupView {
    int64_t front = 0;
    int32_t needed = 0;
    int32_t cost_group = -1;
    // the last size asked for, by op, and its time (a group asks for few sizes, mostly one)
    std::array<std::pair<int64_t, int64_t>, program::kOpCount> last{};
    int64_t issued = 0;          // collectives issued on this group so far
    RingFlow ring;
    std::vector<LinkId> route;   // links to ring.successor
  };
  struct RankState {
    int64_t rank = 0;
    const program::RoleProgram* role = nullptr;
    const program::RoleGraph* graph = nullptr;
    const Chains* chains = nullptr;   // step time only: its list's chains (chains.hpp), when used
    // A chain shape's times once run (by the shape's first chain): each exit's end from the
    // chain's start, and its latest end.
    struct ChainTiming {
      bool known = false;
      int64_t last = 0;
      std::vector<std::pair<int32_t, int64_t>> exits;   // (member offset, end)
    };
    std::vector<ChainTiming> timing;
    std::vector<int16_t> waiting;
    std::vector<int64_t> ready;   // eager completion: the latest end among the predecessors that finished
    // A lane runs one instruction at a time, so its start time is all the state it needs.
    std::array<int64_t, program::kLaneCount> lane_start{};
    int64_t finished = 0, last_end_ns = 0;
    std::vector<uint8_t> done;                                        // per instruction: finished
    std::array<GroupView, program::kGroupCount> groups;               // by program::Group
    std::vector<Interval> compute;
    std::array<std::vector<Interval>, program::kTrafficClasses> traffic;
    trace::MemoryBytes static_mem;
    RankMemory memory;
    // Ranks this one stands for (itself included) that leave its node through its NIC: in the
    // one-replica mode their flows are not simulated, so each of its flows across nodes carries
    // that many copies' bytes at that many times the cap (1 when every rank runs).
    int64_t nic_copies = 1;
    int64_t node_copies = 1;   // ranks of its node it stands for, on any NIC
    // NCCL beside compute: the latest compute-lane interval and its streaming share c, each
    // data-parallel lane's latest collective (start, contention-free end, HBM demand h), and the
    // slowdown owed to the next compute-lane instruction.
    int64_t compute_begin_ns = 0, compute_end_ns = 0;
    double compute_stream = 0;
    struct DpKernel {
      int64_t begin_ns = 0, end_ns = 0;
      double hbm = 0;
    };
    std::array<DpKernel, 2> dp_comm{};   // [gather lane, reduce lane]
    int64_t sm_debt_ns = 0;
    double slow = 1;   // a straggler's compute: kernels take `slow` times their time (spec::Straggler)
    // Alone (SimOptions::alone), the pipeline's ends (Simulator::contention_free_stage_s): its first
    // activation (micro-batch 0, chunk 0) arrives no sooner than `fill_ns`, and each gradient it
    // sends from chunk 0 leaves `drain_ns` of backward on the stages before it; the latest such end.
    int64_t fill_ns = 0, drain_ns = 0, drain_end_ns = 0;
    std::array<int64_t, program::kLaneCount> waited_ns{};
  };
  struct Message {
    bool delivered = false;
    int64_t send_start_ns = 0;
    int64_t deliver_ns = 0;
    int32_t waiting_slot = -1, waiting_instr = -1;
    int64_t waiting_post_ns = 0;
  };
  struct Arrival {
    std::vector<std::pair<int32_t, int32_t>> members;   // (slot, instr)
    std::vector<int64_t> issued;                         // each member's issue time
    int64_t latest = 0;                                  // the latest issue time
  };
  enum class FlowKind { kSend, kCollective };
  struct FlowOwner {
    FlowKind kind;
    int32_t slot;
    int32_t instr;
    program::MessageKey message;
  };

  void add_rank(int64_t rank);
  // ns of a compute-lane instruction whose streaming share is `stream`, slowed by NCCL beside it
  int64_t compute_ns(RankState& r, int64_t t, int64_t ns, double stream);
  double beside_rate(double stream, double hbm) const;   // the slowdown per ns of overlap
  void share_core_links();
  void start(int32_t slot, int32_t k, int64_t t);
  int64_t compute_time_ns(RankState& r, const program::Instr& in, int64_t t);
  void run_chain(int32_t slot, int32_t first, int64_t t);
  void finish(int32_t slot, int32_t k, int64_t t);
  void account(RankState& r, const program::Instr& in, int32_t k, int64_t start_ns, int64_t t);
  void start_send(int32_t slot, int32_t k, int64_t t);
  void start_recv(int32_t slot, int32_t k, int64_t t);
  void arrive(int32_t slot, int32_t k, int64_t t);
  bool foldable(const RankState& r, int32_t k) const;
  void start_collective(std::span<const std::pair<int32_t, int32_t>> members, int64_t t);
  void on_flow(const FlowCompletion& c);
  int64_t collective_ns(RankState& r, const program::Instr& in);
  bool timed_alone(const program::Instr& in) const;
  void add_owner(FlowId id, const FlowOwner& owner);
  // Instruction k of rank `slot` ends at t: on the event queue, or on the eager stack.
  void schedule(int64_t t, int32_t slot, int32_t k) {
    if (eager_) {
      eager_stack_.push_back({t, slot, k});
    } else {
      queue_.push(t, slot, k);
    }
  }

  const program::Program& prog_;
  const spec::Cluster& cluster_;
  SimOptions options_;
  bool folding_ = true;
  bool eager_ = false;     // every duration known at start: complete in any order (a stack)
  bool beside_ = false;    // NCCL beside compute charged (shared network, a GPU's SM count known)
  double sm_share_ = 0;    // f/(1 − f) of the SM-sharing slowdown
  bool usage_ = true;      // memory and busy intervals (off: the step time only)
  Topology topology_;
  FlowNetwork net_;
  ComputeModel compute_;
  CostCache costs_;
  std::vector<program::UnitKind> unit_kinds_;  // with TP communication overlap: each unit's kind
  std::optional<MemoryRules> memory_rules_;   // with usage_
  std::vector<program::RoleGraph> graphs_;               // for lists lower() built no graph for
  std::vector<int64_t> chain_start_;                     // run_chain's scratch
  std::vector<RankState> ranks_;
  std::unordered_map<int64_t, int32_t> slot_of_;
  EventQueue queue_;
  struct Completion {
    int64_t time_ns;
    int32_t slot, instr;
  };
  std::vector<Completion> eager_stack_;
  std::unordered_map<program::MessageKey, Message, program::MessageKeyHash> messages_;
  std::map<std::tuple<int, int64_t, int64_t>, Arrival> arrivals_;
  std::vector<FlowOwner> flow_owner_;                    // by FlowId (ids count up from 0)
  std::vector<LinkId> path_;
  std::vector<trace::Event> events_;
  int64_t finished_ = 0;
  bool stopped_ = false;   // an instruction ended past SimOptions::stop_after_ns
};

}  // namespace stagecraft::sim
