#include "executor/comm/mpi.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "executor/comm/channels.hpp"
#include "executor/errors.hpp"
#include "mpi/bytes.hpp"
#include "mpi/error.hpp"

namespace stagecraft::executor {

namespace {

using program::Group;
using program::Lane;

MPI_Datatype mpi_type(ElemType t) { return t == ElemType::kInt8 ? MPI_INT8_T : MPI_FLOAT; }

// A 16-bit wire's sum of two members' values (an MPI_User_function over MPI_UINT16_T): both
// widened to fp32, added, the partial sum rounded back, as NCCL's bf16 / fp16 reduction kernels do.
template <Format F>
void sum16(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = pack16(F, unpack16(F, a[i]) + unpack16(F, b[i]));
}

// A 16-bit wire's encoding of `values` (rounded, pack16), and its decoding into `out`.
void pack(Format f, std::span<const float> values, std::vector<uint16_t>& out) {
  out.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = pack16(f, values[i]);
}
void unpack(Format f, const std::vector<uint16_t>& bits, std::span<float> out) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = unpack16(f, bits[i]);
}

int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) throw CommError(std::string("MPI: ") + what + " " + std::to_string(v) + " exceeds an int");
  return static_cast<int>(v);
}

MPI_Comm split(MPI_Comm parent, int color, int key) {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(parent, color, key, &out));
  if (out != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return out;
}

MPI_Comm dup(MPI_Comm parent) {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(parent, &out));
  MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return out;
}

}  // namespace

// ---- communicator -------------------------------------------------------------------------------

struct MpiCommunicator::Impl {
  // One in-flight request with the arrays MPI may read until it completes.
  struct Slot {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> counts, displs;
    std::vector<int> recv_counts, recv_displs;  // an all-to-all's receiving side
    // A 16-bit wire's staging (2 bytes an element, MPI_UINT16_T): `wire_send` holds a
    // reduce-scatter's packed input; `wire_data` what MPI sends, receives or reduces in place,
    // unpacked into `out` when the request is seen complete (test or wait). A send's `out` is
    // empty: it is packed when posted and nothing comes back.
    Format wire = Format::kFp32;
    std::vector<uint16_t> wire_send, wire_data;
    std::span<float> out;
    bool busy = false;
  };

  program::Placement placement;
  int rank = 0, size = 0;
  MPI_Comm control = MPI_COMM_NULL;  // blocking bookkeeping
  MPI_Comm pp = MPI_COMM_NULL;       // point to point between pipeline stages
  std::map<Group, MPI_Comm> groups;  // the split groups (null where this rank is not a member)
  std::map<std::pair<Group, Lane>, MPI_Comm> channels;
  std::vector<Slot> slots;
  std::vector<int64_t> free_slots;
  // The sums over a 16-bit wire (sum16): user operations, commutative, created with the
  // communicator and freed with it.
  MPI_Op sum_bf16 = MPI_OP_NULL, sum_fp16 = MPI_OP_NULL;
  MPI_Op sum16_op(Format f) const { return f == Format::kFp16 ? sum_fp16 : sum_bf16; }

  // ---- the watchdog: pings and pongs on a duplicate of the world of their own ----
  using Clock = std::chrono::steady_clock;
  static constexpr int kPing = 1, kPong = 2;
  static constexpr double kAnswerEvery_s = 0.02;   // how often a polling rank looks for pings
  MPI_Comm watchdog = MPI_COMM_NULL;
  double deadline_s = 300;
  Clock::time_point last_look{};
  // The latest ask's buffers and requests: kept for the communicator's life, since a silent rank's
  // requests stay pending (a stopped rank may wake and answer into them).
  int32_t ping_number = 1;
  std::vector<int32_t> pongs;
  std::vector<MPI_Request> ping_recvs, ping_sends;
  std::optional<WatchdogReport> asked;

  static double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
  // The grace a rank gets to answer: a fifth of the deadline, from 1 s to 30 s. A live rank
  // answers from any wait or test; one computing for longer than this between two of them would
  // be named wrongly, which a deadline of minutes (the default) leaves no room for.
  double grace_s() const { return std::clamp(deadline_s / 5, 1.0, 30.0); }
  // Answers every ping that arrived (a pong of the same number), at most every kAnswerEvery_s.
  void answer_pings(bool now = false) {
    if (!now && since(last_look) < kAnswerEvery_s) return;
    last_look = Clock::now();
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kPing, watchdog, &flag, &st));
      if (!flag) return;
      int32_t number = 0;
      MPI_CHECK(MPI_Recv(&number, 1, MPI_INT32_T, st.MPI_SOURCE, kPing, watchdog, MPI_STATUS_IGNORE));
      // the pinger posted its receive before its pings: this small send completes at once
      MPI_CHECK(MPI_Send(&number, 1, MPI_INT32_T, st.MPI_SOURCE, kPong, watchdog));
    }
  }
  // Pings every other rank; those without a pong after the grace are silent. Answers the others'
  // pings meanwhile (two ranks may ask at once). Requests left pending (a stopped rank's) are
  // abandoned: the caller ends the job.
  WatchdogReport ask() {
    if (asked) return *asked;   // once: the job ends after it
    WatchdogReport report;
    report.asked = true;
    report.grace_s = grace_s();
    pongs.assign(static_cast<std::size_t>(size), 0);
    ping_recvs.assign(static_cast<std::size_t>(size), MPI_REQUEST_NULL);
    ping_sends = ping_recvs;
    std::vector<MPI_Request>& recvs = ping_recvs;
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      MPI_CHECK(MPI_Irecv(&pongs[static_cast<std::size_t>(r)], 1, MPI_INT32_T, r, kPong, watchdog, &recvs[static_cast<std::size_t>(r)]));
    }
    for (int r = 0; r < size; ++r) {
      if (r != rank) MPI_CHECK(MPI_Isend(&ping_number, 1, MPI_INT32_T, r, kPing, watchdog, &ping_sends[static_cast<std::size_t>(r)]));
    }
    const Clock::time_point t0 = Clock::now();
    int answered = 0;
    while (answered < size - 1 && since(t0) < report.grace_s) {
      answered = 0;
      for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        int flag = 0;
        MPI_CHECK(MPI_Test(&recvs[static_cast<std::size_t>(r)], &flag, MPI_STATUS_IGNORE));
        answered += flag;   // a completed request reads as done (MPI_REQUEST_NULL) from then on
      }
      answer_pings(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (int r = 0; r < size; ++r) {
      if (r != rank && recvs[static_cast<std::size_t>(r)] != MPI_REQUEST_NULL) report.silent.push_back(r);
    }
    asked = report;
    return report;
  }
  // Waits for `request`, polling, answering pings; past the deadline without completion it asks
  // the watchdog and throws CommError naming what waited and who stopped answering.
  void await(MPI_Request* request, const std::string& what) {
    const Clock::time_point t0 = Clock::now();
    for (;;) {
      int flag = 0;
      MPI_CHECK(MPI_Test(request, &flag, MPI_STATUS_IGNORE));
      if (flag) return;
      answer_pings();
      if (since(t0) > deadline_s) {
        const double waited = since(t0);
        throw CommError("rank " + std::to_string(rank) + ": waited " + std::to_string(static_cast<int64_t>(waited)) + " s for " +
                        what + " (the watchdog's deadline, run --watchdog); " + ask().text());
      }
      std::this_thread::yield();
    }
  }

  int64_t acquire() {
    if (free_slots.empty()) {
      slots.emplace_back();
      free_slots.push_back(static_cast<int64_t>(slots.size()) - 1);
    }
    const int64_t id = free_slots.back();
    free_slots.pop_back();
    slots[static_cast<std::size_t>(id)].busy = true;
    return id;
  }
  Slot& slot(const Request& r) {
    if (!r.valid() || r.id >= static_cast<int64_t>(slots.size()) || !slots[static_cast<std::size_t>(r.id)].busy) {
      throw CommError("MpiCommunicator: request " + std::to_string(r.id) + " is not pending");
    }
    return slots[static_cast<std::size_t>(r.id)];
  }
  // The request completed: a 16-bit wire's values land in the caller's fp32 span; the slot is
  // free again (its staging keeps its capacity for the next request).
  void complete(Request& r) {
    Slot& s = slot(r);
    if (s.wire != Format::kFp32) unpack(s.wire, s.wire_data, s.out);
    s.busy = false;
    s.counts.clear();
    s.displs.clear();
    s.recv_counts.clear();
    s.recv_displs.clear();
    s.wire = Format::kFp32;
    s.wire_send.clear();
    s.wire_data.clear();
    s.out = {};
    free_slots.push_back(r.id);
    r.id = -1;
  }
  MPI_Comm channel(Channel ch) const {
    auto it = channels.find({ch.group, ch.lane});
    if (it == channels.end() || it->second == MPI_COMM_NULL) {
      throw CommError(std::string("MpiCommunicator: rank ") + std::to_string(rank) + " has no " +
                      program::to_string(ch.group) + " communicator for lane " + program::to_string(ch.lane));
    }
    return it->second;
  }
  MPI_Comm group(Group g) const {
    auto it = groups.find(g);
    if (it == groups.end() || it->second == MPI_COMM_NULL) {
      throw CommError(std::string("MpiCommunicator: rank ") + std::to_string(rank) + " is not in a " +
                      program::to_string(g) + " group");
    }
    return it->second;
  }
  // Counts and displacements (prefix sums) as MPI ints; their sum.
  static int64_t set_counts(std::vector<int>& out, std::vector<int>& displs, std::span<const int64_t> counts) {
    int64_t offset = 0;
    for (int64_t c : counts) {
      out.push_back(to_int(c, "count"));
      displs.push_back(to_int(offset, "displacement"));
      offset += c;
    }
    return offset;
  }
  void set_counts(Slot& s, std::span<const int64_t> counts) { set_counts(s.counts, s.displs, counts); }
  static bool all_equal(std::span<const int64_t> counts) {
    for (int64_t c : counts) {
      if (c != counts[0]) return false;
    }
    return true;
  }
  void check_members(Channel ch, std::span<const int64_t> counts) const {
    int n = 0;
    MPI_CHECK(MPI_Comm_size(channel(ch), &n));
    if (static_cast<int>(counts.size()) != n) {
      throw CommError("MpiCommunicator: " + std::to_string(counts.size()) + " counts for a " +
                      program::to_string(ch.group) + " group of " + std::to_string(n));
    }
  }
};

MpiCommunicator::MpiCommunicator(const program::Placement& placement) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.placement = placement;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &m.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &m.size));
  if (m.size != placement.world()) {
    throw ExecutorError("MpiCommunicator: the MPI world has " + std::to_string(m.size) + " ranks, the plan needs " +
                        std::to_string(placement.world()));
  }
  m.control = dup(MPI_COMM_WORLD);
  m.watchdog = dup(MPI_COMM_WORLD);
  MPI_CHECK(MPI_Op_create(&sum16<Format::kBf16>, 1, &m.sum_bf16));
  MPI_CHECK(MPI_Op_create(&sum16<Format::kFp16>, 1, &m.sum_fp16));
  m.pp = split(MPI_COMM_WORLD, static_cast<int>(pipeline_color(placement, m.rank)), m.rank);
  // the Program's groups and their lanes' channels (comm/channels.hpp: the one rule of which
  // communicators a rank joins, the NCCL transport's too)
  for (const GroupSplit& g : group_splits(placement, m.rank)) {
    m.groups[g.group] = split(MPI_COMM_WORLD, g.color < 0 ? MPI_UNDEFINED : static_cast<int>(g.color), m.rank);
    for (Lane lane : g.lanes) m.channels[{g.group, lane}] = m.groups[g.group] == MPI_COMM_NULL ? MPI_COMM_NULL : dup(m.groups[g.group]);
  }
}

// Communicators are freed (MPI_Comm_free is collective) only when nothing is pending: after an
// error mid-step the peers may never get here, and a pending non-blocking collective may not be
// freed at all; the caller aborts the job then (cli/run.cpp), so leaking them is harmless. The
// 16-bit sums go with them (a pending reduction may still use one), before the Session
// finalizes MPI.
MpiCommunicator::~MpiCommunicator() {
  Impl& m = *impl_;
  for (const Impl::Slot& s : m.slots) {
    if (s.busy) return;
  }
  auto free_comm = [](MPI_Comm& c) {
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  };
  for (auto& [_, c] : m.channels) free_comm(c);
  for (auto& [_, c] : m.groups) free_comm(c);
  free_comm(m.pp);
  free_comm(m.control);
  free_comm(m.watchdog);
  for (MPI_Op* op : {&m.sum_bf16, &m.sum_fp16}) {
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  }
}

void MpiCommunicator::set_progress_deadline(double seconds) {
  if (!(seconds > 0)) throw CommError("MpiCommunicator: the watchdog's deadline must be positive, got " + std::to_string(seconds));
  impl_->deadline_s = seconds;
}

WatchdogReport MpiCommunicator::ask_watchdog() { return impl_->ask(); }

int64_t MpiCommunicator::rank() const { return impl_->rank; }
int64_t MpiCommunicator::size() const { return impl_->size; }

int64_t MpiCommunicator::group_rank(Group group) const {
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(impl_->group(group), &r));
  return r;
}

int64_t MpiCommunicator::group_size(Group group) const {
  int n = 0;
  MPI_CHECK(MPI_Comm_size(impl_->group(group), &n));
  return n;
}

// A 16-bit wire (Communicator::isend): the values travel as MPI_UINT16_T out of the slot's staging,
// packed when posted; a receive lands there and is unpacked into `data` when seen complete.
Request MpiCommunicator::isend(std::span<const float> data, int64_t peer, int32_t tag, Format wire) {
  Impl& m = *impl_;
  const program::Placement& p = m.placement;
  if (peer < 0 || peer >= p.world() || p.dp_index_of(peer) != p.dp_index_of(m.rank) ||
      p.tp_index_of(peer) != p.tp_index_of(m.rank)) {
    throw CommError("MpiCommunicator: rank " + std::to_string(m.rank) + " cannot send to " + std::to_string(peer) +
                    ", not one of its pipeline peers");
  }
  const int count = to_int(static_cast<int64_t>(data.size()), "message size");
  Request r{m.acquire()};
  Impl::Slot& s = m.slot(r);
  const void* values = data.data();
  MPI_Datatype type = MPI_FLOAT;
  if (wire != Format::kFp32) {
    s.wire = wire;   // nothing comes back: `out` stays empty
    pack(wire, data, s.wire_data);
    values = s.wire_data.data(), type = MPI_UINT16_T;
  }
  MPI_CHECK(MPI_Isend(values, count, type, static_cast<int>(p.stage_of(peer)), tag, m.pp, &s.request));
  return r;
}

Request MpiCommunicator::irecv(std::span<float> data, int64_t peer, int32_t tag, Format wire) {
  Impl& m = *impl_;
  const program::Placement& p = m.placement;
  if (peer < 0 || peer >= p.world() || p.dp_index_of(peer) != p.dp_index_of(m.rank) ||
      p.tp_index_of(peer) != p.tp_index_of(m.rank)) {
    throw CommError("MpiCommunicator: rank " + std::to_string(m.rank) + " cannot receive from " +
                    std::to_string(peer) + ", not one of its pipeline peers");
  }
  const int count = to_int(static_cast<int64_t>(data.size()), "message size");
  Request r{m.acquire()};
  Impl::Slot& s = m.slot(r);
  void* values = data.data();
  MPI_Datatype type = MPI_FLOAT;
  if (wire != Format::kFp32) {
    s.wire = wire, s.out = data;
    s.wire_data.resize(data.size());
    values = s.wire_data.data(), type = MPI_UINT16_T;
  }
  MPI_CHECK(MPI_Irecv(values, count, type, static_cast<int>(p.stage_of(peer)), tag, m.pp, &s.request));
  return r;
}

// Over a 16-bit wire the whole buffer is packed (only this rank's piece goes out) and gathered in
// place in the staging, then unpacked whole: every piece, this rank's too, comes back rounded.
Request MpiCommunicator::iall_gather(Channel ch, std::span<float> buffer, std::span<const int64_t> counts,
                                     Format wire) {
  Impl& m = *impl_;
  m.check_members(ch, counts);
  const MPI_Comm comm = m.channel(ch);
  Request r{m.acquire()};
  Impl::Slot& s = m.slot(r);
  m.set_counts(s, counts);
  void* values = buffer.data();
  MPI_Datatype type = MPI_FLOAT;
  if (wire != Format::kFp32) {
    s.wire = wire, s.out = buffer;
    pack(wire, buffer, s.wire_data);
    values = s.wire_data.data(), type = MPI_UINT16_T;
  }
  if (Impl::all_equal(counts)) {
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, values, s.counts[0], type, comm, &s.request));
  } else {
    MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, values, s.counts.data(), s.displs.data(), type, comm,
                              &s.request));
  }
  return r;
}

// Over a 16-bit wire: `send` packed, summed by the wire's sum16 into the staging, unpacked into `recv`.
Request MpiCommunicator::ireduce_scatter(Channel ch, std::span<const float> send, std::span<float> recv,
                                         std::span<const int64_t> counts, Format wire) {
  Impl& m = *impl_;
  m.check_members(ch, counts);
  const MPI_Comm comm = m.channel(ch);
  Request r{m.acquire()};
  Impl::Slot& s = m.slot(r);
  m.set_counts(s, counts);
  const void* in = send.data();
  void* out = recv.data();
  MPI_Datatype type = MPI_FLOAT;
  MPI_Op op = MPI_SUM;
  if (wire != Format::kFp32) {
    s.wire = wire, s.out = recv;
    pack(wire, send, s.wire_send);
    s.wire_data.resize(recv.size());
    in = s.wire_send.data(), out = s.wire_data.data(), type = MPI_UINT16_T, op = m.sum16_op(wire);
  }
  if (Impl::all_equal(counts)) {
    MPI_CHECK(MPI_Ireduce_scatter_block(in, out, s.counts[0], type, op, comm, &s.request));
  } else {
    MPI_CHECK(MPI_Ireduce_scatter(in, out, s.counts.data(), type, op, comm, &s.request));
  }
  return r;
}

namespace {
// An in-place non-blocking all-reduce of `count` values of `type` by `op` on `comm`.
void post_all_reduce(void* data, std::size_t count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, to_int(static_cast<int64_t>(count), "count"), type, op, comm, request));
}
}  // namespace

// Over a 16-bit wire: packed, summed in place in the staging by the wire's sum16, unpacked.
Request MpiCommunicator::iall_reduce(Channel ch, std::span<float> buffer, Format wire) {
  Impl& m = *impl_;
  const MPI_Comm comm = m.channel(ch);
  Request r{m.acquire()};
  Impl::Slot& s = m.slot(r);
  if (wire == Format::kFp32) {
    post_all_reduce(buffer.data(), buffer.size(), MPI_FLOAT, MPI_SUM, comm, &s.request);
    return r;
  }
  s.wire = wire, s.out = buffer;
  pack(wire, buffer, s.wire_data);
  post_all_reduce(s.wire_data.data(), s.wire_data.size(), MPI_UINT16_T, m.sum16_op(wire), comm, &s.request);
  return r;
}

Request MpiCommunicator::iall_reduce(Channel ch, std::span<double> buffer) {
  Request r{impl_->acquire()};
  post_all_reduce(buffer.data(), buffer.size(), MPI_DOUBLE, MPI_SUM, impl_->channel(ch), &impl_->slot(r).request);
  return r;
}

Request MpiCommunicator::iall_reduce_max(Channel ch, std::span<float> buffer) {
  Request r{impl_->acquire()};
  post_all_reduce(buffer.data(), buffer.size(), MPI_FLOAT, MPI_MAX, impl_->channel(ch), &impl_->slot(r).request);
  return r;
}

Request MpiCommunicator::iall_gather_typed(Channel ch, TypedSpan buffer, std::span<const int64_t> counts) {
  Impl& m = *impl_;
  m.check_members(ch, counts);
  Request r{m.acquire()};
  Impl::Slot& s = m.slot(r);
  const int64_t total = Impl::set_counts(s.counts, s.displs, counts);
  if (total != buffer.count) {
    throw CommError("MpiCommunicator: all-gather counts sum to " + std::to_string(total) + " for a buffer of " +
                    std::to_string(buffer.count));
  }
  MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer.data, s.counts.data(), s.displs.data(),
                            mpi_type(buffer.type), m.channel(ch), &s.request));
  return r;
}

Request MpiCommunicator::iall_to_all(Channel ch, TypedSpan send, std::span<const int64_t> send_counts, TypedSpan recv,
                                     std::span<const int64_t> recv_counts) {
  Impl& m = *impl_;
  if (send.type != recv.type) throw CommError("MpiCommunicator: all-to-all between buffers of two element types");
  m.check_members(ch, send_counts);
  m.check_members(ch, recv_counts);
  Request r{m.acquire()};
  Impl::Slot& s = m.slot(r);
  const int64_t sent = Impl::set_counts(s.counts, s.displs, send_counts);
  const int64_t received = Impl::set_counts(s.recv_counts, s.recv_displs, recv_counts);
  if (sent != send.count || received != recv.count) {
    throw CommError("MpiCommunicator: all-to-all counts sum to " + std::to_string(sent) + " sent and " +
                    std::to_string(received) + " received for buffers of " + std::to_string(send.count) + " and " +
                    std::to_string(recv.count));
  }
  MPI_CHECK(MPI_Ialltoallv(send.data, s.counts.data(), s.displs.data(), mpi_type(send.type), recv.data,
                           s.recv_counts.data(), s.recv_displs.data(), mpi_type(recv.type), m.channel(ch), &s.request));
  return r;
}

bool MpiCommunicator::test(Request& r) {
  Impl::Slot& s = impl_->slot(r);
  int flag = 0;
  MPI_CHECK(MPI_Test(&s.request, &flag, MPI_STATUS_IGNORE));
  if (flag) impl_->complete(r);
  impl_->answer_pings();
  return flag != 0;
}

void MpiCommunicator::wait(Request& r) {
  Impl::Slot& s = impl_->slot(r);
  impl_->await(&s.request, "request " + std::to_string(r.id));
  impl_->complete(r);
}

// The control plane: non-blocking collectives awaited under the watchdog.
void MpiCommunicator::barrier() {
  MPI_Request q = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(impl_->control, &q));
  impl_->await(&q, "a barrier of every rank");
}

std::vector<int64_t> MpiCommunicator::all_gather(int64_t value) {
  std::vector<int64_t> out(static_cast<std::size_t>(impl_->size));
  MPI_Request q = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(&value, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, impl_->control, &q));
  impl_->await(&q, "an all-gather of every rank");
  return out;
}

double MpiCommunicator::all_reduce_sum(double value) {
  double out = 0;
  MPI_Request q = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, impl_->control, &q));
  impl_->await(&q, "an all-reduce of every rank");
  return out;
}

double MpiCommunicator::all_reduce_max(double value) {
  double out = 0;
  MPI_Request q = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, impl_->control, &q));
  impl_->await(&q, "an all-reduce of every rank");
  return out;
}

std::vector<std::string> MpiCommunicator::gather_to_root(const std::string& blob) {
  return mpi::gather_bytes(impl_->control, blob, 0, [this](MPI_Request* q) { impl_->await(q, "a gather to rank 0"); });
}

std::string MpiCommunicator::broadcast_from_root(const std::string& blob) {
  return mpi::broadcast_bytes(impl_->control, blob, 0, [this](MPI_Request* q) { impl_->await(q, "a broadcast from rank 0"); });
}

}  // namespace stagecraft::executor
