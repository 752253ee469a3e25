// The CPU backend's thread pool: every index exactly once, worker ids, exceptions, reuse.
#include "cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dcpmla/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define DCPMLA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DCPMLA_TEST_ASAN 1
#endif
#endif

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

// A child process whose address space leaves room for only some of 1000 threads (8 MiB of stack
// each): the pool is an error naming `threads`, where its started workers once waited forever on
// a condition variable the failed constructor destroyed.
TEST(ThreadPool, ThreadsThatCannotStartAreAnErrorNotAHang) {
#ifdef DCPMLA_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer reserves address space an RLIMIT_AS limit would cut";
#else
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  ASSERT_GT(pages, 0);
  const rlim_t limit = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(1) << 30);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit lim{limit, limit};
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(6);
    try {
      ThreadPool pool(1000);
      _exit(4);  // every thread started: the limit did not bite
    } catch (const Error& e) {
      _exit(e.argument() == "threads" && e.code() == ErrorCode::backend_failure ? 0 : 3);
    } catch (...) {
      _exit(5);
    }
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the pool hung when a thread could not start";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  if (WEXITSTATUS(status) == 4) GTEST_SKIP() << "1000 threads started under the limit";
  EXPECT_EQ(WEXITSTATUS(status), 0);
#endif
}

}  // namespace
}  // namespace dcpmla::cpu
