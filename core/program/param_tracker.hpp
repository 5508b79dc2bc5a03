// Internal to lowering: ZeRO-3 parameter residency on one rank. Given the sequence of bucket uses
// of a step (computed up front, in the order compute instructions will be emitted), it decides
// where GatherParams and ReleaseParams go:
//  * a bucket not resident is gathered just before its use; the next bucket in the sequence is
//    prefetched one use ahead by the framework's rule (spec/framework.hpp): DeepSpeed's look-ahead
//    budget min(max_live − live, prefetch_bucket) prefetches whenever live < max_live_parameters
//    (it checks the budget before adding a whole parameter); FSDP always prefetches the next unit;
//    a synchronous framework (deepspeed-0.5) never prefetches;
//  * after a use, the bucket stays if the same pass goes on using it (a bucket spanning several
//    segments), or (keep_gathered_across_microbatches) it is used again in this step, or its next
//    use comes before max_reuse_distance elements of other buckets' uses (strictly fewer);
//    otherwise it is released — so max_reuse_distance 0 regathers for every pass. FSDP ignores the
//    reuse distance: a unit is resharded after each use unless it is used again at once
//    (recompute, then backward, of one block);
//  * to make room, resident buckets not in use are released, the one needed latest first.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/program/program.hpp"
#include "core/spec/framework.hpp"

namespace stagecraft::program::detail {

class ParamTracker {
 public:
  // emit(op, bucket, dep, use) appends a Gather/Release instruction and returns its index; `use`
  // is the index into `uses` of the use a gather is for (-1 for a release).
  using EmitFn = std::function<int32_t(Op, int32_t bucket, int32_t dep, std::size_t use)>;

  // uses[i]: bucket of the i-th parameter use; passes[i]: which pass (a run of one op in one
  // step) it belongs to.
  ParamTracker(const Program& prog, const spec::FrameworkProfile& framework, std::vector<int32_t> uses,
               std::vector<int32_t> passes, EmitFn emit);

  // Before the next use (must be of `bucket`): returns the Gather instruction to depend on.
  // A compute instruction using two buckets calls before_use twice, then after_use twice.
  int32_t before_use(int32_t bucket);
  // After the oldest use not yet finished, by compute instruction `instr`.
  void after_use(int32_t instr);
  // End of step: release whatever is still resident.
  void release_all();
  // Whether `bucket` was gathered and no compute has used that gather yet (its first use waits
  // for it).
  bool fresh(int32_t bucket) const { return gather_instr_[bucket] >= 0 && !used_[bucket]; }

 private:
  int64_t elems(int32_t b) const { return prog_.param_buckets[static_cast<std::size_t>(b)].elems; }
  void gather(int32_t b, std::size_t use);
  void release(int32_t b);
  bool make_room(int64_t need, int32_t keep);
  std::size_t next_use_of(int32_t b, std::size_t from) const;

  const Program& prog_;
  spec::Prefetch prefetch_;
  bool reshard_after_use_;
  std::vector<int32_t> uses_;
  std::vector<int32_t> passes_;
  std::vector<std::size_t> next_same_;   // next index with the same bucket, or npos
  std::vector<int64_t> use_prefix_;      // prefix sums of elements over uses_
  EmitFn emit_;
  std::size_t next_before_ = 0;   // next use to prepare
  std::size_t cursor_ = 0;        // next use to finish
  std::vector<int32_t> gather_instr_;    // per bucket: its latest Gather, -1 when not resident
  std::vector<int32_t> last_use_;        // per bucket: its latest compute use
  std::vector<uint8_t> used_;            // per bucket: used since its latest gather
  std::vector<int32_t> resident_;        // buckets currently gathered
  int64_t live_ = 0;
};

}  // namespace stagecraft::program::detail
