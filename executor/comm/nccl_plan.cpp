#include "executor/comm/nccl_plan.hpp"

#include <algorithm>

namespace stagecraft::executor {

namespace {

bool all_equal(std::span<const int64_t> counts) {
  return std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts.front(); });
}

}  // namespace

NcclType nccl_type(Format wire) {
  switch (wire) {
    case Format::kBf16: return NcclType::kBfloat16;
    case Format::kFp16: return NcclType::kFloat16;
    case Format::kFp32: break;
  }
  return NcclType::kFloat32;
}

NcclType nccl_type(ElemType type) { return type == ElemType::kInt8 ? NcclType::kInt8 : NcclType::kFloat32; }

const char* to_string(NcclType t) {
  switch (t) {
    case NcclType::kInt8: return "ncclInt8";
    case NcclType::kFloat16: return "ncclFloat16";
    case NcclType::kFloat32: return "ncclFloat32";
    case NcclType::kFloat64: return "ncclFloat64";
    case NcclType::kBfloat16: return "ncclBfloat16";
  }
  return "?";
}

const char* to_string(NcclCall c) {
  switch (c) {
    case NcclCall::kAllGather: return "ncclAllGather";
    case NcclCall::kReduceScatter: return "ncclReduceScatter";
    case NcclCall::kAllReduce: return "ncclAllReduce";
    case NcclCall::kBroadcast: return "ncclBroadcast";
    case NcclCall::kReduce: return "ncclReduce";
    case NcclCall::kSend: return "ncclSend";
    case NcclCall::kRecv: return "ncclRecv";
  }
  return "?";
}

NcclPlan plan_all_gather(std::span<const int64_t> counts, int64_t me) {
  NcclPlan plan;
  if (counts.empty()) return plan;
  if (all_equal(counts)) {
    const int64_t c = counts.front();
    if (c > 0) plan.steps.push_back({NcclCall::kAllGather, me * c, 0, c, -1});
    return plan;
  }
  plan.grouped = true;
  int64_t offset = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > 0) plan.steps.push_back({NcclCall::kBroadcast, offset, offset, counts[i], static_cast<int64_t>(i)});
    offset += counts[i];
  }
  return plan;
}

NcclPlan plan_reduce_scatter(std::span<const int64_t> counts) {
  NcclPlan plan;
  if (counts.empty()) return plan;
  if (all_equal(counts)) {
    const int64_t c = counts.front();
    if (c > 0) plan.steps.push_back({NcclCall::kReduceScatter, 0, 0, c, -1});
    return plan;
  }
  plan.grouped = true;
  int64_t offset = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    // the root's output is its piece; the others' is unused (nccl.h: recvbuff only used on the root)
    if (counts[i] > 0) plan.steps.push_back({NcclCall::kReduce, offset, 0, counts[i], static_cast<int64_t>(i)});
    offset += counts[i];
  }
  return plan;
}

NcclPlan plan_all_reduce(int64_t count) {
  NcclPlan plan;
  if (count > 0) plan.steps.push_back({NcclCall::kAllReduce, 0, 0, count, -1});
  return plan;
}

NcclPlan plan_all_to_all(std::span<const int64_t> send_counts, std::span<const int64_t> recv_counts) {
  NcclPlan plan;
  plan.grouped = true;
  int64_t offset = 0;
  for (std::size_t j = 0; j < send_counts.size(); ++j) {
    if (send_counts[j] > 0) plan.steps.push_back({NcclCall::kSend, offset, 0, send_counts[j], static_cast<int64_t>(j)});
    offset += send_counts[j];
  }
  offset = 0;
  for (std::size_t j = 0; j < recv_counts.size(); ++j) {
    if (recv_counts[j] > 0) plan.steps.push_back({NcclCall::kRecv, 0, offset, recv_counts[j], static_cast<int64_t>(j)});
    offset += recv_counts[j];
  }
  return plan;
}

}  // namespace stagecraft::executor
