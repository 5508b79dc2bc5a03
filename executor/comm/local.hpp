// LocalCommunicator: the world of one rank, without MPI. Collectives over a group of one are
// copies or nothing; a message sent to oneself is delivered to the matching receive (same
// tag, in order), as MPI would. A 16-bit wire rounds what it moves as the real one would: a
// message and an all-gather's buffer hold round_to(wire, x), a sum over one member is its one
// value rounded; a message's wire must be its receive's (a receive of another format throws, as
// the message's size would not match under MPI). It lets the Program interpreter run and be tested in a plain
// process (single-rank plans: pp = dp = tp = 1). Not a simulator of several ranks.
#pragma once

#include <deque>
#include <map>
#include <vector>

#include "executor/comm/communicator.hpp"

namespace stagecraft::executor {

class LocalCommunicator final : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  int64_t group_rank(program::Group) const override { return 0; }
  int64_t group_size(program::Group) const override { return 1; }

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

  void barrier() override {}
  std::vector<int64_t> all_gather(int64_t value) override { return {value}; }
  double all_reduce_sum(double value) override { return value; }
  double all_reduce_max(double value) override { return value; }
  std::vector<std::string> gather_to_root(const std::string& blob) override { return {blob}; }
  std::string broadcast_from_root(const std::string& blob) override { return blob; }

 private:
  struct PendingRecv {
    std::span<float> data;
    int32_t tag = 0;
    Format wire = Format::kFp32;
  };
  struct Message {
    std::vector<float> values;  // rounded to `wire` when sent
    Format wire = Format::kFp32;
  };
  Request done();
  void check_peer(int64_t peer) const;
  static void check_counts(std::span<const int64_t> counts, std::size_t elems, const char* what);
  bool deliver(PendingRecv& r);

  int64_t next_id_ = 0;
  std::map<int32_t, std::deque<Message>> mailbox_;            // tag -> messages sent to self
  std::map<int64_t, PendingRecv> recvs_;                      // request id -> waiting receive
};

}  // namespace stagecraft::executor
