// ThreadPool: a fixed set of worker threads that run parallel loops. parallel_for(n, f) calls
// f(i, worker) for every i in [0, n) across the workers (dynamic scheduling: each worker takes
// the next index) and returns when all are done; `worker` (0 .. size()-1) lets a caller keep
// per-thread state. The calling thread waits; it does not run items itself.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread/parallel_for.hpp"

namespace stagecraft::planner {

// The system refused to start a worker thread (ulimit, memory); the started ones are joined.
class ThreadStartError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ThreadPool {
 public:
  explicit ThreadPool(int threads);   // threads < 1: one per hardware thread; throws ThreadStartError
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()); }
  // Runs f(i, worker) for i in [0, n). An exception thrown by f is rethrown here (the first one)
  // after every worker has stopped taking items.
  void parallel_for(std::size_t n, const std::function<void(std::size_t index, int worker)>& f);

 private:
  void work(int worker);
  void stop_all();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t, int)>* job_ = nullptr;
  std::size_t n_ = 0, next_ = 0, finished_ = 0;
  unsigned long generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

using thread::hardware_threads;   // (core/thread/parallel_for.hpp)

}  // namespace stagecraft::planner
