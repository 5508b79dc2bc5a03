// parallel_for: f(i) for every i in [0, n) over up to `threads` threads started for the call, the
// calling thread among them; each takes the next index. For the few, short parallel loops below
// the planner (lowering's stages, the error bars' simulations); the planner's long-lived
// ThreadPool (planner/pool.hpp) serves its searches.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

namespace stagecraft::thread {

// Hardware threads, at least 1.
inline int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// Threads the system refuses to start are left out (the others do their share). Once every index
// has run, the exception of the lowest index that threw, if any, is rethrown.
template <typename F>
void parallel_for(std::size_t n, int threads, F&& f) {
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> errors(n);
  auto work = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        f(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const std::size_t extra = std::min<std::size_t>(n, static_cast<std::size_t>(std::max(threads, 1))) - (n > 0 ? 1 : 0);
  for (std::size_t t = 0; t < extra; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace stagecraft::thread
