// Internal to the runner: the state of one rank's instruction list while a step executes — the
// lanes' positions, the requests in flight, the micro-batches' activations, hierarchical and
// quantized ZeRO's copies (hpZ's secondary partition, qwZ's exact shards) — and one handler per
// instruction. runner.hpp describes the semantics; this header is not part of the interface.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "executor/backend.hpp"
#include "executor/errors.hpp"
#include "executor/index.hpp"
#include "executor/model/layers.hpp"
#include "executor/runner.hpp"
#include "executor/zero/qgz.hpp"

namespace stagecraft::executor {

// The three interpreter_*.cpp files index with these.
namespace interp {
using program::Group;
using program::Instr;
using program::Lane;
using program::Op;
inline std::size_t lane_index(Lane l) { return static_cast<std::size_t>(l); }
// A bucket's range cut into the framework's k collectives (program::collective_piece_range: the
// pieces the simulator times).
inline std::vector<Range> collective_pieces(Range r, int32_t k) {
  const int64_t n = r.size();
  const int32_t count = program::collective_piece_count(n, k);
  std::vector<Range> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    const auto [b, e] = program::collective_piece_range(n, k, i);
    out.push_back({r.begin + b, r.begin + e});
  }
  return out;
}
}  // namespace interp

class Runner::Interpreter {
 public:
  explicit Interpreter(Runner& runner);

  struct Outcome {
    double weighted_loss = 0;     // sum over this rank's micro-batches of loss / (m * dp)
    double grad_norm_sq = 0;      // global, of the unscaled gradients
    bool overflow = false;        // fp16: the scaled gradients overflowed, the optimizer step was skipped
    double compute_seconds = 0;
    // Each micro-batch loss this rank computed (the last stage's tp rank 0): (micro-batch, loss),
    // with cp > 1 its share, the mean over its tokens / cp (the cp ranks' shares sum to the loss).
    std::vector<std::pair<int32_t, double>> micro_losses;
  };
  Outcome run(int64_t step);

 private:
  // An issued instruction: its requests and the buffers (the backend's) they read or write.
  struct Pending {
    std::vector<Request> requests;
    int64_t start_ns = 0;
    int64_t end_ns = -1;          // set when the last request completed
    int64_t bytes = 0;            // moved by this rank
    Buffer buffer;                // message or gradient-bucket snapshot
    Buffer piece;                 // reduce-scatter result
    Buffer packed;                // ZeRO-3 persistent gradients of the bucket
    std::vector<double> norm;     // GradNormAllReduce (host)
    Buffer extra;                 // the vocabulary-parallel loss's rescaled sums
    std::function<void()> then;   // a next phase to post once every request completed
    Range range;                  // flat positions it works on
    std::vector<Range> parts;     // the positions of `range` a reduction moves, packed in that order in `buffer`
    Range coords;                 // ZeRO 1-2 under the split: the coordinates it keeps (reduce) or moves (gather)
    int64_t shard_at = 0;         // where `coords` of a reduction sit in the packed shard gradients
    // ZeRO++ (host memory): per collective piece (qwZ) or matrix (qgZ), what it sends and receives
    std::vector<QuantizedPayload> sent, received;
    bool tied_result = false;     // an embedding-group result waiting for its dp reduction
    bool snapshotted = false;     // `buffer` holds the gradients this reduction moves
  };

  // A MoE unit's dispatch on this rank: the rows it routed to each global expert, the rows it
  // received from each member for each local expert ([ep x E/ep]), and per member the rows sent
  // and received; its combine and backward reuse them.
  // With expert tensor parallelism (etp > 1) the rows the rank's experts take are those its etp
  // peers received too: `gathered` counts them by (peer, source, local expert), `peer_rows` each
  // peer's rows, and `count_elems` / `peer_elems` are the gathers' and scatters' per-member counts
  // (kept here: they must outlive the requests that read them).
  struct EpRoute {
    std::vector<int64_t> experts, recv_counts, sent_rows, recv_rows;
    std::vector<int64_t> gathered, peer_rows, count_elems, peer_elems;
  };

  // One micro-batch of one chunk on this rank, from its first forward to its last backward; its
  // units' caches are the backend's, under the same slot (backend.hpp).
  struct MicroState {
    bool active = false;
    bool has_batch = false;
    int64_t slot = 0;
    Batch batch;
    Buffer act;    // the running activation (forward), the chunk's output to send
    Buffer grad;   // the running gradient (backward), the chunk's input grad to send
    // context parallelism: what an attention pass's first cp collective delivered to its compute,
    // and what the compute leaves for the pass's last cp collective
    Buffer cp_in, cp_out;
    // expert parallelism: what an all-to-all delivered to a MoE pass's next phase, and what a phase
    // leaves for the next all-to-all; per MoE unit its dispatch's rows (EpRoute)
    Buffer ep_in, ep_out;
    std::map<int32_t, EpRoute> ep_routes;
  };

  // ---- the loop -------------------------------------------------------------------------------
  void reset(int64_t step);
  bool issue(program::Lane lane);
  bool deps_ready(int32_t i) const;
  void start(int32_t i);
  bool complete_ready();
  void poll();  // tests pending requests between units of a compute, without finishing them
  void finish(int32_t i);
  void record(int32_t i);
  void stalled() const;
  void check_step_end() const;
  int64_t now_ns() const { return runner_.tracer_.now_ns(); }

  // ---- instructions ---------------------------------------------------------------------------
  bool runs_inline(program::Op op) const;
  void run_inline(int32_t i);
  void issue_async(int32_t i);
  void forward(const program::Instr& in);
  void recompute(const program::Instr& in);
  void backward(const program::Instr& in, bool input_only);
  void backward_weight(const program::Instr& in);
  void optimizer(const program::Instr& in);
  void offload_copy(const program::Instr& in);
  void release_params(const program::Instr& in);
  void post_recv(int32_t i);
  void post_send(int32_t i);
  void post_gather(int32_t i);
  void post_dp_reduce(int32_t i);
  void post_tied_reduce(int32_t i);
  void post_grad_norm(int32_t i);
  void post_tp(int32_t i);
  void post_moe_counts(int32_t i);    // the balancing loss's counts over tp·cp (interpreter_comm.cpp)
  void finish_moe_counts(int32_t i);
  void post_loss_reduction(int32_t i, MicroState& ms);
  void finish_tp(int32_t i);
  void finish_loss_reduction(int32_t i, MicroState& ms);
  void finish_recv(int32_t i);
  void finish_dp_reduce(int32_t i);
  void finish_tied_reduce(int32_t i);
  void add_reduced_shard(Pending& p);

  // ---- context parallelism (interpreter_cp.cpp) -----------------------------------------------
  void plan_cp_passes();
  bool completes_grads(int32_t i) const;
  void post_cp(int32_t i);
  void finish_cp(int32_t i);
  Buffer cp_phase(CpPhase phase, const program::Instr& in, MicroState& ms, std::span<const float> data, bool flag);
  Buffer cp_attend(const program::Instr& in, int32_t unit, MicroState& ms);
  bool cp_attention(int32_t unit) const;
  Batch rank_batch(Batch whole) const;

  // ---- expert parallelism (interpreter_ep.cpp) -------------------------------------------------
  enum class EpRole : uint8_t { kNone, kDispatch, kCombine, kGradCombine, kGradDispatch, kGather, kScatter };
  void plan_ep_passes();
  bool ep_moe(int32_t unit) const;
  void ep_compute(const program::Instr& in, bool backward, bool input_only);
  void post_ep(int32_t i);
  void post_ep_rows(int32_t i);
  void finish_ep(int32_t i);
  void post_etp(int32_t i);
  void post_etp_rows(int32_t i);
  void finish_etp(int32_t i);
  const std::vector<int64_t>& expert_counts(const EpRoute& route) const;
  Buffer ep_run(MoePhase phase, const program::Instr& in, MicroState& ms, std::span<const float> data,
                std::span<int64_t> counts, bool flag);
  Buffer ep_phase(MoePhase phase, const program::Instr& in, MicroState& ms, std::span<const float> data,
                  std::span<int64_t> counts, bool flag);

  // ---- hierarchical and quantized ZeRO (interpreter_zero.cpp) ---------------------------------
  void plan_replica_reductions();
  std::vector<int64_t> gather_counts(const program::Instr& in, Range bucket, Range r) const;
  Range member_piece(const program::Instr& in, Range bucket, Range r, int64_t member) const;
  std::vector<Range> quantized_positions(const program::Instr& in, Range bucket, Range r, int64_t member) const;
  int64_t gather_position(const program::Instr& in) const;
  void place_secondary(int32_t i);
  void post_quantized_gather(int32_t i);
  void finish_quantized_gather(int32_t i);
  void post_hierarchical_gather(int32_t i);
  void finish_hierarchical_gather(int32_t i);
  void finish_gather(int32_t i);
  void ep_recompute(const program::Instr& in);
  void post_set_reduce(int32_t i);
  void post_set_gather(int32_t i);
  void finish_set_gather(int32_t i);
  void post_replica_reduce(int32_t i);
  void finish_replica_reduce(int32_t i);
  void post_all_to_all(int32_t i);
  void post_qgz_level(int32_t i);
  void finish_all_to_all(int32_t i);
  void finish_qgz_level(int32_t i);
  int32_t first_level_of(int32_t i) const;
  void keep_secondary(const program::Instr& in);
  void restore_stash(int32_t bucket);
  void restore_stashes();
  void drop_secondaries();

  // ---- helpers --------------------------------------------------------------------------------
  MicroState& micro(const program::Instr& in);
  void ensure_batch(MicroState& ms, const program::Instr& in);
  TokenBatch tokens(const MicroState& ms) const;
  // The tokens unit `unit` computes on: the micro-batch's, or for a MoE unit under sequence
  // parallelism the rank's 1/tp of them (it routes its own rows).
  TokenBatch unit_tokens(const MicroState& ms, int32_t unit) const;
  void maybe_retire(MicroState& ms);
  int64_t peer_rank(int16_t peer_stage) const;
  int32_t tag(const program::Instr& in, bool receiving) const;
  void take_snapshot(int32_t i);
  std::vector<Range> reduction_parts(const program::Instr& in) const;
  int64_t packed_at(const Pending& p, int64_t pos) const;
  void overlay_tied_result(int32_t i);
  float clip_scale_now();
  // Bias-based balancing (moe.router_bias): this rank's routed copies of every MoE layer of the
  // model (L_moe x E, zero on other stages' layers), taken from its units; and the biases moved by
  // the step's summed counts (routed_).
  std::vector<double> take_routed();
  void update_expert_biases();
  template <typename F>
  void for_each_stage_moe_unit(F&& f) const;
  void update_activation_memory();
  void add_packed_persistent_grads(const Pending& p);
  // Runs f(); an ExecutorError it throws is named after instruction i, unless it already is.
  template <typename F>
  void named_errors(int32_t i, F&& f) {
    try {
      f();
    } catch (const ExecutorError& e) {
      if (std::string(e.what()).starts_with(where(i))) throw;
      throw ExecutorError(where(i) + ": " + e.what());
    }
  }
  void add_messages(int64_t bytes) { runner_.memory_.add(MemoryKind::kBuffers, bytes); }
  Buffer alloc_as(int64_t elems, Format f) { return backend().alloc(elems).as(f); }
  Backend& backend() { return *runner_.backend_; }
  std::string where(int32_t i) const;

  Runner& runner_;
  const program::Program& prog_;
  const program::RoleProgram& role_;
  std::span<const program::Instr> instrs_;
  int64_t dp_index_ = 0, tp_index_ = 0;
  int64_t cp_ = 1, cp_index_ = 0, batch_index_ = 0;  // batch_index_: the batch replica (dp_index_ / cp)
  Dims dims_;                    // a micro-batch on this rank: its sequences, its tokens of each
  int64_t tokens_ = 0;           // tokens per micro-batch
  int64_t act_elems_ = 0;        // one micro-batch's activation (N x C)
  int64_t tp_ = 1;
  int64_t piece_elems_ = 0;      // what one tp rank sends of it (scatter-gather; all of it when tp = 1)
  float loss_weight_ = 1;        // 1 / (micro_batches * dp * cp)
  // precision.hpp: activations, their gradients and working parameters (messages, tp and cp
  // collectives, gathers) in `store_`; gradient reductions over dp and the embedding group in
  // `reduce_`; the loss statistics, the norms' gradients over tp and the gradient norm stay fp32
  Format store_ = Format::kFp32, reduce_ = Format::kFp32;
  double loss_scale_ = 1;        // fp16: this step's S (LossScaler), else 1
  bool overflow_ = false;        // fp16: this step's gradients are not finite: no optimizer step
  bool full_recompute_ = false;
  std::array<std::vector<int32_t>, program::kLaneCount> lanes_;
  std::vector<std::vector<int32_t>> snapshot_after_;  // per compute: the reductions depending on it
  // Replica all-reduces (kDpReplica): per instruction, the reduce-scatter it follows (-1: none);
  // whether it all-reduces that reduce-scatter's result alone (every micro-batch: the
  // reduce-scatter hands it its piece) or the shard accumulated over the step (once a step).
  std::vector<int32_t> replica_source_;
  std::vector<char> replica_piece_, hands_off_;
  // Context parallelism: per cp instruction the compute of its attention pass (-1: none) and
  // whether it delivers the compute's input (else it takes the compute's output); per compute its
  // last cp instruction. The data of a pass flows first -> compute -> last, which the executor adds
  // as dependencies where the Program lets the ring run beside the compute (p2p): data_deps_.
  std::vector<int32_t> cp_compute_, cp_last_;
  std::vector<char> cp_delivers_;
  std::vector<std::vector<int32_t>> data_deps_;
  // Expert parallelism: ep ranks (1: none), each instruction's role in its MoE pass.
  int64_t ep_ = 1, etp_ = 1;
  bool allgather_ = false;   // Megatron-Core's all-gather token dispatcher (plan moe_dispatcher)
  std::vector<EpRole> ep_role_;

  // per step
  int64_t step_ = 0;
  std::vector<char> satisfied_;  // dependency met (the instruction completed)
  std::vector<Pending> pending_;
  std::vector<int32_t> running_;
  std::array<std::size_t, program::kLaneCount> head_{};
  std::array<int32_t, program::kLaneCount> blocked_by_{};
  std::size_t done_ = 0;
  std::vector<MicroState> micro_;  // [chunk * micro_batches + mb]
  double weighted_loss_ = 0;
  std::vector<std::pair<int32_t, double>> micro_losses_;
  double norm_sq_ = 0;
  bool norm_known_ = false;
  std::vector<double> routed_;  // the step's routed copies per MoE layer and expert, summed (take_routed)
  double compute_seconds_ = 0;
  bool fault_armed_ = false;
  std::chrono::steady_clock::time_point last_progress_;
  // per parameter bucket: hpZ's secondary slice (made when the bucket is released after a gather,
  // dropped after the optimizer step), and while a qwZ gather's dequantized values stand in the
  // buffer, this rank's exact shard of it (put back at release, or before the optimizer step)
  std::vector<Buffer> secondary_, stash_;
};

}  // namespace stagecraft::executor
