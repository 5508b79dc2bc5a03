// The communicators a rank joins, once for every transport (MpiCommunicator's MPI_Comm_split,
// NcclCommunicator's ncclCommSplit): each Program group as a split of the world by a colour
// (members in increasing world rank: the key is the world rank), the lanes that get a channel of
// their own on it (Communicator's Channel: one communicator per (group, lane), so the collectives
// each lane issues in Program order never interleave with another lane's), and the pipeline
// group the point-to-point messages travel in.
//
// NCCL matches point-to-point messages by order, without tags, and runs one stream's operations
// one after another; the pipeline's sends and receives are separate lanes (pp-send, pp-recv). So a
// transport without tags gives each (pipeline edge, message class) a two-member communicator of its
// own: activations go down an edge s -> s+1 (and the interleaved schedule's wrap p-1 -> 0), input
// gradients back up — the edges the Program's sends use; each such communicator carries one FIFO of
// one class in one direction, used by one lane on each side (the sender's pp-send, the receiver's
// pp-recv). They are made in split rounds in which every rank is in at most one edge (CUDA.md §3.3).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/program/program.hpp"

namespace stagecraft::executor {

// One Program group as a split of the world: `color` < 0 where this rank is not a member.
struct GroupSplit {
  program::Group group = program::Group::kWorld;
  int64_t color = -1;
  std::vector<program::Lane> lanes;  // each gets a communicator (channel) of its own
};
// Every group of `placement`, in one order for every rank (splits are collective over the world).
std::vector<GroupSplit> group_splits(const program::Placement& placement, int64_t rank);
// The pipeline group of `rank`: the ranks of its (dp, tp) position, one per stage.
int64_t pipeline_color(const program::Placement& placement, int64_t rank);

// A message class: activations (flowing down the pipeline, stage s to s + 1 and the interleaved
// wrap p-1 to 0) or input gradients (flowing up), the tag's lowest bit (p2p_class).
enum class P2pClass : uint8_t { kActivation, kGrad };
// Messages of one class from stage `from` to stage `to` (the same for every (dp, tp) position).
struct StageEdge {
  int64_t from = 0, to = 0;
  P2pClass cls = P2pClass::kActivation;
  auto operator<=>(const StageEdge&) const = default;
};
// Every stage edge the Program's sends use, sorted.
std::vector<StageEdge> pipeline_edges(const program::Program& prog);
// A two-member communicator of point-to-point messages: `sender` -> `receiver` (world ranks).
struct P2pEdge {
  int64_t sender = 0, receiver = 0;
  P2pClass cls = P2pClass::kActivation;
};
// One split round over the world: the colour of each world rank (-1: not in any edge this round)
// and the edges it makes (colour i: edges[i]).
struct P2pRound {
  std::vector<int64_t> color;   // by world rank
  std::vector<P2pEdge> edges;   // by colour
};
// The rounds that make a communicator for each of `edges` in every pipeline of `placement`: the
// stage edges taken in order, each into the first round where neither of its stages is yet (so a
// rank is in at most one edge a round: 2 rounds for a chain's two directions and classes each, one
// more for a wrap).
std::vector<P2pRound> p2p_rounds(const program::Placement& placement, const std::vector<StageEdge>& edges);

// Which device a rank drives: the launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK, then
// SLURM_LOCALID), else the number of lower world ranks on the same host (host_hashes, one per
// world rank, as nccl-tests' getHostHash: the hostname and the boot id), modulo the host's devices.
struct LocalRank {
  int64_t index = 0;
  std::string source;  // "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID" or "host hash"
};
// `env`: the environment lookup (std::getenv in production; a map in tests). Throws CommError for a
// launcher variable that is not a non-negative integer.
using EnvLookup = std::function<const char*(const char*)>;
LocalRank local_rank(const std::vector<uint64_t>& host_hashes, int64_t rank, const EnvLookup& env);
// FNV-1a of the hostname and the boot id (/proc/sys/kernel/random/boot_id), as nccl-tests hashes a host.
uint64_t host_hash();

}  // namespace stagecraft::executor
