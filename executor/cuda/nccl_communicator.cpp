#include "executor/cuda/nccl_communicator.hpp"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "executor/comm/channels.hpp"
#include "executor/comm/nccl_plan.hpp"
#include "executor/cuda/buffers.hpp"
#include "executor/cuda/check.hpp"
#include "executor/cuda/event_clock.hpp"
#include "executor/cuda/formats.hpp"
#include "executor/cuda/kernels/elementwise.hpp"
#include "executor/errors.hpp"

namespace stagecraft::executor::cuda {

// nccl_plan.hpp names NCCL's datatypes by value, without nccl.h
static_assert(static_cast<int>(NcclType::kInt8) == ncclInt8);
static_assert(static_cast<int>(NcclType::kFloat16) == ncclFloat16);
static_assert(static_cast<int>(NcclType::kFloat32) == ncclFloat32);
static_assert(static_cast<int>(NcclType::kFloat64) == ncclFloat64);
static_assert(static_cast<int>(NcclType::kBfloat16) == ncclBfloat16);

namespace {

using program::Group;
using program::Lane;

[[noreturn]] void throw_nccl(ncclResult_t e, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw CommError(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + ncclGetErrorString(e) +
                  (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string()));
}

#define STAGECRAFT_NCCL_CHECK(call)                                                   \
  do {                                                                                \
    const ncclResult_t stagecraft_nccl_e = (call);                                    \
    if (stagecraft_nccl_e != ncclSuccess) throw_nccl(stagecraft_nccl_e, #call, __FILE__, __LINE__); \
  } while (0)

ncclDataType_t nccl_dtype(NcclType t) { return static_cast<ncclDataType_t>(static_cast<int>(t)); }
std::size_t elem_bytes(NcclType t) {
  switch (t) {
    case NcclType::kInt8: return 1;
    case NcclType::kFloat16:
    case NcclType::kBfloat16: return 2;
    case NcclType::kFloat32: return 4;
    case NcclType::kFloat64: return 8;
  }
  return 4;
}

cudaStream_t priority_stream() {
  int least = 0, greatest = 0;
  STAGECRAFT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  STAGECRAFT_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  return s;
}

ncclConfig_t nccl_config() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 1;
  c.splitShare = 1;  // the splits share the world's resources (CUDA.md §3.2)
  return c;
}

}  // namespace

struct NcclCommunicator::Impl {
  struct Chan {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  struct Slot {
    cudaEvent_t event = nullptr;
    ncclComm_t comm = nullptr;
    std::string what;
    // the double all-reduce: pinned host staging and the device scratch, copied out on completion
    double* pinned = nullptr;
    std::size_t pinned_elems = 0;
    double* device = nullptr;
    std::size_t device_elems = 0;
    std::span<double> out;
    // a 16-bit wire's packed values (send part, then receive part where they are apart)
    uint16_t* wire = nullptr;
    std::size_t wire_elems = 0;
    bool busy = false;
  };

  program::Placement placement;
  int64_t rank = 0, world = 1;
  int device = 0;
  std::string device_source;
  ncclComm_t world_comm = nullptr;
  std::map<std::pair<Group, Lane>, Chan> channels;
  std::map<std::tuple<int64_t, int64_t, int>, ncclComm_t> edges;  // (sender, receiver, class)
  cudaStream_t send_stream = nullptr, recv_stream = nullptr;
  std::vector<ncclComm_t> comms;  // every communicator made, for abort and destroy
  std::vector<Slot> slots;
  std::vector<int64_t> free_slots;
  int32_t label = -1;
  double deadline_s = 300;
  bool aborted = false;

  std::string where() const {
    return "rank " + std::to_string(rank) + (label >= 0 ? " (instruction " + std::to_string(label) + ")" : std::string());
  }
  const Chan& channel(Channel ch) const {
    auto it = channels.find({ch.group, ch.lane});
    if (it == channels.end() || it->second.comm == nullptr) {
      throw CommError("NcclCommunicator: " + where() + " has no " + program::to_string(ch.group) +
                      " communicator for lane " + program::to_string(ch.lane));
    }
    return it->second;
  }
  Request acquire(ncclComm_t comm, std::string what) {
    int64_t id = 0;
    if (!free_slots.empty()) {
      id = free_slots.back();
      free_slots.pop_back();
    } else {
      id = static_cast<int64_t>(slots.size());
      slots.emplace_back();
      STAGECRAFT_CUDA_CHECK(cudaEventCreateWithFlags(&slots.back().event, cudaEventDisableTiming));
    }
    Slot& s = slots[static_cast<std::size_t>(id)];
    s.busy = true;
    s.comm = comm;
    s.what = std::move(what);
    return Request{id};
  }
  Slot& slot(const Request& r) {
    if (r.id < 0 || r.id >= static_cast<int64_t>(slots.size()) || !slots[static_cast<std::size_t>(r.id)].busy) {
      throw CommError("NcclCommunicator: " + where() + ": a request that is not pending");
    }
    return slots[static_cast<std::size_t>(r.id)];
  }
  void record(const Request& r, cudaStream_t stream) { STAGECRAFT_CUDA_CHECK(cudaEventRecord(slot(r).event, stream)); }
  void complete(Request& r) {
    Slot& s = slot(r);
    if (!s.out.empty()) std::memcpy(s.out.data(), s.pinned, s.out.size() * sizeof(double));
    s.out = {};
    s.busy = false;
    free_slots.push_back(r.id);
    r.id = -1;
  }
  // Every communicator aborted (ncclCommAbort stops the kernels still running), once.
  void abort_all() {
    if (aborted) return;
    aborted = true;
    for (ncclComm_t c : comms) ncclCommAbort(c);
  }

  // The plan's calls on `comm`'s `stream`: offsets into `send` and `recv` in elements of `type`.
  void run(const NcclPlan& plan, const void* send, void* recv, NcclType type, ncclRedOp_t op, ncclComm_t comm,
           cudaStream_t stream) {
    const std::size_t e = elem_bytes(type);
    const ncclDataType_t t = nccl_dtype(type);
    if (plan.grouped) STAGECRAFT_NCCL_CHECK(ncclGroupStart());
    for (const NcclStep& s : plan.steps) {
      const auto* from = static_cast<const char*>(send) + static_cast<std::size_t>(s.send) * e;
      auto* to = static_cast<char*>(recv) + static_cast<std::size_t>(s.recv) * e;
      const auto n = static_cast<std::size_t>(s.count);
      const int peer = static_cast<int>(s.peer);
      switch (s.call) {
        case NcclCall::kAllGather: STAGECRAFT_NCCL_CHECK(ncclAllGather(from, to, n, t, comm, stream)); break;
        case NcclCall::kReduceScatter: STAGECRAFT_NCCL_CHECK(ncclReduceScatter(from, to, n, t, op, comm, stream)); break;
        case NcclCall::kAllReduce: STAGECRAFT_NCCL_CHECK(ncclAllReduce(from, to, n, t, op, comm, stream)); break;
        case NcclCall::kBroadcast: STAGECRAFT_NCCL_CHECK(ncclBroadcast(from, to, n, t, peer, comm, stream)); break;
        case NcclCall::kReduce: STAGECRAFT_NCCL_CHECK(ncclReduce(from, to, n, t, op, peer, comm, stream)); break;
        case NcclCall::kSend: STAGECRAFT_NCCL_CHECK(ncclSend(from, n, t, peer, comm, stream)); break;
        case NcclCall::kRecv: STAGECRAFT_NCCL_CHECK(ncclRecv(to, n, t, peer, comm, stream)); break;
      }
    }
    if (plan.grouped) STAGECRAFT_NCCL_CHECK(ncclGroupEnd());
  }

  // At least n 16-bit elements of the request's wire scratch. Device memory comes from the caching
  // pool (buffers.hpp), never cudaFree'd here: cudaFree waits for the whole device, and with NCCL
  // kernels in flight that wait for a peer, which may wait for this rank's next post, it would hang.
  uint16_t* wire_scratch(const Request& r, std::size_t n) {
    Slot& s = slot(r);
    if (s.wire_elems < n) {
      device_pool().release(s.wire);  // this slot's last operation completed
      s.wire = static_cast<uint16_t*>(device_pool().allocate(n * sizeof(uint16_t)));
      s.wire_elems = n;
    }
    return s.wire;
  }

  // The plan's calls over fp32 device buffers on `stream`, the values travelling in `wire`: fp32 as
  // they are; a 16-bit wire packs the n_send values of `send` (rounded, precision.hpp pack16) into
  // the request's scratch, runs the calls in that dtype (NCCL's bf16 and fp16 reductions add in
  // fp32 and round every partial sum) and unpacks the n_recv results into `recv`, all in stream
  // order. In place (send == recv) one packed copy serves both.
  void run_wire(const Request& r, const NcclPlan& plan, const float* send, float* recv, std::size_t n_send,
                std::size_t n_recv, Format wire, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (wire == Format::kFp32) {
      run(plan, send, recv, NcclType::kFloat32, op, comm, stream);
      return;
    }
    const bool in_place = send == recv && send != nullptr;
    uint16_t* packed = wire_scratch(r, in_place ? n_send : n_send + n_recv);
    uint16_t* packed_recv = in_place ? packed : packed + n_send;
    const Half16 h = half16(wire);
    if (send != nullptr) pack16(h, send, packed, static_cast<int64_t>(n_send), stream);
    run(plan, send != nullptr ? packed : nullptr, recv != nullptr ? packed_recv : nullptr, nccl_type(wire), op, comm, stream);
    if (recv != nullptr) unpack16(h, packed_recv, recv, static_cast<int64_t>(n_recv), stream);
  }

  // One collective on channel `ch`: the plan's calls on its stream, then the request's event.
  Request collective(Channel ch, const char* what, const NcclPlan& plan, const float* send, float* recv, std::size_t n_send,
                     std::size_t n_recv, Format wire, ncclRedOp_t op) {
    const Chan& c = channel(ch);
    const Request r = acquire(c.comm, std::string(what) + " of " + std::to_string(n_send) + " " +
                                          (wire == Format::kFp32 ? std::string("floats") : std::string(to_string(wire)) + " values") +
                                          " on " + program::to_string(ch.group) + "/" + program::to_string(ch.lane));
    order_after_device_stream(c.stream);  // what the compute enqueued before (backend.hpp)
    event_clock().start(label, c.stream);
    run_wire(r, plan, send, recv, n_send, n_recv, wire, op, c.comm, c.stream);
    event_clock().end(label, c.stream);
    record(r, c.stream);
    return r;
  }
};

NcclCommunicator::NcclCommunicator(const program::Program& prog, Communicator& control)
    : control_(control), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const program::Placement& placement = prog.placement;
  m.placement = placement;
  m.rank = control.rank();
  m.world = control.size();
  if (m.world != placement.world()) {
    throw ExecutorError("NcclCommunicator: the world has " + std::to_string(m.world) + " ranks, the plan needs " +
                        std::to_string(placement.world()));
  }
  // the device: the launcher's local rank, else the rank's place among its host's ranks
  std::vector<uint64_t> hashes;
  for (int64_t h : control.all_gather(static_cast<int64_t>(host_hash()))) hashes.push_back(static_cast<uint64_t>(h));
  const LocalRank local = local_rank(hashes, m.rank, [](const char* name) -> const char* { return std::getenv(name); });
  int devices = 0;
  STAGECRAFT_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices <= 0) throw ExecutorError("NcclCommunicator: no CUDA device on rank " + std::to_string(m.rank));
  m.device = static_cast<int>(local.index % devices);
  m.device_source = local.source;
  STAGECRAFT_CUDA_CHECK(cudaSetDevice(m.device));
  // the world communicator from rank 0's unique id
  ncclUniqueId id;
  std::string blob;
  if (m.rank == 0) {
    STAGECRAFT_NCCL_CHECK(ncclGetUniqueId(&id));
    blob.assign(reinterpret_cast<const char*>(&id), sizeof id);
  }
  blob = control.broadcast_from_root(blob);
  if (blob.size() != sizeof id) throw CommError("NcclCommunicator: rank " + std::to_string(m.rank) + " received no NCCL unique id");
  std::memcpy(&id, blob.data(), sizeof id);
  ncclConfig_t config = nccl_config();
  STAGECRAFT_NCCL_CHECK(ncclCommInitRankConfig(&m.world_comm, static_cast<int>(m.world), id, static_cast<int>(m.rank), &config));
  m.comms.push_back(m.world_comm);
  auto split = [&](int64_t color) {
    ncclComm_t c = nullptr;
    ncclConfig_t cfg = nccl_config();
    STAGECRAFT_NCCL_CHECK(ncclCommSplit(m.world_comm, color < 0 ? NCCL_SPLIT_NOCOLOR : static_cast<int>(color),
                                        static_cast<int>(m.rank), &c, &cfg));
    if (c != nullptr) m.comms.push_back(c);
    return c;
  };
  // one communicator per channel (the groups MpiCommunicator splits, the same order on every rank)
  for (const GroupSplit& g : group_splits(placement, m.rank)) {
    for (Lane lane : g.lanes) {
      Impl::Chan ch;
      ch.comm = split(g.color);
      if (ch.comm != nullptr) ch.stream = priority_stream();
      m.channels[{g.group, lane}] = ch;
    }
  }
  // the pipeline's two-member communicators, one per (edge, class)
  for (const P2pRound& round : p2p_rounds(placement, pipeline_edges(prog))) {
    const int64_t color = round.color[static_cast<std::size_t>(m.rank)];
    ncclComm_t c = split(color);
    if (color >= 0) {
      const P2pEdge& e = round.edges[static_cast<std::size_t>(color)];
      m.edges[{e.sender, e.receiver, static_cast<int>(e.cls)}] = c;
    }
  }
  m.send_stream = priority_stream();
  m.recv_stream = priority_stream();
}

NcclCommunicator::~NcclCommunicator() {
  Impl& m = *impl_;
  for (Impl::Slot& s : m.slots) {
    if (s.event != nullptr) cudaEventDestroy(s.event);
    if (s.pinned != nullptr) cudaFreeHost(s.pinned);
    device_pool().release(s.device);
    device_pool().release(s.wire);
  }
  const bool pending = std::any_of(m.slots.begin(), m.slots.end(), [](const Impl::Slot& s) { return s.busy; });
  // a communicator with work in flight (an error mid-step) is aborted, not destroyed
  for (auto it = m.comms.rbegin(); it != m.comms.rend(); ++it) {
    if (m.aborted) break;
    if (pending) {
      ncclCommAbort(*it);
    } else {
      ncclCommDestroy(*it);
    }
  }
  for (auto& [key, ch] : m.channels) {
    if (ch.stream != nullptr) cudaStreamDestroy(ch.stream);
  }
  if (m.send_stream != nullptr) cudaStreamDestroy(m.send_stream);
  if (m.recv_stream != nullptr) cudaStreamDestroy(m.recv_stream);
}

void NcclCommunicator::label_next(int32_t instr) { impl_->label = instr; }
void NcclCommunicator::set_progress_deadline(double seconds) {
  impl_->deadline_s = seconds;
  control_.set_progress_deadline(seconds);
}

int64_t NcclCommunicator::rank() const { return impl_->rank; }
int64_t NcclCommunicator::size() const { return impl_->world; }
int NcclCommunicator::device() const { return impl_->device; }
const std::string& NcclCommunicator::device_source() const { return impl_->device_source; }

int64_t NcclCommunicator::group_rank(Group group) const {
  const std::vector<int64_t> members = impl_->placement.group_members(group, impl_->rank);
  const auto it = std::find(members.begin(), members.end(), impl_->rank);
  if (it == members.end()) {
    throw CommError("NcclCommunicator: rank " + std::to_string(impl_->rank) + " is not in a " + program::to_string(group) + " group");
  }
  return it - members.begin();
}

int64_t NcclCommunicator::group_size(Group group) const {
  return static_cast<int64_t>(impl_->placement.group_members(group, impl_->rank).size());
}

// A message travels on its edge's two-member communicator (members in world-rank order).
Request NcclCommunicator::isend(std::span<const float> data, int64_t peer, int32_t tag, Format wire) {
  Impl& m = *impl_;
  const auto it = m.edges.find({m.rank, peer, p2p_class(tag)});
  if (it == m.edges.end()) {
    throw CommError("NcclCommunicator: " + m.where() + " has no pipeline edge to rank " + std::to_string(peer) + " for tag " +
                    std::to_string(tag));
  }
  const Request r = m.acquire(it->second, "a send of " + std::to_string(data.size()) + " floats to rank " + std::to_string(peer));
  NcclPlan plan;
  plan.steps.push_back({NcclCall::kSend, 0, 0, static_cast<int64_t>(data.size()), peer < m.rank ? 0 : 1});
  order_after_device_stream(m.send_stream);
  event_clock().start(m.label, m.send_stream);
  m.run_wire(r, plan, data.data(), nullptr, data.size(), 0, wire, ncclSum, it->second, m.send_stream);
  event_clock().end(m.label, m.send_stream);
  m.record(r, m.send_stream);
  return r;
}

Request NcclCommunicator::irecv(std::span<float> data, int64_t peer, int32_t tag, Format wire) {
  Impl& m = *impl_;
  const auto it = m.edges.find({peer, m.rank, p2p_class(tag)});
  if (it == m.edges.end()) {
    throw CommError("NcclCommunicator: " + m.where() + " has no pipeline edge from rank " + std::to_string(peer) +
                    " for tag " + std::to_string(tag));
  }
  const Request r =
      m.acquire(it->second, "a receive of " + std::to_string(data.size()) + " floats from rank " + std::to_string(peer));
  NcclPlan plan;
  plan.steps.push_back({NcclCall::kRecv, 0, 0, static_cast<int64_t>(data.size()), peer < m.rank ? 0 : 1});
  order_after_device_stream(m.recv_stream);
  event_clock().start(m.label, m.recv_stream);
  m.run_wire(r, plan, nullptr, data.data(), 0, data.size(), wire, ncclSum, it->second, m.recv_stream);
  event_clock().end(m.label, m.recv_stream);
  m.record(r, m.recv_stream);
  return r;
}

Request NcclCommunicator::iall_gather(Channel ch, std::span<float> buffer, std::span<const int64_t> counts, Format wire) {
  return impl_->collective(ch, "an all-gather", plan_all_gather(counts, group_rank(ch.group)), buffer.data(), buffer.data(),
                           buffer.size(), buffer.size(), wire, ncclSum);
}

Request NcclCommunicator::ireduce_scatter(Channel ch, std::span<const float> send, std::span<float> recv,
                                          std::span<const int64_t> counts, Format wire) {
  return impl_->collective(ch, "a reduce-scatter", plan_reduce_scatter(counts), send.data(), recv.data(), send.size(),
                           recv.size(), wire, ncclSum);
}

Request NcclCommunicator::iall_reduce(Channel ch, std::span<float> buffer, Format wire) {
  return impl_->collective(ch, "an all-reduce", plan_all_reduce(static_cast<int64_t>(buffer.size())), buffer.data(),
                           buffer.data(), buffer.size(), buffer.size(), wire, ncclSum);
}

Request NcclCommunicator::iall_reduce_max(Channel ch, std::span<float> buffer) {
  return impl_->collective(ch, "a max all-reduce", plan_all_reduce(static_cast<int64_t>(buffer.size())), buffer.data(),
                           buffer.data(), buffer.size(), buffer.size(), Format::kFp32, ncclMax);
}

// The gradient norm's partial sums live on the host: through pinned staging and a device scratch,
// copied back when the request is seen complete (never a pageable copy, which would block the host).
Request NcclCommunicator::iall_reduce(Channel ch, std::span<double> buffer) {
  Impl& m = *impl_;
  const Impl::Chan& c = m.channel(ch);
  const Request r = m.acquire(c.comm, "an all-reduce of " + std::to_string(buffer.size()) + " doubles on " +
                                          program::to_string(ch.group) + "/" + program::to_string(ch.lane));
  Impl::Slot& s = m.slot(r);
  const std::size_t n = buffer.size();
  // grown rarely (at least 256 values), the device side from the pool: cudaFreeHost and cudaFree
  // wait for the whole device (wire_scratch says why that must not happen mid-step)
  if (s.pinned_elems < n) {
    if (s.pinned != nullptr) STAGECRAFT_CUDA_CHECK(cudaFreeHost(s.pinned));
    const std::size_t elems = std::max<std::size_t>(n, 256);
    STAGECRAFT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.pinned), elems * sizeof(double)));
    s.pinned_elems = elems;
  }
  if (s.device_elems < n) {
    device_pool().release(s.device);
    const std::size_t elems = std::max<std::size_t>(n, 256);
    s.device = static_cast<double*>(device_pool().allocate(elems * sizeof(double)));
    s.device_elems = elems;
  }
  std::memcpy(s.pinned, buffer.data(), n * sizeof(double));
  s.out = buffer;
  order_after_device_stream(c.stream);
  event_clock().start(m.label, c.stream);
  STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(s.device, s.pinned, n * sizeof(double), cudaMemcpyHostToDevice, c.stream));
  m.run(plan_all_reduce(static_cast<int64_t>(n)), s.device, s.device, NcclType::kFloat64, ncclSum, c.comm, c.stream);
  STAGECRAFT_CUDA_CHECK(cudaMemcpyAsync(s.pinned, s.device, n * sizeof(double), cudaMemcpyDeviceToHost, c.stream));
  event_clock().end(m.label, c.stream);
  m.record(r, c.stream);
  return r;
}

Request NcclCommunicator::iall_gather_typed(Channel, TypedSpan, std::span<const int64_t>) {
  throw CommError("NcclCommunicator: ZeRO++'s quantized gathers move host payloads (the quantizers run on the host); the "
                  "NCCL transport does not carry them yet: run qwZ plans on the CPU executor");
}

Request NcclCommunicator::iall_to_all(Channel, TypedSpan, std::span<const int64_t>, TypedSpan, std::span<const int64_t>) {
  throw CommError("NcclCommunicator: qgZ's and Ulysses' all-to-alls are not carried by the NCCL transport yet: run those "
                  "plans on the CPU executor");
}

bool NcclCommunicator::test(Request& r) {
  Impl& m = *impl_;
  Impl::Slot& s = m.slot(r);
  const cudaError_t q = cudaEventQuery(s.event);
  if (q == cudaSuccess) {
    m.complete(r);
    return true;
  }
  if (q != cudaErrorNotReady) {
    m.abort_all();
    throw CommError("NcclCommunicator: " + m.where() + ": " + s.what + " failed: " + cudaGetErrorName(q) + " (" +
                    cudaGetErrorString(q) + "); every NCCL communicator of this rank is aborted");
  }
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(s.comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
    m.abort_all();
    throw CommError("NcclCommunicator: " + m.where() + ": " + s.what + " failed: NCCL " + ncclGetErrorString(async) +
                    "; every NCCL communicator of this rank is aborted");
  }
  return false;
}

void NcclCommunicator::wait(Request& r) {
  Impl& m = *impl_;
  const auto start = std::chrono::steady_clock::now();
  while (!test(r)) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > m.deadline_s) {
      const std::string what = m.slot(r).what;
      const WatchdogReport report = control_.ask_watchdog();
      m.abort_all();
      throw CommError("NcclCommunicator: " + m.where() + ": " + what + " made no progress for " + std::to_string(m.deadline_s) +
                      " s; " + report.text() + "; every NCCL communicator of this rank is aborted");
    }
    std::this_thread::yield();
  }
}

}  // namespace stagecraft::executor::cuda
