// NcclCommunicator: the Communicator over NCCL, for a backend whose buffers are device memory (the
// CUDA backend): the interpreter's views go to NCCL as they are. One rank per GPU.
//
// Bootstrap (CUDA.md §3.1, as nccl-tests and llm.c do it) over a control-plane Communicator
// (MpiCommunicator under mpirun or srun; LocalCommunicator for a world of one, no MPI): every
// rank's host hash (hostname and boot id) all-gathered; the device is the launcher's local rank
// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) or the rank's index among its host's ranks
// (comm/channels.hpp local_rank), modulo the host's devices; rank 0's ncclGetUniqueId broadcast;
// the world communicator made by ncclCommInitRankConfig. From it ncclCommSplit makes, by the
// rule MpiCommunicator follows (comm/channels.hpp group_splits), one communicator per channel
// (group, lane) — collectives of one lane never interleave with another's — and one two-member
// communicator per (pipeline edge, message class) (p2p_rounds): NCCL matches point-to-point by
// order, without tags, so each carries one FIFO in one direction, which the pp-send lane feeds on
// one side and the pp-recv lane drains on the other. Each channel, and each of the two p2p lanes,
// has a CUDA stream of its own (greatest priority, as NCCL's own users create them).
//
// Operations: the calls of comm/nccl_plan.hpp (uneven pieces by grouped broadcasts and reduces)
// enqueued on the channel's stream, then an event; a Request is that event. test() queries it and,
// while it is not done, ncclCommGetAsyncError on its communicator: an error aborts every
// communicator (ncclCommAbort, which also stops kernels still running) and throws CommError naming
// the rank and the call. wait() polls test() until the progress deadline (set_progress_deadline),
// past which it aborts and throws. Buffers are fp32 device memory; a 16-bit wire (a bf16 or fp16
// Program's messages and reductions, precision.hpp) is packed to 16 bits in a scratch of the
// request, carried as ncclBfloat16 / ncclFloat16 and unpacked, in the stream's order; the gradient
// norm's double all-reduce goes through a device scratch. Not carried (CommError naming them): the
// typed collectives of ZeRO++'s quantized gathers and qgZ, whose payloads are host memory today.
//
// Order: each operation first waits (an event) for the work enqueued on the compute stream until
// it is posted (buffers.hpp order_after_device_stream): the backend issues asynchronously.
// Timing: each operation's calls are bracketed by the device's event clock (event_clock.hpp) on
// its stream, under the label the interpreter gave it (label_next).
//
// The control plane (barrier, metrics, checkpoint bookkeeping) is the bootstrap communicator's.
#pragma once

#include <memory>

#include "core/program/program.hpp"
#include "executor/comm/communicator.hpp"

namespace stagecraft::executor::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `control` (which must outlive this object): builds every communicator of
  // `prog`'s placement, a point-to-point one for each stage edge its sends use. Throws
  // ExecutorError (no device, a world that is not the placement's) or CommError.
  NcclCommunicator(const program::Program& prog, Communicator& control);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  void label_next(int32_t instr) override;
  void set_progress_deadline(double seconds) override;
  WatchdogReport ask_watchdog() override { return control_.ask_watchdog(); }

  int64_t rank() const override;
  int64_t size() const override;
  int64_t group_rank(program::Group group) const override;
  int64_t group_size(program::Group group) const override;
  // The device this rank drives, and where its index came from (the launcher's variable or the host hash).
  int device() const;
  const std::string& device_source() const;

  Request isend(std::span<const float> data, int64_t peer, int32_t tag, Format wire) override;
  Request irecv(std::span<float> data, int64_t peer, int32_t tag, Format wire) override;
  Request iall_gather(Channel ch, std::span<float> buffer, std::span<const int64_t> counts, Format wire) override;
  Request ireduce_scatter(Channel ch, std::span<const float> send, std::span<float> recv, std::span<const int64_t> counts,
                          Format wire) override;
  Request iall_reduce(Channel ch, std::span<float> buffer, Format wire) override;
  Request iall_reduce(Channel ch, std::span<double> buffer) override;
  Request iall_reduce_max(Channel ch, std::span<float> buffer) override;
  Request iall_gather_typed(Channel ch, TypedSpan buffer, std::span<const int64_t> counts) override;
  Request iall_to_all(Channel ch, TypedSpan send, std::span<const int64_t> send_counts, TypedSpan recv,
                      std::span<const int64_t> recv_counts) override;
  bool test(Request& r) override;
  void wait(Request& r) override;

  void barrier() override { control_.barrier(); }
  std::vector<int64_t> all_gather(int64_t value) override { return control_.all_gather(value); }
  double all_reduce_sum(double value) override { return control_.all_reduce_sum(value); }
  double all_reduce_max(double value) override { return control_.all_reduce_max(value); }
  std::vector<std::string> gather_to_root(const std::string& blob) override { return control_.gather_to_root(blob); }
  std::string broadcast_from_root(const std::string& blob) override { return control_.broadcast_from_root(blob); }

 private:
  struct Impl;
  Communicator& control_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagecraft::executor::cuda
