#include "executor/comm/local.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "executor/errors.hpp"

namespace stagecraft::executor {

Request LocalCommunicator::done() { return Request{next_id_++}; }

void LocalCommunicator::check_peer(int64_t peer) const {
  if (peer != 0) throw CommError("LocalCommunicator: peer rank " + std::to_string(peer) + " outside a world of 1");
}

void LocalCommunicator::check_counts(std::span<const int64_t> counts, std::size_t elems, const char* what) {
  if (counts.size() != 1 || counts[0] != static_cast<int64_t>(elems)) {
    throw CommError(std::string("LocalCommunicator: ") + what + " over a group of 1 needs one count equal to the " +
                    std::to_string(elems) + "-element buffer");
  }
}

Request LocalCommunicator::isend(std::span<const float> data, int64_t peer, int32_t tag, Format wire) {
  check_peer(peer);
  Message msg{std::vector<float>(data.begin(), data.end()), wire};
  round_all(wire, std::span<float>(msg.values));
  mailbox_[tag].push_back(std::move(msg));
  return done();
}

Request LocalCommunicator::irecv(std::span<float> data, int64_t peer, int32_t tag, Format wire) {
  check_peer(peer);
  Request r = done();
  recvs_.emplace(r.id, PendingRecv{data, tag, wire});
  return r;
}

bool LocalCommunicator::deliver(PendingRecv& r) {
  auto it = mailbox_.find(r.tag);
  if (it == mailbox_.end() || it->second.empty()) return false;
  const Message& msg = it->second.front();
  if (msg.values.size() != r.data.size()) {
    throw CommError("LocalCommunicator: message of " + std::to_string(msg.values.size()) + " elements with tag " +
                    std::to_string(r.tag) + " for a " + std::to_string(r.data.size()) + "-element receive");
  }
  if (msg.wire != r.wire) {
    throw CommError(std::string("LocalCommunicator: message over ") + to_string(msg.wire) + " with tag " +
                    std::to_string(r.tag) + " for a receive over " + to_string(r.wire));
  }
  std::copy(msg.values.begin(), msg.values.end(), r.data.begin());
  it->second.pop_front();
  return true;
}

// The one member's piece travels too: over a 16-bit wire it comes back rounded.
Request LocalCommunicator::iall_gather(Channel, std::span<float> buffer, std::span<const int64_t> counts, Format wire) {
  check_counts(counts, buffer.size(), "all-gather");
  round_all(wire, buffer);
  return done();
}

// A sum over one member: its value, rounded to the wire.
Request LocalCommunicator::ireduce_scatter(Channel, std::span<const float> send, std::span<float> recv,
                                           std::span<const int64_t> counts, Format wire) {
  check_counts(counts, send.size(), "reduce-scatter");
  check_counts(counts, recv.size(), "reduce-scatter");
  std::copy(send.begin(), send.end(), recv.begin());
  round_all(wire, recv);
  return done();
}

Request LocalCommunicator::iall_gather_typed(Channel, TypedSpan buffer, std::span<const int64_t> counts) {
  check_counts(counts, static_cast<std::size_t>(buffer.count), "all-gather");
  return done();
}

Request LocalCommunicator::iall_to_all(Channel, TypedSpan send, std::span<const int64_t> send_counts, TypedSpan recv,
                                       std::span<const int64_t> recv_counts) {
  if (send.type != recv.type) throw CommError("LocalCommunicator: all-to-all between buffers of two element types");
  check_counts(send_counts, static_cast<std::size_t>(send.count), "all-to-all");
  check_counts(recv_counts, static_cast<std::size_t>(recv.count), "all-to-all");
  check_counts(recv_counts, static_cast<std::size_t>(send.count), "all-to-all");
  if (send.count > 0) std::memcpy(recv.data, send.data, static_cast<std::size_t>(send.bytes()));
  return done();
}

Request LocalCommunicator::iall_reduce(Channel, std::span<float> buffer, Format wire) {
  round_all(wire, buffer);
  return done();
}
Request LocalCommunicator::iall_reduce(Channel, std::span<double>) { return done(); }
Request LocalCommunicator::iall_reduce_max(Channel, std::span<float>) { return done(); }

bool LocalCommunicator::test(Request& r) {
  if (!r.valid()) throw CommError("LocalCommunicator: test of a spent request");
  auto it = recvs_.find(r.id);
  if (it != recvs_.end()) {
    if (!deliver(it->second)) return false;
    recvs_.erase(it);
  }
  r.id = -1;
  return true;
}

void LocalCommunicator::wait(Request& r) {
  if (!test(r)) throw CommError("LocalCommunicator: waiting on a receive no send will ever match (deadlock)");
}

}  // namespace stagecraft::executor
