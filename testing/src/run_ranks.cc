#include "dcpmla/testing/run_ranks.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "dcpmla/error.h"

namespace dcpmla::testing {

void run_ranks(int world, const std::function<void(int rank)>& fn) {
  DCPMLA_REQUIRE(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  {
    // jthreads join on destruction, also when starting a later one throws.
    std::vector<std::jthread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          fn(r);
        } catch (...) {
          errors[std::size_t(r)] = std::current_exception();
        }
      });
    }
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
