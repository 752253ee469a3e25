// A fixed pool of worker threads running index ranges with dynamic (atomic counter) scheduling.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dcpmla::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(index, worker) for every index in [0, n); worker in [0, size()). The calling thread
  // takes part. Blocks until all are done; the first exception thrown by fn is rethrown here.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t, int)>& fn);

 private:
  void worker_loop(int worker);
  void stop_workers();  // wakes, joins and forgets every worker
  void run_share(int worker);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::int64_t, int)>* job_ = nullptr;
  std::int64_t job_size_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::uint64_t generation_ = 0;
  int active_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace dcpmla::cpu
