#include "planner/pool.hpp"

#include <system_error>

namespace stagecraft::planner {

ThreadPool::ThreadPool(int threads) {
  const int n = threads < 1 ? hardware_threads() : threads;
  workers_.reserve(static_cast<std::size_t>(n));
  for (int w = 0; w < n; ++w) {
    try {
      workers_.emplace_back([this, w] { work(w); });
    } catch (const std::system_error& e) {
      // The workers already started wait on members this object is about to destroy: stop and
      // join them before reporting (a destructor does not run for a half-built object).
      const int started = size();
      stop_all();
      throw ThreadStartError("cannot start " + std::to_string(n) + " worker threads: the system refused thread " +
                             std::to_string(started + 1) + " (" + e.what() + "); use fewer (--threads)");
    }
  }
}

void ThreadPool::stop_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_all(); }

void ThreadPool::parallel_for(std::size_t n, const std::function<void(std::size_t, int)>& f) {
  if (n == 0) return;
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &f;
  n_ = n;
  next_ = 0;
  finished_ = 0;
  error_ = nullptr;
  ++generation_;
  wake_.notify_all();
  done_.wait(lock, [&] { return finished_ == n_ && busy_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::work(int worker) {
  unsigned long seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen && next_ < n_); });
    if (stop_) return;
    seen = generation_;
    ++busy_;
    while (next_ < n_) {
      const std::size_t i = next_++;
      const auto* job = job_;
      lock.unlock();
      try {
        (*job)(i, worker);
      } catch (...) {
        lock.lock();
        if (!error_) error_ = std::current_exception();
        next_ = n_;       // stop handing out items
        finished_ = n_;   // and let parallel_for return once the busy ones are back
        lock.unlock();
      }
      lock.lock();
      if (finished_ < n_) ++finished_;
    }
    --busy_;
    if (busy_ == 0) done_.notify_all();
  }
}

}  // namespace stagecraft::planner
