#include "dcpmla/testing/run_ranks.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <latch>
#include <system_error>
#include <thread>

#include "dcpmla/error.h"

namespace dcpmla::testing {

void run_ranks(int world, const std::function<void(int rank)>& fn) {
  DCPMLA_REQUIRE(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  // No rank runs fn before every rank's thread exists: fn may wait for its peers (a barrier, a
  // collective), and a thread that fails to start would leave them waiting forever.
  std::latch started(1);
  std::atomic<bool> start_failed{false};
  {
    // jthreads join on destruction, also when starting a later one throws.
    std::vector<std::jthread> threads;
    threads.reserve(static_cast<std::size_t>(world));
    try {
      for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
          started.wait();
          if (start_failed) return;
          try {
            fn(r);
          } catch (...) {
            errors[std::size_t(r)] = std::current_exception();
          }
        });
      }
    } catch (const std::system_error& e) {
      start_failed = true;
      started.count_down();
      throw Error(ErrorCode::backend_failure, "world", "a thread for each of the W ranks",
                  "W = " + std::to_string(world) + ", thread " + std::to_string(threads.size()) +
                      " failed to start (" + e.what() + ")");
    }
    started.count_down();
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::vector<std::string> rank_failures(int world, const std::function<void(int rank)>& fn) {
  std::vector<std::string> failures(static_cast<std::size_t>(std::max(world, 0)));
  run_ranks(world, [&](int r) {
    try {
      fn(r);
    } catch (const std::exception& e) {
      failures[std::size_t(r)] = e.what();
    }
  });
  return failures;
}

}  // namespace dcpmla::testing
