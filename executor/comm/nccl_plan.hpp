// The NCCL calls that carry out one Communicator operation on one member (CUDA.md §3.4), as data,
// so that the rule exists once and is checked on CPU (tests/executor/test_nccl_plan.cpp runs every
// member's calls through an emulation of NCCL's semantics); executor/cuda/nccl_communicator.cpp
// issues them.
//
// NCCL has no v-variants (no ncclAllGatherv), and our buckets' pieces per member are uneven
// (StageLayout::shard_counts):
//   all-gather      equal counts: ncclAllGather in place (sendbuff = recvbuff + me·c, which NCCL
//                   supports as in-place); else one group of ncclBroadcast(root i, piece i in place),
//                   one per member with a non-empty piece — PyTorch ProcessGroupNCCL's uneven
//                   fallback (allgather_into_tensor_coalesced / _allgather_base with uneven splits)
//   reduce-scatter  equal counts: ncclReduceScatter; else one group of ncclReduce(root i, piece i of
//                   the input, into the output on the root), one per non-empty piece
//   all-reduce      ncclAllReduce (sum or max) in place
//   all-to-all      one group of ncclSend / ncclRecv per member with a non-empty piece, itself
//                   included (NCCL lets a rank send to itself inside a group), sends first
// Every member of a communicator issues the same collective calls (kind, root, count) in the same
// order — NCCL matches them by position, so a plan is the same on every member but for its own
// offsets.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "executor/comm/communicator.hpp"

namespace stagecraft::executor {

// nccl.h's ncclDataType_t values (NCCL 2.x: ncclInt8 0, ncclFloat16 6, ncclFloat32 7,
// ncclFloat64 8, ncclBfloat16 9), which the CUDA transport casts.
enum class NcclType : int { kInt8 = 0, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9 };
NcclType nccl_type(Format wire);
NcclType nccl_type(ElemType type);
const char* to_string(NcclType t);

enum class NcclCall : uint8_t { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kReduce, kSend, kRecv };
const char* to_string(NcclCall c);

// One call. Offsets and counts are in elements: `send` into the operation's input buffer (the
// in-place all-gather's buffer for both), `recv` into its output; `peer` is the root of a
// broadcast or reduce, or a send's or receive's member (indices in the communicator).
struct NcclStep {
  NcclCall call = NcclCall::kAllReduce;
  int64_t send = 0, recv = 0, count = 0;
  int64_t peer = -1;
  bool operator==(const NcclStep&) const = default;
};

struct NcclPlan {
  bool grouped = false;  // inside one ncclGroupStart / ncclGroupEnd
  std::vector<NcclStep> steps;
};

// Member `me`'s calls: `counts[i]` the piece of member i (in member order).
NcclPlan plan_all_gather(std::span<const int64_t> counts, int64_t me);
NcclPlan plan_reduce_scatter(std::span<const int64_t> counts);
NcclPlan plan_all_reduce(int64_t count);
NcclPlan plan_all_to_all(std::span<const int64_t> send_counts, std::span<const int64_t> recv_counts);

}  // namespace stagecraft::executor
