#include "planner/pool.hpp"

namespace stagecraft::planner {

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int threads) {
  const int n = threads < 1 ? hardware_threads() : threads;
  for (int w = 0; w < n; ++w) workers_.emplace_back([this, w] { work(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

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
