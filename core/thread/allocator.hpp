// The heap's settings for the planner's allocation pattern: a search lowers and simulates
// thousands of Programs, each a few MB of vectors freed before the next is built. glibc's
// defaults give that memory back to the kernel after each one — blocks over the mmap threshold
// (128 KiB, rising only as far as each freed block) are unmapped at free(), and the heap top is
// trimmed past 128 KiB — so the next Program page-faults and zero-fills all of it again: lowering
// the 175B search's best plan took 2.0-2.5 ms with them and 1.1-1.3 ms without
// (bench/sim_bench.cpp BM_SearchPlan175B/0/1, this 2-core machine). Keeping up to 256 MiB of the
// heap and mapping only blocks of 32 MiB and more (glibc's own ceiling for its adaptive
// threshold, DEFAULT_MMAP_THRESHOLD_MAX) lets it reuse that memory; the search's peak resident
// size grows by what it keeps (the 175B search: 122 to 153 MiB). Set by the planner's entry points
// (planner::search, planner::sweep) and the GUI, not by the executor, whose timed runs calibrate
// the simulator on glibc's defaults. Idempotent; a no-op off glibc.
#pragma once

#if __has_include(<malloc.h>)
#include <malloc.h>
#endif

namespace stagecraft::thread {

inline void keep_freed_memory() {
#if defined(__GLIBC__) && defined(M_TRIM_THRESHOLD) && defined(M_MMAP_THRESHOLD)
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    return true;
  }();
  (void)done;
#endif
}

}  // namespace stagecraft::thread
