#include "thread_pool.h"

#include <fmt/format.h>

#include <system_error>

#include "dcpmla/error.h"

namespace dcpmla::cpu {

ThreadPool::ThreadPool(int threads) {
  try {
    for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
  } catch (const std::system_error& e) {
    // The workers already started wait on wake_: stop and join them before the members go.
    const std::size_t started = workers_.size();
    stop_workers();
    throw Error(ErrorCode::backend_failure, "threads",
                fmt::format("{} threads for the CPU backend", threads),
                fmt::format("thread {} failed to start ({})", started + 1, e.what()));
  }
}

ThreadPool::~ThreadPool() {
  stop_workers();
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::run_share(int worker) {
  for (;;) {
    const auto i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= job_size_) return;
    try {
      (*job_)(i, worker);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(job_size_, std::memory_order_relaxed);
    }
  }
}

void ThreadPool::worker_loop(int worker) {
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_share(worker);
    {
      std::lock_guard lock(mutex_);
      if (--active_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(std::int64_t n, const std::function<void(std::int64_t, int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (std::int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_size_ = n;
    next_.store(0, std::memory_order_relaxed);
    active_ = int(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_share(0);
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return active_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

}  // namespace dcpmla::cpu
