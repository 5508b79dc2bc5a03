// Cost cache of one simulation: the contention-free durations of its communication, from the
// collective model (models/collectives.hpp) over each group's own placement.
//   * a collective: T = CollectiveCost(kind of the op, the group's GPUs).time_ns(S); every group of
//     the simulated ranks is timed over its own placement, so a stage whose data-parallel group
//     straddles nodes differently from another's gets its own cost. Groups whose placements differ
//     by whole nodes share a cost: the topology is the same seen from every node
//     (network/topology.hpp). The few sizes a group asks for last (buckets alternate) are kept;
//   * the gradient-norm all-reduce: NCCL's all-reduce of its few bytes over the world (collectives.hpp);
//   * a send on its own: latency + ⌈bytes·1e9 / narrowest link⌉ (CollectiveCost send/recv), the
//     time a flow alone on its route takes on the FlowNetwork;
//   * a data-parallel bucket the framework moves as k collectives (Program::collectives_of,
//     spec/framework.hpp), and the framework's own work around them:
//         T = k · T₁(⌈S/k⌉) + passes · S / (hbm_Bps · memory_efficiency) + k · n · host_s_per_rank
//             (+ k · host_s_per_gather for a ZeRO-3 gather)
//     T₁ the collective model of one piece, ⌈S/k⌉ = program::collective_piece (the executor issues
//     those pieces; the bucket's tensors taken as equal: exact in the
//     latency and bandwidth terms, approximate only where pieces of very different sizes would
//     pick different protocols); passes the extra HBM bytes per byte the framework copies
//     (gather_copy_passes for a ZeRO-3 gather, reduce_copy_passes for a gradient reduction); n the
//     group size. The copies and host work are on the collective's stream, so they delay it.
//     With offload_param a ZeRO-3 gather first copies the rank's shard, S/n bytes, from pinned host
//     memory: + (S/n) / host.pcie_Bps (DeepSpeed's partitioned_param_coordinator moves ds_tensor to
//     the device before the all-gather).
//   * ZeRO++'s quantize kernels (memory-bound, on the collective's stream: DeepSpeed quantizes and
//     dequantizes on its all-gather stream, partitioned_param_coordinator.py, and on its reduction
//     stream for qgZ), as HBM bytes at the contiguous rate, with e the elements an instruction
//     stands for (Instr::elems), w the parameter bytes, W the group size, L the qgZ node's ranks:
//         qwZ gather       (3w + 1)·e/W   the shards concatenated (read and write w) and quantized
//                                         (read w, write 1) before the gather
//                          + 3·e          the gathered int8 dequantized to fp16 (read 1, write 2)
//                          + 4·e if w = 2 and bf16: cast to fp16 and back (read and write 2 each)
//         qgZ, first level (w + ½)·e      swizzled and quantized to int4 (read w, write ½)
//         qgZ, second      (L/2 + 5 + 2/N)·e, e = n/L the node's share: the L received int4 chunks
//                                         dequantized, summed and requantized (read L·e/2, write e/2),
//                                         then the N chunks from the other nodes dequantized (read
//                                         e/2, write 2e) and averaged (read 2e, write 2e/N)
//     The fp32 scales (one per group of 8000 weights, of max(d, W) gradients) are not charged.
// Internal to the simulator; one per simulation (not thread-safe).
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/cluster.hpp"
#include "sim/models/collectives.hpp"
#include "sim/network/topology.hpp"

namespace stagecraft::sim {

// The framework's part of a collective instruction (see above): how many pieces it goes in, the
// HBM bytes copied around it and the host seconds exposed, for a group of `group_size`.
struct FrameworkWork {
  int32_t pieces = 1;
  double copy_bytes = 0;
  double host_s = 0;
  double host_copy_bytes = 0;   // over PCIe first (offload_param: the rank's shard, host to device)
  // What it adds to the pieces' collective time, seconds: the copies at `hbm_Bps` (the GPU's
  // contiguous rate), the host work, the PCIe copy at `pcie_Bps`.
  double extra_s(double hbm_Bps, double pcie_Bps) const {
    return copy_bytes / hbm_Bps + host_s + (host_copy_bytes > 0 ? host_copy_bytes / pcie_Bps : 0.0);
  }
};
// A data-parallel bucket collective as framework_work sees it, and the Program's facts it reads:
// what the planner's bounds time without lowering (planner/prune_zero.cpp) and the simulator alike.
struct BucketCollective {
  program::Op op = program::Op::kGatherParams;
  uint8_t flags = program::kFlagNone;
  int64_t bytes = 0, elems = 0;
  int32_t pieces = 1;            // Program::collectives_of
  int64_t param_bytes = 2;       // Program::param_bytes
  bool bf16 = false;             // the training's storage dtype is bf16
  int64_t local_size = 1, dp = 1;  // Placement::local_size(), the data-parallel size (qgZ)
  bool offload_param = false;
};
FrameworkWork framework_work(const spec::FrameworkProfile& framework, const BucketCollective& c, int64_t group_size);
FrameworkWork framework_work(const program::Program& prog, const spec::FrameworkProfile& framework,
                             const program::Instr& in, int64_t group_size);

// Data-parallel bytes one GPU sends to other nodes per micro-batch, the most of any pipeline
// stage (its first rank): for each data-parallel collective of S bytes over n ranks on N > 1 nodes,
// k = n/N of them on a node — a ring (all-gather, reduce-scatter) sends S·(n − 1)/n / k, the node's
// crossing spread over its k members' NICs; an all-reduce twice that; an all-to-all S·(n − k)/n,
// each member its own. ZeRO-3 on 16-bit parameters sends about 3·2P/k a micro-batch; DeepSpeed's
// ZeRO++ volume table counts the same traffic (3M → 0.75M, blogs/zeropp).
double dp_internode_bytes_per_micro_batch(const program::Program& prog, int64_t gpus_per_node);
// Expert parallelism: the bytes a GPU sends a step in its all-to-alls over Group::kEp — the first
// rank of the stage that sends the most (a stage of dense layers sends none) —, each of S bytes
// sending S/n to every member (collectives.hpp), split into those to members on its node and those
// to members on other nodes (gpus_per_node consecutive ranks a node). The flex dispatcher's
// all-to-alls over Group::kExpertTpEp count what DeepEP puts on NVLink and on the network
// (dispatch_shares).
std::pair<double, double> ep_bytes_per_step(const program::Program& prog, int64_t gpus_per_node);

// The flex dispatcher's routing (collectives.hpp, Dispatch) of a model's experts over ep × etp ranks.
DispatchRouting dispatch_routing(const spec::Model& m, int64_t ep, int64_t etp);

class CostCache {
 public:
  CostCache(const program::Program& prog, const Topology& topology, const spec::Cluster& cluster);

  // The id of the group of `kind` that contains `rank` (ranks with equal member lists share it).
  int32_t group_of(program::Group kind, int64_t rank);
  std::span<const int64_t> members(int32_t group) const { return groups_[static_cast<std::size_t>(group)]; }

  // Contention-free time of a collective instruction over `group`.
  int64_t collective_ns(const program::Instr& in, int32_t group);
  // The memo key of an instruction's collective time: its bytes and its collective count.
  static int64_t memo_key(int64_t bytes, int32_t collectives) { return bytes | (int64_t{collectives} << 44); }
  // A flow's bytes per byte of the plain all-to-all's for this collective (CollectiveCost::flow_scale).
  double flow_scale(const program::Instr& in, int32_t group);
  // A send of `bytes` from src to dst alone on its route.
  int64_t p2p_ns(int64_t src, int64_t dst, int64_t bytes);

 private:
  int32_t group_of_members(std::vector<int64_t> members);   // the id of this member list (new ones registered)
  struct Entry {
    std::optional<CollectiveCost> cost;
    std::array<int64_t, 8> bytes{-1, -1, -1, -1, -1, -1, -1, -1};  // a few recent sizes: buckets alternate
    std::array<int64_t, 8> ns{};
    uint32_t next = 0;   // the slot to overwrite next
    uint32_t last = 0;   // the slot that answered last
  };

  int64_t one_ns(const program::Instr& in, int32_t shape, int64_t bytes);
  Entry& entry(const program::Instr& in, int32_t shape);
  // the flex dispatcher's all-to-alls (over the experts' grid) move as DeepEP does
  static bool is_dispatch(const program::Instr& in) {
    return in.op == program::Op::kAllToAll && in.group == program::Group::kExpertTpEp;
  }

  const program::Program& prog_;
  const Topology& topology_;
  int64_t gpus_per_node_ = 1;
  spec::FrameworkProfile framework_;
  double hbm_Bps_ = 0;   // sustained HBM rate for the framework's copies
  double pcie_Bps_ = 0;  // host <-> device, for offloaded parameter shards
  std::optional<CollectiveCost> gradnorm_;   // the whole world's all-reduce
  std::vector<std::vector<int64_t>> groups_;
  std::map<std::vector<int64_t>, int32_t> group_ids_;
  int32_t world_group_ = -1;   // every rank's world group is the same: found once (16,384 members at 16K GPUs)
  std::vector<int32_t> shape_of_;                        // group -> its placement shifted to node 0
  std::vector<std::vector<int64_t>> shapes_;
  std::map<std::vector<int64_t>, int32_t> shape_ids_;
  std::vector<int32_t> entry_of_;   // shape * kOpCount + op -> index into entries_, −1 none yet
  std::vector<int32_t> dispatch_entry_of_;   // shape -> index into entries_ of its dispatch, −1 none yet
  DispatchRouting routing_;
  std::vector<Entry> entries_;
  std::unordered_map<uint64_t, CollectiveCost> p2p_;   // (src, dst) -> send/recv cost
  uint64_t last_p2p_key_ = ~uint64_t{0};               // the send asked for last (one message size per plan)
  int64_t last_p2p_bytes_ = -1, last_p2p_ns_ = 0;
};

}  // namespace stagecraft::sim
