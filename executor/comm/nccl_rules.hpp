// NcclRulesCommunicator: runs the interpreter as an NCCL transport would, over another
// communicator (MPI in the tests), and fails at the first thing NCCL would not do as MPI did.
// MPI matches a message by its tag and lets a rank's non-blocking operations complete in any
// order, so a run over MPI can pass where an NCCL run would mix up data or hang. NCCL's rules
// (NCCL user guide, "Communicators", "Group calls", "Point-to-point communication"; CUDA stream
// semantics):
//  1. Collectives of one communicator match by position: every member must issue the same
//     sequence (kind, datatype, counts); the datatype is a typed collective's element type (int8,
//     fp32) or a float collective's wire format (fp32, bf16, fp16), as ncclDataType_t. The
//     executor gives each Channel (group, lane) its own communicator, so the rule is checked per
//     channel: before a collective's data moves, its
//     signature (kind, datatype, position, every member's counts, rank, instruction) is all-gathered
//     over the same channel of a second communicator, `shadow`, and compared. The data collective is
//     posted only when all members agree, so a mismatch never reaches the data communicator.
//     For an all-to-all the counts must also pair up: member i's send count to j is member j's
//     receive count from i.
//  2. One stream per lane: the operations a lane issues (its collectives, the pp-send lane's sends,
//     the pp-recv lane's receives) complete in the order they were issued, each after the one
//     before it, as kernels on one CUDA stream do; test() says done only then.
//  3. Point-to-point without tags: a receive takes the next message the peer sent on the
//     communicator, one communicator per (sender, receiver, class), the class being the tag's
//     lowest bit (0: activations, 1: gradients; p2p_class). Each send carries its signature (per-
//     class position, element count, tag, instruction, wire format) ahead on `shadow`; the receive compares it
//     with its own before accepting, so a message taken out of order is named, not silently
//     delivered by tag.
//  4. Rendezvous: an NCCL send does not complete before its receive is running (its data goes
//     through the receiver's buffers). A send is done here only once the receiver has matched its
//     signature and acknowledged it. This is stricter than NCCL for messages smaller than its
//     buffers, never looser, so an order that completes here completes under NCCL.
//  No call is grouped (ncclGroupStart/End): each NCCL communicator carries the operations of one
//  stream on each rank, so no two operations must be launched together to make progress — the
//  case group calls exist for.
// A violation throws NcclRuleError naming both ranks' instructions (through `describe`); a
// receive that found a mismatch also tells the sender, which throws too, so neither waits.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "executor/comm/communicator.hpp"
#include "executor/comm/forwarding.hpp"
#include "executor/errors.hpp"

namespace stagecraft::executor {

class NcclRuleError : public CommError {
 public:
  using CommError::CommError;
};

struct NcclRulesOptions {
  // Names instruction `instr` (its Program id) of world rank `rank`; empty: "instruction <id>".
  std::function<std::string(int64_t rank, int32_t instr)> describe;
  double wait_deadline_s = 60;  // wait() on one request gives up (NcclRuleError) after this long
};

class NcclRulesCommunicator final : public ForwardingCommunicator {
 public:
  // `data` moves the data, `shadow` the signatures and acknowledgements: two communicators over the
  // same placement (its channels and point-to-point), used by nothing else.
  NcclRulesCommunicator(Communicator& data, Communicator& shadow, NcclRulesOptions options = {});
  ~NcclRulesCommunicator() override;

  int64_t collectives_checked() const { return collectives_checked_; }
  int64_t messages_checked() const { return messages_checked_; }

  // The control plane, ranks and groups go to `data` as they are.
  void label_next(int32_t instr) override { instr_ = instr; }

  Request isend(std::span<const float> data, int64_t peer, int32_t tag, Format wire = Format::kFp32) override;
  Request irecv(std::span<float> data, int64_t peer, int32_t tag, Format wire = Format::kFp32) override;
  Request iall_gather(Channel ch, std::span<float> buffer, std::span<const int64_t> counts,
                      Format wire = Format::kFp32) override;
  Request ireduce_scatter(Channel ch, std::span<const float> send, std::span<float> recv,
                          std::span<const int64_t> counts, Format wire = Format::kFp32) override;
  Request iall_reduce(Channel ch, std::span<float> buffer, Format wire = Format::kFp32) override;
  Request iall_reduce(Channel ch, std::span<double> buffer) override;
  Request iall_reduce_max(Channel ch, std::span<float> buffer) override;
  Request iall_gather_typed(Channel ch, TypedSpan buffer, std::span<const int64_t> counts) override;
  Request iall_to_all(Channel ch, TypedSpan send, std::span<const int64_t> send_counts, TypedSpan recv,
                      std::span<const int64_t> recv_counts) override;
  bool test(Request& r) override;
  void wait(Request& r) override;

  enum class Kind : uint8_t { kAllGather, kReduceScatter, kAllReduce, kAllReduceDouble, kAllReduceMax,
                              kAllGatherTyped, kAllToAll, kSend, kRecv };

 private:
  struct Op;
  Request add_collective(Channel ch, Kind kind, ElemType type, Format wire, std::vector<int64_t> send_counts,
                         std::vector<int64_t> recv_counts, std::function<Request()> post);
  Request add(std::unique_ptr<Op> op, int stream);
  std::unique_ptr<Op> message(Kind kind, int64_t peer, int32_t tag, std::size_t count, Format wire);
  void progress(Op& op);
  void progress_collective(Op& op);
  void progress_send(Op& op);
  void progress_recv(Op& op);
  void check_signatures(const Op& op) const;
  std::string describe(int64_t rank, int32_t instr) const;
  std::string what(const Op& op) const;
  bool stream_done_through(int stream, int64_t id);

  Communicator& data_;  // inner_
  Communicator& shadow_;
  NcclRulesOptions options_;
  int32_t instr_ = -1;
  std::vector<std::unique_ptr<Op>> ops_;                         // by request id; null once spent
  std::map<int, std::deque<int64_t>> streams_;                   // lane -> its unfinished ops, in issue order
  std::map<std::pair<program::Group, program::Lane>, int64_t> collective_seq_;
  std::map<std::tuple<int64_t, int, bool>, int64_t> p2p_seq_;   // (peer, class, sending) -> messages so far
  int64_t collectives_checked_ = 0, messages_checked_ = 0;
};

}  // namespace stagecraft::executor
