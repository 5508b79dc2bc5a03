// Communicator: what the Program interpreter needs from a communication library, over float
// (and, for the gradient norm, double) buffers, and typed ones (int8 or fp32: ZeRO++'s quantized
// values and their scales) for the all-gathers and all-to-alls that move quantized data.
// Point-to-point messages between pipeline stages and collectives over the Program's groups (tp,
// dp, embedding, world and the data-parallel subgroups of hierarchical ZeRO, members from
// Placement::group_members in increasing world rank) are all non-blocking: they return a
// Request that the caller tests, so lanes overlap. Each collective runs on a Channel = (group,
// lane): one communicator per channel keeps the collectives of different lanes from interleaving
// differently on different ranks.
// Blocking "control" calls (barrier, metrics, trace and checkpoint bookkeeping) run on their
// own communicator and never mix with the Program's traffic.
//
// Implementations: LocalCommunicator (one rank, no MPI; comm/local.hpp) and MpiCommunicator
// (comm/mpi.hpp, built with STAGECRAFT_WITH_MPI). It is not a tensor library and it does not
// know the Program; the runner decides what to send where.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/program/instruction.hpp"
#include "executor/precision.hpp"

namespace stagecraft::executor {

// Where a collective runs: the group relative to this rank, and the lane that issues it.
struct Channel {
  program::Group group = program::Group::kWorld;
  program::Lane lane = program::Lane::kDpReduce;
};

// The element types of the typed collectives: int8 (qwZ's int8 values, qgZ's packed int4) and fp32
// (their scales).
enum class ElemType : uint8_t { kInt8, kFloat32 };

// A buffer of one ElemType, its elements counted in that type.
struct TypedSpan {
  void* data = nullptr;
  int64_t count = 0;
  ElemType type = ElemType::kFloat32;
  TypedSpan() = default;
  TypedSpan(std::span<int8_t> s) : data(s.data()), count(static_cast<int64_t>(s.size())), type(ElemType::kInt8) {}
  TypedSpan(std::span<float> s) : data(s.data()), count(static_cast<int64_t>(s.size())), type(ElemType::kFloat32) {}
  int64_t elem_bytes() const { return type == ElemType::kInt8 ? 1 : 4; }
  int64_t bytes() const { return count * elem_bytes(); }
};

// A pending non-blocking operation; spent once test() returned true or wait() returned.
struct Request {
  int64_t id = -1;
  bool valid() const { return id >= 0; }
};

// What the watchdog found (docs/reliability.md, "A stopped rank"): the world's ranks that did not
// answer a ping within `grace_s`. `asked` is false where the communicator has no watchdog (one
// process cannot wait on a peer).
struct WatchdogReport {
  bool asked = false;
  double grace_s = 0;
  std::vector<int64_t> silent;
  // "rank 1 stopped answering (...)", or that every rank answers: a slow or deadlocked job.
  std::string text() const;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // The Program instruction (its id: RoleProgram::first_id + index) that the next operations belong
  // to. A communicator that checks or reports on operations may use it; the others ignore it.
  virtual void label_next(int32_t /*instr*/) {}

  // The watchdog. A blocking wait of this communicator (wait(), the control plane) that sees no
  // progress for `seconds` throws CommError naming the ranks that stopped answering; while it
  // waits, and in test(), the communicator answers the other ranks' pings. A communicator that
  // cannot wait on a peer ignores it.
  virtual void set_progress_deadline(double /*seconds*/) {}
  // Pings every other rank and names those that do not answer within the grace period: asked by
  // a caller that saw no progress for the deadline (the interpreter's stall check).
  virtual WatchdogReport ask_watchdog() { return {}; }

  virtual int64_t rank() const = 0;  // in the world
  virtual int64_t size() const = 0;
  // This rank's index in `group` and the group's size (members in increasing world rank).
  virtual int64_t group_rank(program::Group group) const = 0;
  virtual int64_t group_size(program::Group group) const = 0;

  // `wire` (the float calls below): the format the values travel in, the Program's dtype for that
  // traffic (precision.hpp). kFp32 moves them as they are. A 16-bit wire moves 2 bytes an element:
  // every value sent is rounded to it (round_to), so the receiver, and in an all-gather every
  // member for every piece (its own included), holds round_to(wire, x); a sum over a 16-bit wire
  // adds the members' rounded values two at a time in fp32 and rounds each partial sum, as NCCL's
  // reduction kernels do for bf16 and fp16 (the order of the additions is the library's). Output
  // spans hold fp32 values either way.

  // Point to point with a pipeline peer (a world rank); `tag` tells messages apart. The
  // buffers must stay alive and untouched until the request completes.
  virtual Request isend(std::span<const float> data, int64_t peer, int32_t tag, Format wire = Format::kFp32) = 0;
  virtual Request irecv(std::span<float> data, int64_t peer, int32_t tag, Format wire = Format::kFp32) = 0;

  // In-place all-gather: `buffer` holds every member's piece in member order, counts[i]
  // elements for member i; this rank's piece is already in place.
  virtual Request iall_gather(Channel ch, std::span<float> buffer, std::span<const int64_t> counts,
                              Format wire = Format::kFp32) = 0;
  // Sum over members of `send` (sum(counts) elements), member i keeping piece i in `recv`.
  virtual Request ireduce_scatter(Channel ch, std::span<const float> send, std::span<float> recv,
                                  std::span<const int64_t> counts, Format wire = Format::kFp32) = 0;
  // In-place sum over the members.
  virtual Request iall_reduce(Channel ch, std::span<float> buffer, Format wire = Format::kFp32) = 0;
  virtual Request iall_reduce(Channel ch, std::span<double> buffer) = 0;
  // In-place maximum over the members (the vocabulary-parallel loss's row maxima).
  virtual Request iall_reduce_max(Channel ch, std::span<float> buffer) = 0;
  // In-place all-gather of typed elements, as iall_gather.
  virtual Request iall_gather_typed(Channel ch, TypedSpan buffer, std::span<const int64_t> counts) = 0;
  // All-to-all of typed elements: send_counts[i] elements of `send` (consecutive, member order) go
  // to member i, recv_counts[i] elements from member i land in `recv` (consecutive, member order).
  // Both spans have the same type and must stay untouched until the request completes.
  virtual Request iall_to_all(Channel ch, TypedSpan send, std::span<const int64_t> send_counts, TypedSpan recv,
                              std::span<const int64_t> recv_counts) = 0;

  // True when `r` completed (it is then spent). Drives progress of every pending request.
  virtual bool test(Request& r) = 0;
  virtual void wait(Request& r) = 0;

  // ---- control plane: blocking, over the whole world ------------------------------------------
  virtual void barrier() = 0;
  virtual std::vector<int64_t> all_gather(int64_t value) = 0;
  virtual double all_reduce_sum(double value) = 0;
  virtual double all_reduce_max(double value) = 0;
  // Every rank's blob at rank 0 (indexed by rank); other ranks get an empty vector.
  virtual std::vector<std::string> gather_to_root(const std::string& blob) = 0;
  // Rank 0's blob on every rank.
  virtual std::string broadcast_from_root(const std::string& blob) = 0;
};

// The class of a point-to-point message, its tag's lowest bit: 0 activations, 1 gradients
// (Interpreter::tag). A transport without tags (NCCL) matches a receive with the peer's next send
// of the same class, one communicator per (sender, receiver, class): program::check_p2p_order.
inline int p2p_class(int32_t tag) { return tag & 1; }

// Values that ranks hold at some of `n` slots, assembled on every rank: slot i holds the sum of
// the values ranks gave for i (NaN where none did). Collective. Throws CommError for a slot outside [0, n).
std::vector<double> all_gather_slots(Communicator& comm, const std::vector<std::pair<int64_t, double>>& mine, int64_t n);

}  // namespace stagecraft::executor
