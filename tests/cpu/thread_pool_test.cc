// The CPU backend's thread pool: every index exactly once, worker ids, exceptions, reuse.
#include "cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace dcpmla::cpu {
namespace {

TEST(ThreadPool, SizeCountsTheCallingThread) {
  EXPECT_EQ(ThreadPool(1).size(), 1);
  EXPECT_EQ(ThreadPool(4).size(), 4);
  EXPECT_EQ(ThreadPool(0).size(), 1);
}

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (std::int64_t n : {0, 1, 2, 7, 64, 1000, 12345}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      std::atomic<int> bad_worker{0};
      pool.parallel_for(n, [&](std::int64_t i, int worker) {
        hits[std::size_t(i)].fetch_add(1, std::memory_order_relaxed);
        if (worker < 0 || worker >= pool.size()) bad_worker.fetch_add(1);
      });
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[std::size_t(i)].load(), 1) << "threads " << threads << " n " << n;
      }
      EXPECT_EQ(bad_worker.load(), 0);
    }
  }
}

TEST(ThreadPool, NegativeCountRunsNothing) {
  ThreadPool pool(3);
  std::atomic<int> calls{0};
  pool.parallel_for(-5, [&](std::int64_t, int) { calls++; });
  EXPECT_EQ(calls.load(), 0);
}

TEST(ThreadPool, WorkersRunConcurrentlyWithDistinctIds) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> per_worker(4);
  // a per-worker scratch slot is only ever touched by one thread at a time
  std::vector<int> scratch(4, 0);
  std::atomic<int> clash{0};
  pool.parallel_for(4000, [&](std::int64_t, int worker) {
    per_worker[worker]++;
    const int before = scratch[worker];
    scratch[worker] = before + 1;
    std::this_thread::yield();
    if (scratch[worker] != before + 1) clash++;
  });
  int total = 0;
  for (auto& c : per_worker) total += c.load();
  EXPECT_EQ(total, 4000);
  EXPECT_EQ(clash.load(), 0);
}

TEST(ThreadPool, RethrowsAndStaysUsable) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 20; ++round) {
      std::atomic<int> ran{0};
      EXPECT_THROW(pool.parallel_for(500,
                                     [&](std::int64_t i, int) {
                                       ran++;
                                       if (i == 37) throw std::runtime_error("boom");
                                     }),
                   std::runtime_error);
      EXPECT_GE(ran.load(), 1);
      // the next job runs completely
      std::vector<std::atomic<int>> hits(300);
      pool.parallel_for(300, [&](std::int64_t i, int) { hits[std::size_t(i)]++; });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

TEST(ThreadPool, RethrowsTheExceptionItself) {
  ThreadPool pool(3);
  try {
    pool.parallel_for(100, [](std::int64_t i, int) {
      if (i % 10 == 3) throw std::out_of_range("index " + std::to_string(i));
    });
    FAIL() << "nothing thrown";
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()).rfind("index ", 0), 0u);
  }
}

TEST(ThreadPool, ManyShortJobsInARow) {
  ThreadPool pool(3);
  std::int64_t sum = 0;
  for (int job = 0; job < 2000; ++job) {
    std::atomic<std::int64_t> s{0};
    pool.parallel_for(job % 17, [&](std::int64_t i, int) { s += i + 1; });
    const std::int64_t n = job % 17;
    ASSERT_EQ(s.load(), n * (n + 1) / 2);
    sum += s.load();
  }
  EXPECT_GT(sum, 0);
}

TEST(ThreadPool, DestroysCleanlyWithoutJobs) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(1 + i % 5);
  }
  SUCCEED();
}

}  // namespace
}  // namespace dcpmla::cpu
