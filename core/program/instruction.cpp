#include "core/program/instruction.hpp"

namespace stagecraft::program {

const char* to_string(Op op) {
  switch (op) {
    case Op::kForward: return "Forward";
    case Op::kBackward: return "Backward";
    case Op::kBackwardInput: return "BackwardInput";
    case Op::kBackwardWeight: return "BackwardWeight";
    case Op::kRecompute: return "Recompute";
    case Op::kSendActivation: return "SendActivation";
    case Op::kRecvActivation: return "RecvActivation";
    case Op::kSendGrad: return "SendGrad";
    case Op::kRecvGrad: return "RecvGrad";
    case Op::kGatherParams: return "GatherParams";
    case Op::kReleaseParams: return "ReleaseParams";
    case Op::kReduceScatterGrads: return "ReduceScatterGrads";
    case Op::kAllReduceGrads: return "AllReduceGrads";
    case Op::kAllGatherParams: return "AllGatherParams";
    case Op::kOptimizerStep: return "OptimizerStep";
    case Op::kOffloadCopy: return "OffloadCopy";
    case Op::kTpAllReduce: return "TpAllReduce";
    case Op::kTpReduceScatter: return "TpReduceScatter";
    case Op::kTpAllGather: return "TpAllGather";
    case Op::kGradNormAllReduce: return "GradNormAllReduce";
    case Op::kAllToAll: return "AllToAll";
    case Op::kCpAllGather: return "CpAllGather";
    case Op::kCpReduceScatter: return "CpReduceScatter";
  }
  return "?";
}

const char* to_string(Lane lane) {
  switch (lane) {
    case Lane::kCompute: return "compute";
    case Lane::kTp: return "tp";
    case Lane::kPpSend: return "pp-send";
    case Lane::kPpRecv: return "pp-recv";
    case Lane::kDpGather: return "dp-gather";
    case Lane::kDpReduce: return "dp-reduce";
    case Lane::kOffload: return "offload";
    case Lane::kDpReplica: return "dp-replica";
    case Lane::kCp: return "cp";
    case Lane::kEp: return "ep";
  }
  return "?";
}

const char* to_string(Group group) {
  switch (group) {
    case Group::kNone: return "none";
    case Group::kTp: return "tp";
    case Group::kDp: return "dp";
    case Group::kEmbedding: return "embedding";
    case Group::kWorld: return "world";
    case Group::kDpShard: return "dp-shard";
    case Group::kDpReplica: return "dp-replica";
    case Group::kDpLocal: return "dp-local";
    case Group::kDpCross: return "dp-cross";
    case Group::kDpShardCross: return "dp-shard-cross";
    case Group::kCp: return "cp";
    case Group::kEp: return "ep";
    case Group::kExpertDp: return "expert-dp";
    case Group::kExpertTp: return "expert-tp";
    case Group::kExpertTpEp: return "expert-tp-ep";
    case Group::kTpCp: return "tp-cp";
  }
  return "?";
}

const char* trace_kind(Op op) {
  switch (op) {
    case Op::kForward: return "forward";
    case Op::kBackward: return "backward";
    case Op::kBackwardInput: return "backward_input";
    case Op::kBackwardWeight: return "backward_weight";
    case Op::kRecompute: return "recompute";
    case Op::kSendActivation:
    case Op::kSendGrad: return "send";
    case Op::kRecvActivation:
    case Op::kRecvGrad: return "recv";
    case Op::kGatherParams:
    case Op::kAllGatherParams:
    case Op::kTpAllGather:
    case Op::kCpAllGather: return "gather";
    case Op::kReleaseParams: return "release";
    case Op::kReduceScatterGrads:
    case Op::kTpReduceScatter:
    case Op::kCpReduceScatter: return "reduce_scatter";
    case Op::kAllReduceGrads:
    case Op::kTpAllReduce:
    case Op::kGradNormAllReduce: return "all_reduce";
    case Op::kAllToAll: return "all_to_all";
    case Op::kOptimizerStep: return "optimizer";
    case Op::kOffloadCopy: return "offload";
  }
  return "?";
}

}  // namespace stagecraft::program
