// ForwardingCommunicator: passes every call on to another communicator. A decorator (the NCCL
// rules' check, a test's counting or reordering) derives from it and overrides what it changes.
#pragma once

#include "executor/comm/communicator.hpp"

namespace stagecraft::executor {

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator& inner) : inner_(inner) {}

  void label_next(int32_t instr) override { inner_.label_next(instr); }
  void set_progress_deadline(double seconds) override { inner_.set_progress_deadline(seconds); }
  WatchdogReport ask_watchdog() override { return inner_.ask_watchdog(); }
  int64_t rank() const override { return inner_.rank(); }
  int64_t size() const override { return inner_.size(); }
  int64_t group_rank(program::Group g) const override { return inner_.group_rank(g); }
  int64_t group_size(program::Group g) const override { return inner_.group_size(g); }
  Request isend(std::span<const float> d, int64_t peer, int32_t tag, Format wire = Format::kFp32) override {
    return inner_.isend(d, peer, tag, wire);
  }
  Request irecv(std::span<float> d, int64_t peer, int32_t tag, Format wire = Format::kFp32) override {
    return inner_.irecv(d, peer, tag, wire);
  }
  Request iall_gather(Channel ch, std::span<float> b, std::span<const int64_t> counts,
                      Format wire = Format::kFp32) override {
    return inner_.iall_gather(ch, b, counts, wire);
  }
  Request ireduce_scatter(Channel ch, std::span<const float> send, std::span<float> recv,
                          std::span<const int64_t> counts, Format wire = Format::kFp32) override {
    return inner_.ireduce_scatter(ch, send, recv, counts, wire);
  }
  Request iall_reduce(Channel ch, std::span<float> b, Format wire = Format::kFp32) override {
    return inner_.iall_reduce(ch, b, wire);
  }
  Request iall_reduce(Channel ch, std::span<double> b) override { return inner_.iall_reduce(ch, b); }
  Request iall_reduce_max(Channel ch, std::span<float> b) override { return inner_.iall_reduce_max(ch, b); }
  Request iall_gather_typed(Channel ch, TypedSpan b, std::span<const int64_t> counts) override {
    return inner_.iall_gather_typed(ch, b, counts);
  }
  Request iall_to_all(Channel ch, TypedSpan send, std::span<const int64_t> sc, TypedSpan recv,
                      std::span<const int64_t> rc) override {
    return inner_.iall_to_all(ch, send, sc, recv, rc);
  }
  bool test(Request& r) override { return inner_.test(r); }
  void wait(Request& r) override { inner_.wait(r); }
  void barrier() override { inner_.barrier(); }
  std::vector<int64_t> all_gather(int64_t v) override { return inner_.all_gather(v); }
  double all_reduce_sum(double v) override { return inner_.all_reduce_sum(v); }
  double all_reduce_max(double v) override { return inner_.all_reduce_max(v); }
  std::vector<std::string> gather_to_root(const std::string& b) override { return inner_.gather_to_root(b); }
  std::string broadcast_from_root(const std::string& b) override { return inner_.broadcast_from_root(b); }

 protected:
  Communicator& inner_;
};

}  // namespace stagecraft::executor
