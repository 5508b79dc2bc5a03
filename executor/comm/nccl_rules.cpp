#include "executor/comm/nccl_rules.hpp"

#include <chrono>
#include <cstring>
#include <string>
#include <utility>

namespace stagecraft::executor {

namespace {

constexpr int64_t kMagic = 0x4e43434c52554c45;  // "NCCLRULE"
constexpr int kHeader = 8;                       // int64 fields before a collective's counts
// Point-to-point signatures travel as floats holding 16-bit pieces (exact in a float).
constexpr int kP2pFields = 7;  // magic, position, count, tag, rank, instruction, wire format
constexpr int kP2pFloats = 4 * kP2pFields;
// shadow tags: a class's signatures, then its acknowledgements
int32_t signature_tag(int cls) { return 1 + cls; }
int32_t ack_tag(int cls) { return 3 + cls; }

const char* kind_name(NcclRulesCommunicator::Kind k) {
  using K = NcclRulesCommunicator::Kind;
  switch (k) {
    case K::kAllGather: return "all-gather";
    case K::kReduceScatter: return "reduce-scatter";
    case K::kAllReduce: return "all-reduce (sum)";
    case K::kAllReduceDouble: return "all-reduce (sum, fp64)";
    case K::kAllReduceMax: return "all-reduce (max)";
    case K::kAllGatherTyped: return "all-gather (typed)";
    case K::kAllToAll: return "all-to-all";
    case K::kSend: return "send";
    case K::kRecv: return "receive";
  }
  return "?";
}

// The datatype NCCL is given (ncclDataType_t), a collective signature's field: a typed
// collective's element type, or a float collective's wire format (an fp32 wire is the fp32 type,
// so a typed fp32 collective and a float one over fp32 agree, as they would in NCCL).
enum class Datatype : int64_t { kInt8, kFp32, kBf16, kFp16 };
int64_t datatype(ElemType type, Format wire) {
  if (type == ElemType::kInt8) return static_cast<int64_t>(Datatype::kInt8);
  switch (wire) {
    case Format::kBf16: return static_cast<int64_t>(Datatype::kBf16);
    case Format::kFp16: return static_cast<int64_t>(Datatype::kFp16);
    case Format::kFp32: break;
  }
  return static_cast<int64_t>(Datatype::kFp32);
}
const char* datatype_name(int64_t d) {
  switch (static_cast<Datatype>(d)) {
    case Datatype::kInt8: return "int8";
    case Datatype::kFp32: return "fp32";
    case Datatype::kBf16: return "bf16";
    case Datatype::kFp16: return "fp16";
  }
  return "?";
}
// A message's size and tag as its errors name them: "8 floats, tag 2" (fp32), "8 floats over
// bf16, tag 2".
std::string message_what(int64_t count, Format wire, int64_t tag) {
  const std::string over = wire == Format::kFp32 ? std::string() : std::string(" over ") + to_string(wire);
  return std::to_string(count) + " floats" + over + ", tag " + std::to_string(tag);
}

void encode(std::vector<float>& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<float>((u >> (16 * k)) & 0xffff));
}
int64_t decode(const float* in) {
  uint64_t u = 0;
  for (int k = 0; k < 4; ++k) u |= static_cast<uint64_t>(in[k]) << (16 * k);
  return static_cast<int64_t>(u);
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

}  // namespace

struct NcclRulesCommunicator::Op {
  Kind kind = Kind::kAllGather;
  int stream = 0;
  int32_t instr = -1;
  bool launched = false;   // at the head of its stream: its kernel would run
  bool finished = false;   // its data moved and the rules' exchange is over
  bool in_order = false;   // finished, and every earlier op of its stream too
  // collectives
  Channel ch;
  ElemType type = ElemType::kFloat32;
  Format wire = Format::kFp32;   // a float collective's or a message's wire format
  int64_t seq = 0;         // position on its channel (or, for a message, in its class)
  std::vector<int64_t> send_counts, recv_counts;
  std::function<Request()> post;
  std::vector<int64_t> signatures;  // every member's, in member order
  Request sig, data, ack;
  bool sig_done = false, data_done = false, ack_done = false, matched = false;
  // point to point
  int64_t peer = -1;
  int32_t tag = 0;
  int64_t count = 0;
  std::span<const float> send_data;
  std::span<float> recv_data;
  std::vector<float> sig_buf, ack_buf;
};

NcclRulesCommunicator::NcclRulesCommunicator(Communicator& data, Communicator& shadow, NcclRulesOptions options)
    : ForwardingCommunicator(data), data_(data), shadow_(shadow), options_(std::move(options)) {}

NcclRulesCommunicator::~NcclRulesCommunicator() = default;

std::string NcclRulesCommunicator::describe(int64_t rank, int32_t instr) const {
  if (options_.describe && instr >= 0) return options_.describe(rank, instr);
  return "rank " + std::to_string(rank) + " instruction " + std::to_string(instr);
}

std::string NcclRulesCommunicator::what(const Op& op) const {
  std::string s = kind_name(op.kind);
  if (op.kind == Kind::kSend || op.kind == Kind::kRecv) {
    return s + " of " + message_what(op.count, op.wire, op.tag);
  }
  return s + " of " + std::to_string(sum(op.send_counts)) + " " + datatype_name(datatype(op.type, op.wire)) +
         " elements";
}

Request NcclRulesCommunicator::add(std::unique_ptr<Op> op, int stream) {
  op->stream = stream;
  op->instr = instr_;
  const int64_t id = static_cast<int64_t>(ops_.size());
  ops_.push_back(std::move(op));
  streams_[stream].push_back(id);
  return Request{id};
}

Request NcclRulesCommunicator::add_collective(Channel ch, Kind kind, ElemType type, Format wire,
                                              std::vector<int64_t> send_counts, std::vector<int64_t> recv_counts,
                                              std::function<Request()> post) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->ch = ch;
  op->type = type;
  op->wire = wire;
  op->seq = collective_seq_[{ch.group, ch.lane}]++;
  op->send_counts = std::move(send_counts);
  op->recv_counts = std::move(recv_counts);
  op->post = std::move(post);
  return add(std::move(op), static_cast<int>(ch.lane));
}

Request NcclRulesCommunicator::iall_gather(Channel ch, std::span<float> buffer, std::span<const int64_t> counts,
                                           Format wire) {
  std::vector<int64_t> c(counts.begin(), counts.end());
  return add_collective(ch, Kind::kAllGather, ElemType::kFloat32, wire, c, c, [this, ch, buffer, c, wire] {
    return data_.iall_gather(ch, buffer, c, wire);
  });
}

Request NcclRulesCommunicator::ireduce_scatter(Channel ch, std::span<const float> send, std::span<float> recv,
                                               std::span<const int64_t> counts, Format wire) {
  std::vector<int64_t> c(counts.begin(), counts.end());
  return add_collective(ch, Kind::kReduceScatter, ElemType::kFloat32, wire, c, c, [this, ch, send, recv, c, wire] {
    return data_.ireduce_scatter(ch, send, recv, c, wire);
  });
}

Request NcclRulesCommunicator::iall_reduce(Channel ch, std::span<float> buffer, Format wire) {
  const std::vector<int64_t> c{static_cast<int64_t>(buffer.size())};
  return add_collective(ch, Kind::kAllReduce, ElemType::kFloat32, wire, c, c,
                        [this, ch, buffer, wire] { return data_.iall_reduce(ch, buffer, wire); });
}

Request NcclRulesCommunicator::iall_reduce(Channel ch, std::span<double> buffer) {
  const std::vector<int64_t> c{static_cast<int64_t>(buffer.size())};
  return add_collective(ch, Kind::kAllReduceDouble, ElemType::kFloat32, Format::kFp32, c, c,
                        [this, ch, buffer] { return data_.iall_reduce(ch, buffer); });
}

Request NcclRulesCommunicator::iall_reduce_max(Channel ch, std::span<float> buffer) {
  const std::vector<int64_t> c{static_cast<int64_t>(buffer.size())};
  return add_collective(ch, Kind::kAllReduceMax, ElemType::kFloat32, Format::kFp32, c, c,
                        [this, ch, buffer] { return data_.iall_reduce_max(ch, buffer); });
}

Request NcclRulesCommunicator::iall_gather_typed(Channel ch, TypedSpan buffer, std::span<const int64_t> counts) {
  std::vector<int64_t> c(counts.begin(), counts.end());
  return add_collective(ch, Kind::kAllGatherTyped, buffer.type, Format::kFp32, c, c, [this, ch, buffer, c] {
    return data_.iall_gather_typed(ch, buffer, c);
  });
}

Request NcclRulesCommunicator::iall_to_all(Channel ch, TypedSpan send, std::span<const int64_t> send_counts,
                                           TypedSpan recv, std::span<const int64_t> recv_counts) {
  std::vector<int64_t> sc(send_counts.begin(), send_counts.end()), rc(recv_counts.begin(), recv_counts.end());
  return add_collective(ch, Kind::kAllToAll, send.type, Format::kFp32, sc, rc, [this, ch, send, recv, sc, rc] {
    return data_.iall_to_all(ch, send, sc, recv, rc);
  });
}

// A send (on the pp-send lane's stream) or a receive (pp-recv), numbered in its (peer, class, way).
std::unique_ptr<NcclRulesCommunicator::Op> NcclRulesCommunicator::message(Kind kind, int64_t peer, int32_t tag,
                                                                         std::size_t count, Format wire) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->peer = peer;
  op->tag = tag;
  op->count = static_cast<int64_t>(count);
  op->wire = wire;
  op->seq = p2p_seq_[{peer, p2p_class(tag), kind == Kind::kSend}]++;
  return op;
}

Request NcclRulesCommunicator::isend(std::span<const float> data, int64_t peer, int32_t tag, Format wire) {
  std::unique_ptr<Op> op = message(Kind::kSend, peer, tag, data.size(), wire);
  op->send_data = data;
  return add(std::move(op), static_cast<int>(program::Lane::kPpSend));
}

Request NcclRulesCommunicator::irecv(std::span<float> data, int64_t peer, int32_t tag, Format wire) {
  std::unique_ptr<Op> op = message(Kind::kRecv, peer, tag, data.size(), wire);
  op->recv_data = data;
  return add(std::move(op), static_cast<int>(program::Lane::kPpRecv));
}

// ---- progress ---------------------------------------------------------------------------------

void NcclRulesCommunicator::progress(Op& op) {
  if (op.finished) return;
  switch (op.kind) {
    case Kind::kSend: progress_send(op); break;
    case Kind::kRecv: progress_recv(op); break;
    default: progress_collective(op); break;
  }
}

// Launched: every member's signature gathered on the shadow channel; once they agree, the data
// collective is posted.
void NcclRulesCommunicator::progress_collective(Op& op) {
  const program::Group g = op.ch.group;
  const int64_t n = shadow_.group_size(g);
  const int64_t width = kHeader + 2 * n;
  if (!op.sig.valid() && !op.sig_done) {
    if (static_cast<int64_t>(op.send_counts.size()) != n && op.send_counts.size() != 1) {
      throw NcclRuleError(describe(rank(), op.instr) + ": " + what(op) + " on a group of " + std::to_string(n) +
                          " has " + std::to_string(op.send_counts.size()) + " counts");
    }
    op.signatures.assign(static_cast<std::size_t>(n * width), 0);
    int64_t* mine = op.signatures.data() + shadow_.group_rank(g) * width;
    mine[0] = kMagic, mine[1] = static_cast<int64_t>(op.kind), mine[2] = datatype(op.type, op.wire);
    mine[3] = op.seq, mine[4] = sum(op.send_counts), mine[5] = static_cast<int64_t>(op.send_counts.size());
    mine[6] = rank(), mine[7] = op.instr;
    for (std::size_t k = 0; k < op.send_counts.size() && static_cast<int64_t>(k) < n; ++k) {
      mine[kHeader + k] = op.send_counts[k];
      mine[kHeader + n + k] = op.recv_counts[k];
    }
    const std::vector<int64_t> counts(static_cast<std::size_t>(n), width * 8);
    std::span<int8_t> bytes(reinterpret_cast<int8_t*>(op.signatures.data()), op.signatures.size() * 8);
    op.sig = shadow_.iall_gather_typed(op.ch, TypedSpan(bytes), counts);
  }
  if (!op.sig_done) {
    if (!shadow_.test(op.sig)) return;
    op.sig_done = true;
    check_signatures(op);
    ++collectives_checked_;
    op.data = op.post();
    op.post = nullptr;
  }
  if (!op.data_done && data_.test(op.data)) op.data_done = true;
  op.finished = op.data_done;
}

void NcclRulesCommunicator::check_signatures(const Op& op) const {
  const program::Group g = op.ch.group;
  const int64_t n = shadow_.group_size(g);
  const int64_t width = kHeader + 2 * n;
  const int64_t me = shadow_.group_rank(g);
  const int64_t* mine = op.signatures.data() + me * width;
  const std::string where = std::string("the ") + program::to_string(g) + " communicator of lane " + program::to_string(op.ch.lane);
  auto name = [&](const int64_t* s) {
    std::string kind = s[1] >= 0 && s[1] <= static_cast<int64_t>(Kind::kRecv) ? kind_name(static_cast<Kind>(s[1])) : "?";
    return kind + " of " + std::to_string(s[4]) + " " + datatype_name(s[2]) + " elements (" +
           describe(s[6], static_cast<int32_t>(s[7])) + ")";
  };
  for (int64_t m = 0; m < n; ++m) {
    const int64_t* theirs = op.signatures.data() + m * width;
    if (theirs[0] != kMagic) {
      throw NcclRuleError("NCCL rule: collective #" + std::to_string(op.seq + 1) + " on " + where + ": member " +
                          std::to_string(m) + " sent no signature");
    }
    bool same_shape = theirs[1] == mine[1] && theirs[3] == mine[3] && theirs[5] == mine[5];  // all but the datatype
    if (same_shape && op.kind != Kind::kAllToAll) {
      for (int64_t k = 0; k < 2 * n; ++k) same_shape = same_shape && theirs[kHeader + k] == mine[kHeader + k];
    }
    if (!same_shape || theirs[2] != mine[2]) {
      // same_shape: the same collective in another datatype (bf16 on one member, fp32 on another)
      const char* rule = same_shape ? "every member of a collective gives it the same datatype"
                                    : "collectives of one communicator run in the order they are issued, on every member";
      throw NcclRuleError(std::string("NCCL rule: ") + rule + "; collective #" + std::to_string(op.seq + 1) + " on " +
                          where + " is " + name(mine) + " on rank " + std::to_string(mine[6]) + " but " + name(theirs) +
                          " on rank " + std::to_string(theirs[6]));
    }
    if (op.kind == Kind::kAllToAll && mine[5] == n) {  // my sends to m are m's receives from me
      if (mine[kHeader + m] != theirs[kHeader + n + me] || theirs[kHeader + me] != mine[kHeader + n + m]) {
        throw NcclRuleError("NCCL rule: an all-to-all's send and receive counts pair up; collective #" +
                            std::to_string(op.seq + 1) + " on " + where + ": rank " + std::to_string(mine[6]) +
                            " sends " + std::to_string(mine[kHeader + m]) + " elements to rank " +
                            std::to_string(theirs[6]) + ", which receives " + std::to_string(theirs[kHeader + n + me]) +
                            " (" + name(mine) + "; " + name(theirs) + ")");
      }
    }
  }
}

// Launched: the data goes, its signature ahead of it on the shadow; done when the receiver has
// matched it and said so.
void NcclRulesCommunicator::progress_send(Op& op) {
  const int cls = p2p_class(op.tag);
  if (!op.data.valid() && !op.data_done) {
    op.sig_buf.clear();
    for (int64_t v : {kMagic, op.seq, op.count, static_cast<int64_t>(op.tag), rank(), static_cast<int64_t>(op.instr),
                      static_cast<int64_t>(op.wire)}) {
      encode(op.sig_buf, v);
    }
    op.ack_buf.assign(1, 0.0f);
    op.sig = shadow_.isend(op.sig_buf, op.peer, signature_tag(cls));
    op.ack = shadow_.irecv(op.ack_buf, op.peer, ack_tag(cls));
    op.data = data_.isend(op.send_data, op.peer, op.tag, op.wire);
  }
  if (!op.sig_done && shadow_.test(op.sig)) op.sig_done = true;
  if (!op.data_done && data_.test(op.data)) op.data_done = true;
  if (!op.ack_done && shadow_.test(op.ack)) {
    op.ack_done = true;
    if (op.ack_buf[0] != 1.0f) {
      throw NcclRuleError("NCCL rule: point-to-point messages of one class are received in the order they are sent; "
                          "rank " + std::to_string(op.peer) + " refused " + describe(rank(), op.instr) + " (" + what(op) +
                          ") as message #" + std::to_string(op.seq + 1) + " of its class from this rank: its receive "
                          "there is for another message, or in another datatype (its error names both)");
    }
  }
  op.finished = op.sig_done && op.data_done && op.ack_done;
}

// Launched: waits for the peer's next signature of this class; a match is acknowledged, a
// mismatch refused (the sender then throws too) and reported.
void NcclRulesCommunicator::progress_recv(Op& op) {
  const int cls = p2p_class(op.tag);
  if (!op.data.valid() && !op.data_done) {
    op.sig_buf.assign(kP2pFloats, 0.0f);
    op.sig = shadow_.irecv(op.sig_buf, op.peer, signature_tag(cls));
    op.data = data_.irecv(op.recv_data, op.peer, op.tag, op.wire);
  }
  if (!op.sig_done) {
    if (!shadow_.test(op.sig)) return;
    op.sig_done = true;
    const float* s = op.sig_buf.data();
    const int64_t magic = decode(s), seq = decode(s + 4), count = decode(s + 8), tag = decode(s + 12);
    const int64_t from = decode(s + 16);
    const auto instr = static_cast<int32_t>(decode(s + 20));
    const auto wire = static_cast<Format>(decode(s + 24));
    op.matched = magic == kMagic && seq == op.seq && count == op.count && tag == op.tag && wire == op.wire;
    op.ack_buf.assign(1, op.matched ? 1.0f : 0.0f);
    op.ack = shadow_.isend(op.ack_buf, op.peer, ack_tag(cls));
    if (!op.matched) {
      // the right message in another datatype (NCCL would read its bytes as the receive's type)
      const bool only_wire = magic == kMagic && seq == op.seq && count == op.count && tag == op.tag;
      throw NcclRuleError(
          std::string(only_wire ? "NCCL rule: a receive's datatype is its message's; "
                                : "NCCL rule: point-to-point messages of one class are received in the order they are "
                                  "sent (no tags); ") +
          "message #" + std::to_string(op.seq + 1) + " of class " + (cls == 1 ? "gradients" : "activations") +
          " from rank " + std::to_string(op.peer) + " to rank " + std::to_string(rank()) + " is " +
          describe(from, instr) + " (" + message_what(count, wire, tag) + ") but the receive is " +
          describe(rank(), op.instr) + " (" + what(op) + ")");
    }
    ++messages_checked_;
  }
  if (!op.data_done && data_.test(op.data)) op.data_done = true;
  if (!op.ack_done && shadow_.test(op.ack)) op.ack_done = true;
  op.finished = op.data_done && op.ack_done;
}

// Launches and progresses the stream's operations in order; true when `id` is done in order.
bool NcclRulesCommunicator::stream_done_through(int stream, int64_t id) {
  std::deque<int64_t>& q = streams_[stream];
  while (!q.empty()) {
    Op& op = *ops_[static_cast<std::size_t>(q.front())];
    op.launched = true;
    progress(op);
    if (!op.finished) break;
    op.in_order = true;
    q.pop_front();
  }
  return ops_[static_cast<std::size_t>(id)]->in_order;
}

bool NcclRulesCommunicator::test(Request& r) {
  if (!r.valid() || r.id >= static_cast<int64_t>(ops_.size()) || !ops_[static_cast<std::size_t>(r.id)]) {
    throw CommError("NcclRulesCommunicator: request " + std::to_string(r.id) + " is not pending");
  }
  const int stream = ops_[static_cast<std::size_t>(r.id)]->stream;
  if (!stream_done_through(stream, r.id)) return false;
  ops_[static_cast<std::size_t>(r.id)].reset();
  r.id = -1;
  return true;
}

void NcclRulesCommunicator::wait(Request& r) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t id = r.id;
  while (!test(r)) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > options_.wait_deadline_s) {
      throw NcclRuleError("NCCL rule: waited " + std::to_string(static_cast<int>(options_.wait_deadline_s)) +
                          " s for request " + std::to_string(id) + " on rank " + std::to_string(rank()) +
                          ": an operation ahead of it on its stream, or a peer, never arrived");
    }
  }
}

}  // namespace stagecraft::executor
