// StageLayout: where one pipeline stage's parameters live in its single flat fp32 buffer, and
// how ZeRO cuts that buffer — positions only, no storage (zero/stage_state.hpp owns the buffers).
//
//   buffer   the stage's chunks' ParamLayouts end to end (chunk 0 first), N elements, padded
//            with zeros to g * S, S = ceil(N / g) (program::shard_elems), g the partition group
//            (spec::partition_group: zero.shard_group, else dp)
//   shard i  positions [i*S, (i+1)*S): what the rank at position i of its shard group (its g
//            consecutive dp ranks, dp index mod g) updates (ZeRO >= 1) and, with ZeRO-3, the only
//            non-persistent parameters it keeps between gathers; the dp/g replicas of a shard
//            (the replica group) hold identical copies of it
//   buckets  a Program bucket's units map to one contiguous range (units are contiguous in a
//            chunk's layout); its intersections with the shards, in shard order, are the counts of
//            the all-gather / reduce-scatter that moves it over the partition group
//   hpZ      (zero.hpz_group = h) a ZeRO-3 bucket's range cut in h consecutive slices of
//            ceil(size / h): the secondary partition; slice j is what the rank at position j of its
//            h-group (dp index mod h) keeps after the bucket's first gather of a step
//   split    ZeRO >= 1 where the routed experts' data-parallel group is not the dense one
//            (experts_apart): the optimizer partitions two sets apart, as Megatron-Core's
//            distributed optimizer keeps expert-parallel buffers of their own and DeepSpeed MoE its
//            expert parameter groups — the dense positions over the partition group (kDp), the
//            experts' over theirs (kExpertDp, edp ranks). Each set numbers its positions 0, 1, …
//            in flat order (its coordinates), is padded past N to a multiple of its group (the
//            dense padding first: padded_elems() = N + both paddings) and cut in equal shards of
//            consecutive coordinates; a gradient bucket holds one set's positions (they are
//            consecutive coordinates), and ZeRO 1-2's all-gather pieces are coordinate ranges of
//            one set. Without the split one set holds every position, coordinates = positions.
//   qgZ      (zero.quantized_gradients) a gradient bucket's matrices whose elements divide by 2·dp,
//            each reduced over its partitions tensor ∩ shard d (zero/qgz.hpp), and the other
//            tensors, reduce-scattered one by one
//   persistent (ZeRO-3, dp > 1) tensors below param_persistence_threshold: kept whole on every
//            rank, their gradients all-reduced and their Adam state replicated
//   norm-excluded  the tied head's copy of the embedding table on the last stage (pp > 1): its
//            gradient equals the table's own after the embedding all-reduce, so the global
//            gradient norm counts it once, on stage 0; and on tp ranks other than 0 the tensors
//            every tp rank holds whole (norms, row-parallel biases, positions), counted on tp rank 0
// Every tp rank of the stage has its own layout of the same shape: its shards of the tensors.
// Construction checks every size against the Program's (chunk params, bucket elements, qgZ's
// split) so a disagreement between the lowering and the model math is an error, not a silent
// mismatch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/program/program.hpp"
#include "executor/model/params.hpp"
#include "executor/precision.hpp"
#include "executor/zero/qgz.hpp"

namespace stagecraft::executor {

// qgZ's split of a gradient bucket (Program::collectives_of's all-to-all'd matrices and
// reduce-scattered fallbacks), in the layout's tensor order.
struct QgzSplit {
  std::vector<QgzMatrix> matrices;
  std::vector<Range> fallbacks;
  std::vector<Range> matrix_ranges() const;
};

class StageLayout {
 public:
  // Throws ExecutorError when the Program's sizes disagree with the model's layouts.
  StageLayout(const program::Program& prog, int64_t stage, int64_t dp_index, int64_t tp_index);

  int64_t stage() const { return stage_; }
  int64_t dp() const { return dp_; }  // the stage's data-parallel ranks: dp x cp (Placement::dp)
  int64_t dp_index() const { return dp_index_; }
  // The partition group: g ranks (zero.shard_group, else dp), this rank's position in it and which
  // of the dp/g replicas of its shard it holds.
  int64_t partition() const { return partition_; }
  int64_t partition_index() const { return dp_index_ % partition_; }
  int64_t replica_index() const { return dp_index_ / partition_; }
  int64_t tp_index() const { return tp_index_; }
  int zero_stage() const { return zero_stage_; }
  bool zero3_gathers() const { return zero_stage_ == 3 && dp_ > 1; }
  // The formats of the Program's tensors and traffic (precision.hpp).
  const Precision& precision() const { return precision_; }

  int64_t chunk_count() const { return static_cast<int64_t>(chunks_.size()); }
  const ParamLayout& chunk(int64_t c) const { return chunks_.at(static_cast<std::size_t>(c)); }
  int64_t chunk_offset(int64_t c) const { return offsets_.at(static_cast<std::size_t>(c)); }
  Range chunk_range(int64_t c) const { return {chunk_offset(c), chunk_offset(c) + chunk(c).size()}; }

  int64_t elems() const { return elems_; }                    // N
  int64_t shard_elems() const { return shard_; }              // S
  int64_t padded_elems() const { return padded_; }            // g * S (split: N + the sets' paddings)
  // Shard i of the partition (i < g).
  Range shard(int64_t i) const { return {i * shard_, (i + 1) * shard_}; }
  Range own_shard() const { return shard(partition_index()); }

  // The sets ZeRO >= 1 partitions (header): one, or with the split the dense set then the
  // experts'. A set's positions are increasing flat ranges, its coordinates 0 .. size-1 in that
  // order; `group` members each hold `shard` consecutive coordinates, this rank those of `index`;
  // `packed` is where that shard starts in the owned buffers (owned()); `reduced`: its gradients
  // reach the shard by a reduce-scatter (group > 1), else they stay in the local buffer.
  struct PartitionSet {
    std::vector<Range> positions;
    int64_t group = 1, index = 0, shard = 0, packed = 0;
    bool experts = false, reduced = false;
    Range coordinates(int64_t member) const { return {member * shard, (member + 1) * shard}; }
  };
  bool split() const { return split_; }
  const std::vector<PartitionSet>& partition_sets() const { return sets_; }
  // The set holding a bucket's positions: the experts' for a Bucket::experts one under the split.
  const PartitionSet& set_of(bool experts) const { return sets_.at(split_ && experts ? 1 : 0); }
  // The flat ranges of coordinates `c` of set `s`, in order; the coordinate of position `pos` (in s).
  std::vector<Range> positions(const PartitionSet& s, Range c) const;
  int64_t coordinate(const PartitionSet& s, int64_t pos) const;
  // |c ∩ member i's coordinates| for i < s.group: the counts of a collective over the set's group.
  std::vector<int64_t> member_counts(const PartitionSet& s, Range c) const;

  // What this rank's optimizer updates — the whole buffer (ZeRO-0), its shard, or under the split
  // its dense shard then its experts' — each flat range with its place in the packed buffers kept
  // for them (shard gradients, Adam moments, masters) and whether its gradients arrive reduced
  // into the packed shard gradients (else they are the local buffer's).
  struct Owned {
    Range flat;
    int64_t packed = 0;
    bool reduced = false;
  };
  const std::vector<Owned>& owned() const { return owned_; }
  int64_t owned_elems() const { return owned_elems_; }
  std::vector<Range> owned_ranges() const;  // the flat ranges, increasing

  // Flat positions of units [unit_begin, unit_end) of chunk `c`.
  Range units(int64_t c, int64_t unit_begin, int64_t unit_end) const;
  Range tensor(int64_t c, const std::string& name) const;
  Range grad_bucket(int32_t bucket) const;
  // The positions gradient bucket `bucket` reduces: its range, or where the experts' data-parallel
  // group is not the dense one (experts_apart), the range's routed-expert tensors (Bucket::experts)
  // or the rest.
  std::vector<Range> grad_bucket_parts(int32_t bucket) const;
  // Expert parallelism: ep ranks, this one's position (ParamLayout: its experts), whether the
  // experts' gradients are reduced over their own group (Group::kExpertDp, edp ranks), and the
  // flat ranges of the routed experts' tensors.
  int64_t ep() const { return ep_; }
  bool experts_apart() const { return experts_apart_; }
  const std::vector<Range>& expert_ranges() const { return experts_; }
  // What this rank counts in the global gradient norm and sends when the model is gathered: its
  // shard (under the split, its owned ranges); with experts apart at ZeRO-0, the dense positions of its shard over dp and the expert
  // positions of its shard over edp (the flat buffer cut in edp equal slices), so that over the
  // world each dense element counts once and each expert-parallel rank's experts once.
  std::vector<Range> counted() const;
  // ZeRO-3 gather buckets (flat positions) and ZeRO-1/2 all-gather pieces (coordinates of their set)
  Range param_bucket(int32_t bucket) const;
  // The embedding table whose gradient the embedding group all-reduces: unit 0's on stage 0,
  // the tied head's copy on the last stage.
  Range tied_table(int32_t unit) const;
  // |r ∩ shard i| for i = 0 .. g-1; these pieces tile r in the partition group's member order.
  std::vector<int64_t> shard_counts(Range r) const;

  // hpZ: the secondary group's size h (0 without hpZ), slice j of `bucket`, this rank's slice
  // (j = dp index mod h), and |r ∩ slice j| for j < h (they tile r in the h-group's order).
  int64_t hpz_group() const { return hpz_; }
  Range secondary_slice(Range bucket, int64_t j) const;
  Range own_secondary(Range bucket) const { return secondary_slice(bucket, dp_index_ % hpz_); }
  std::vector<int64_t> secondary_counts(Range bucket, Range r) const;
  // Data-parallel ranks of a node (Placement::local_size).
  int64_t local_group() const { return local_; }
  // qgZ's split of gradient bucket `bucket`: filled only for a bucket the Program reduces by qgZ
  // (Bucket::qgz_matrices + qgz_fallbacks > 0).
  bool qgz(int32_t bucket) const;
  const QgzSplit& qgz_split(int32_t bucket) const;

  const std::vector<Range>& decayed() const { return decayed_; }
  const std::vector<Range>& persistent() const { return persistent_; }
  const std::vector<Range>& norm_excluded() const { return norm_excluded_; }
  // The norms' weights and biases (merged, increasing): what sequence parallelism sums over tp.
  const std::vector<Range>& norms() const { return norms_; }
  int64_t persistent_elems() const { return persistent_elems_; }
  // Index of persistent position `pos` in the packed persistent buffers (pos must be persistent).
  int64_t persistent_index(int64_t pos) const;

 private:
  void check_against(const program::Program& prog) const;
  void build_qgz(const program::Program& prog);
  void build_sets();
  int64_t chunk_of_unit(int64_t unit) const;

  const program::Program* prog_;
  int64_t stage_ = 0, dp_ = 1, dp_index_ = 0, tp_index_ = 0;
  int64_t ep_ = 1, ep_index_ = 0, edp_ = 1, edp_index_ = 0;
  bool experts_apart_ = false;
  std::vector<Range> experts_;
  int64_t partition_ = 1, hpz_ = 0, local_ = 1;
  std::vector<QgzSplit> qgz_;              // by gradient bucket; empty for buckets not reduced by qgZ
  int zero_stage_ = 0;
  Precision precision_;
  std::vector<ParamLayout> chunks_;
  std::vector<int64_t> offsets_;
  int64_t elems_ = 0, shard_ = 0;
  std::vector<Range> decayed_, persistent_, norm_excluded_, norms_;
  std::vector<int64_t> persistent_prefix_;  // packed index of each persistent range's first element
  int64_t persistent_elems_ = 0;
  std::vector<Range> allgather_pieces_;     // by param bucket index (coordinates of its set); empty for other stages
  bool split_ = false;
  int64_t padded_ = 0;
  std::vector<PartitionSet> sets_;
  std::vector<Owned> owned_;
  int64_t owned_elems_ = 0;
};

}  // namespace stagecraft::executor
