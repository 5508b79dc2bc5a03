// MpiCommunicator: the Communicator over MPI (CPU executor; built only with STAGECRAFT_WITH_MPI).
// Sub-communicators come from the Program's Placement with MPI_Comm_split: tp, pp (the
// pipeline peers, used for point-to-point), dp, embedding (stages 0 and p-1 of one replica
// position), world and, when the placement has them (hierarchical or quantized ZeRO), the
// data-parallel subgroups (dp-shard, dp-replica, dp-local, dp-cross, dp-shard-cross); every
// collective group is duplicated per lane so that the collectives each lane issues in Program
// order never interleave with another lane's on the same communicator. Requests are
// MPI_Isend/Irecv, MPI_Iallgather(v), MPI_Ireduce_scatter(_block), MPI_Iallreduce and
// MPI_Ialltoallv (int8 or float); the control plane runs on its own duplicate of MPI_COMM_WORLD.
// Every MPI call is checked (MPI_CHECK: mpi::MpiError naming the call, file and line); errors
// are returned, not fatal, on every communicator it creates. Blobs of the control plane travel
// with mpi::gather_bytes / broadcast_bytes.
//
// The watchdog (docs/reliability.md, "A stopped rank"): no call blocks inside MPI. wait() and the
// control plane (non-blocking collectives) poll their request; a rank that polls, there or in
// test(), answers pings on a duplicate of the world of its own. A wait without progress for the
// deadline (set_progress_deadline; run --watchdog, 300 s by default) pings every other rank and
// throws CommError naming those that did not answer within the grace (a fifth of the deadline,
// 1-30 s): a stopped rank ends the job with its number instead of stalling it forever.
//
// Built into stagecraft_executor_mpi (with STAGECRAFT_WITH_MPI). MPI itself is initialised and
// finalised by an mpi::Session (executor::World owns one). Not NCCL (that is the CUDA backend's
// job), not a launcher.
#pragma once

#include <memory>

#include "core/program/program.hpp"
#include "executor/comm/communicator.hpp"

namespace stagecraft::executor {

class MpiCommunicator final : public Communicator {
 public:
  // Builds the groups of `placement` over MPI_COMM_WORLD (collective: every rank must call it).
  // Throws ExecutorError when the world's size is not placement.world().
  explicit MpiCommunicator(const program::Placement& placement);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  void set_progress_deadline(double seconds) override;
  WatchdogReport ask_watchdog() override;

  int64_t rank() const override;
  int64_t size() const override;
  int64_t group_rank(program::Group group) const override;
  int64_t group_size(program::Group group) const override;

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

  void barrier() override;
  std::vector<int64_t> all_gather(int64_t value) override;
  double all_reduce_sum(double value) override;
  double all_reduce_max(double value) override;
  std::vector<std::string> gather_to_root(const std::string& blob) override;
  std::string broadcast_from_root(const std::string& blob) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stagecraft::executor
