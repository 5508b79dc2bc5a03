// StageLayout: where one pipeline stage's parameters live in its single flat fp32 buffer, and
// how ZeRO cuts that buffer — positions only, no storage (zero/stage_state.hpp owns the buffers).
//
//   buffer   the stage's chunks' ParamLayouts end to end (chunk 0 first), N elements, padded
//            with zeros to dp * S, S = ceil(N / dp) (program::shard_elems)
//   shard i  positions [i*S, (i+1)*S): what dp rank i updates (ZeRO >= 1) and, with ZeRO-3,
//            the only non-persistent parameters it keeps between gathers
//   buckets  a Program bucket's units map to one contiguous range (units are contiguous in a
//            chunk's layout); its intersections with the shards, in dp order, are the counts of
//            the all-gather / reduce-scatter that moves it
//   persistent (ZeRO-3, dp > 1) tensors below param_persistence_threshold: kept whole on every
//            rank, their gradients all-reduced and their Adam state replicated
//   norm-excluded  the tied head's copy of the embedding table on the last stage (pp > 1): its
//            gradient equals the table's own after the embedding all-reduce, so the global
//            gradient norm counts it once, on stage 0; and on tp ranks other than 0 the tensors
//            every tp rank holds whole (norms, row-parallel biases, positions), counted on tp rank 0
// Every tp rank of the stage has its own layout of the same shape: its shards of the tensors.
// Construction checks every size against the Program's (chunk params, bucket elements) so a
// disagreement between the lowering and the model math is an error, not a silent mismatch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/program/program.hpp"
#include "executor/model/params.hpp"

namespace stagecraft::executor {

class StageLayout {
 public:
  // Throws ExecutorError when the Program's sizes disagree with the model's layouts.
  StageLayout(const program::Program& prog, int64_t stage, int64_t dp_index, int64_t tp_index);

  int64_t stage() const { return stage_; }
  int64_t dp() const { return dp_; }
  int64_t dp_index() const { return dp_index_; }
  int64_t tp_index() const { return tp_index_; }
  int zero_stage() const { return zero_stage_; }
  bool zero3_gathers() const { return zero_stage_ == 3 && dp_ > 1; }

  int64_t chunk_count() const { return static_cast<int64_t>(chunks_.size()); }
  const ParamLayout& chunk(int64_t c) const { return chunks_.at(static_cast<std::size_t>(c)); }
  int64_t chunk_offset(int64_t c) const { return offsets_.at(static_cast<std::size_t>(c)); }
  Range chunk_range(int64_t c) const { return {chunk_offset(c), chunk_offset(c) + chunk(c).size()}; }

  int64_t elems() const { return elems_; }                    // N
  int64_t shard_elems() const { return shard_; }              // S
  int64_t padded_elems() const { return shard_ * dp_; }       // dp * S
  Range shard(int64_t dp_index) const { return {dp_index * shard_, (dp_index + 1) * shard_}; }
  Range own_shard() const { return shard(dp_index_); }
  // What this rank's optimizer updates: its shard (ZeRO >= 1), or the whole buffer (ZeRO-0).
  Range optimizer_range() const { return zero_stage_ >= 1 ? own_shard() : Range{0, padded_elems()}; }

  // Flat positions of units [unit_begin, unit_end) of chunk `c`.
  Range units(int64_t c, int64_t unit_begin, int64_t unit_end) const;
  Range tensor(int64_t c, const std::string& name) const;
  Range grad_bucket(int32_t bucket) const;
  Range param_bucket(int32_t bucket) const;  // ZeRO-3 gather buckets and ZeRO-1/2 all-gather pieces
  // The embedding table whose gradient the embedding group all-reduces: unit 0's on stage 0,
  // the tied head's copy on the last stage.
  Range tied_table(int32_t unit) const;
  // |r ∩ shard i| for i = 0 .. dp-1; these pieces tile r in dp order.
  std::vector<int64_t> shard_counts(Range r) const;

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
  int64_t chunk_of_unit(int64_t unit) const;

  const program::Program* prog_;
  int64_t stage_ = 0, dp_ = 1, dp_index_ = 0, tp_index_ = 0;
  int zero_stage_ = 0;
  std::vector<ParamLayout> chunks_;
  std::vector<int64_t> offsets_;
  int64_t elems_ = 0, shard_ = 0;
  std::vector<Range> decayed_, persistent_, norm_excluded_, norms_;
  std::vector<int64_t> persistent_prefix_;  // packed index of each persistent range's first element
  int64_t persistent_elems_ = 0;
  std::vector<Range> allgather_pieces_;     // by param bucket index; empty ranges for other stages
};

}  // namespace stagecraft::executor
