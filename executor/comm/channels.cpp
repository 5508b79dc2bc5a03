#include "executor/comm/channels.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>

#include "core/text/hash.hpp"
#include "executor/errors.hpp"

namespace stagecraft::executor {

namespace {

using program::Group;
using program::Lane;

constexpr std::array<Group, 4> kCollectiveGroups = {Group::kTp, Group::kDp, Group::kEmbedding, Group::kWorld};
constexpr std::array<Lane, 3> kCollectiveLanes = {Lane::kTp, Lane::kDpGather, Lane::kDpReduce};
// Hierarchical ZeRO's data-parallel subgroups and the lanes that use them (only where the placement
// has them: Placement::inner or ::local set).
constexpr std::array<Group, 5> kSubgroups = {Group::kDpShard, Group::kDpReplica, Group::kDpLocal, Group::kDpCross,
                                             Group::kDpShardCross};
constexpr std::array<Lane, 3> kSubgroupLanes = {Lane::kDpGather, Lane::kDpReduce, Lane::kDpReplica};

}  // namespace

int64_t pipeline_color(const program::Placement& placement, int64_t rank) {
  return placement.dp_index_of(rank) * placement.tp + placement.tp_index_of(rank);
}

std::vector<GroupSplit> group_splits(const program::Placement& placement, int64_t rank) {
  const int64_t stage = placement.stage_of(rank), d = placement.dp_index_of(rank), t = placement.tp_index_of(rank);
  const bool on_embedding_stage = stage == 0 || stage == placement.pp - 1;
  const std::vector<Lane> lanes(kCollectiveLanes.begin(), kCollectiveLanes.end());
  std::vector<GroupSplit> out;
  for (Group g : kCollectiveGroups) {
    int64_t color = 0;  // the world: one group
    if (g == Group::kTp) color = stage * placement.dp + d;
    if (g == Group::kDp) color = stage * placement.tp + t;
    if (g == Group::kEmbedding) color = on_embedding_stage ? d * placement.tp + t : -1;
    out.push_back({g, color, lanes});
  }
  // context parallelism: the cp consecutive data-parallel ranks splitting a sequence, by their first member
  if (placement.cp > 1) out.push_back({Group::kCp, placement.group_members(Group::kCp, rank).front(), {Lane::kCp}});
  // expert parallelism: the ep consecutive ranks exchanging tokens, and the ranks holding the same
  // experts (their gradients' reductions and ZeRO gathers), each by its first member
  if (placement.ep > 1) out.push_back({Group::kEp, placement.group_members(Group::kEp, rank).front(), {Lane::kEp}});
  // expert tensor parallelism: the etp consecutive ranks splitting each expert's width
  if (placement.etp > 1) out.push_back({Group::kExpertTp, placement.group_members(Group::kExpertTp, rank).front(), {Lane::kEp}});
  // the all-gather token dispatcher: the etp·ep consecutive ranks of the expert grid
  if (placement.ep * placement.etp > 1) {
    out.push_back({Group::kExpertTpEp, placement.group_members(Group::kExpertTpEp, rank).front(), {Lane::kEp}});
  }
  // the balancing loss's token counts: the tp·cp ranks splitting a micro-batch's tokens
  if (placement.moe_counts) out.push_back({Group::kTpCp, placement.group_members(Group::kTpCp, rank).front(), {Lane::kTp}});
  if (placement.experts_apart) {
    out.push_back({Group::kExpertDp, placement.group_members(Group::kExpertDp, rank).front(), {Lane::kDpGather, Lane::kDpReduce}});
  }
  if (placement.inner == 0 && placement.local == 0) return out;
  // each subgroup kind partitions the world, its groups split by their first member; a kind the
  // placement leaves this rank out of (dp-shard-cross when a node is larger than the shard group)
  // gets no communicator
  const std::vector<Lane> sub(kSubgroupLanes.begin(), kSubgroupLanes.end());
  for (Group g : kSubgroups) {
    const std::vector<int64_t> members = placement.group_members(g, rank);
    const bool in = std::find(members.begin(), members.end(), rank) != members.end();
    out.push_back({g, in ? members.front() : -1, sub});
  }
  return out;
}

std::vector<StageEdge> pipeline_edges(const program::Program& prog) {
  std::vector<StageEdge> out;
  for (int64_t r = 0; r < prog.placement.world(); ++r) {
    if (prog.placement.dp_index_of(r) != 0 || prog.placement.tp_index_of(r) != 0) continue;  // one pipeline's ranks
    const auto stage = static_cast<int64_t>(prog.placement.stage_of(r));
    for (const program::Instr& in : prog.rank(r)) {
      if (!program::is_send(in.op)) continue;
      out.push_back({stage, in.peer_stage, in.op == program::Op::kSendGrad ? P2pClass::kGrad : P2pClass::kActivation});
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<P2pRound> p2p_rounds(const program::Placement& placement, const std::vector<StageEdge>& edges) {
  const int64_t world = placement.world();
  std::vector<std::vector<StageEdge>> by_round;
  std::vector<std::vector<char>> used;  // [round][stage]
  for (const StageEdge& e : edges) {
    std::size_t k = 0;
    while (k < by_round.size() && (used[k][static_cast<std::size_t>(e.from)] || used[k][static_cast<std::size_t>(e.to)])) ++k;
    if (k == by_round.size()) {
      by_round.emplace_back();
      used.emplace_back(static_cast<std::size_t>(placement.pp), 0);
    }
    by_round[k].push_back(e);
    used[k][static_cast<std::size_t>(e.from)] = used[k][static_cast<std::size_t>(e.to)] = 1;
  }
  std::vector<P2pRound> out;
  for (const std::vector<StageEdge>& stage_edges : by_round) {
    P2pRound round;
    round.color.assign(static_cast<std::size_t>(world), -1);
    for (int64_t r = 0; r < world; ++r) {
      if (placement.stage_of(r) != 0) continue;  // one pipeline per stage-0 rank
      const int64_t d = placement.dp_index_of(r), t = placement.tp_index_of(r);
      for (const StageEdge& e : stage_edges) {
        const int64_t a = placement.rank(e.from, d, t), b = placement.rank(e.to, d, t);
        const auto color = static_cast<int64_t>(round.edges.size());
        round.color[static_cast<std::size_t>(a)] = color;
        round.color[static_cast<std::size_t>(b)] = color;
        round.edges.push_back({a, b, e.cls});
      }
    }
    out.push_back(std::move(round));
  }
  return out;
}

LocalRank local_rank(const std::vector<uint64_t>& host_hashes, int64_t rank, const EnvLookup& env) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* v = env(name);
    if (v == nullptr) continue;
    const std::string text = v;
    int64_t index = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
    if (ec != std::errc() || end != text.data() + text.size() || index < 0) {
      throw CommError(std::string(name) + " is \"" + text + "\", expected a non-negative integer (the launcher's local rank)");
    }
    return {index, name};
  }
  if (rank < 0 || rank >= static_cast<int64_t>(host_hashes.size())) {
    throw CommError("local_rank: rank " + std::to_string(rank) + " outside the " + std::to_string(host_hashes.size()) +
                    " host hashes");
  }
  const uint64_t mine = host_hashes[static_cast<std::size_t>(rank)];
  const auto lower = std::count(host_hashes.begin(), host_hashes.begin() + rank, mine);
  return {static_cast<int64_t>(lower), "host hash"};
}

uint64_t host_hash() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  std::string id = name;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string line;
  if (std::getline(boot, line)) id += line;
  return text::fnv1a(id.data(), id.size());
}

}  // namespace stagecraft::executor
