// Helpers of the peer communicator tests, without NCCL (tests/nccl/multigpu_support.h includes
// its header): how many GPUs can run the CUDA backend, device memory and streams that free
// themselves, and a thread per rank.
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "dcpmla/cuda_backend.h"
#include "dcpmla/testing/run_ranks.h"
#include "gpu_buffers.h"

namespace dcpmla::peer_testing {

using gpu_testing::gpu_count;

using gpu_testing::check_cuda;
using gpu_testing::DeviceBytes;

// A non-blocking stream created on `device`, which also becomes the calling thread's device.
class DeviceStream {
 public:
  explicit DeviceStream(int device) : device_(device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~DeviceStream() {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

// What a rank thread finds wrong, collected rather than thrown at the first one: a rank that
// stops between collectives leaves its peers spinning in a kernel that waits for it.
class Mismatches {
 public:
  // Nothing when `what` is empty (a check that passed).
  void add(const std::string& what) {
    if (what.empty()) return;
    if (count_++ < kShown) text_ += (text_.empty() ? "" : "; ") + what;
  }
  // Compares whole buffers; a difference is reported by its first byte and how many differ.
  void bytes(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
             const std::string& what) {
    if (got.size() != want.size()) {
      add(fmt::format("{}: {} bytes, want {}", what, got.size(), want.size()));
      return;
    }
    const auto diff = std::mismatch(got.begin(), got.end(), want.begin());
    if (diff.first == got.end()) return;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
    add(fmt::format("{}: byte {} of {} is {:#04x}, want {:#04x} ({} bytes differ)", what,
                    diff.first - got.begin(), got.size(), *diff.first, *diff.second, wrong));
  }
  void throw_if_any() const {
    if (count_ == 0) return;
    throw std::runtime_error(
        count_ > kShown ? fmt::format("{} (and {} more)", text_, count_ - kShown) : text_);
  }

 private:
  static constexpr int kShown = 4;
  int count_ = 0;
  std::string text_;
};

// Handed to each rank's function: lets the ranks agree that every one of them is ready before
// the first collective. A rank that failed while setting up (and threw) would otherwise leave the
// others spinning in a kernel that waits for its part.
class Ranks {
 public:
  explicit Ranks(int world) : barrier_(world) {}
  // False when some rank failed before getting here: skip the collectives.
  bool all_ready() {
    barrier_.arrive_and_wait();
    return !failed_.load();
  }

  // Called by on_ranks for a rank that threw: the others stop waiting for it.
  void fail() {
    failed_.store(true);
    barrier_.arrive_and_drop();
  }

 private:
  std::barrier<> barrier_;
  std::atomic<bool> failed_{false};
};

// Runs fn(rank, ranks) on one thread per rank and returns each rank's failure as text ("" when it
// returned normally): gtest assertions stay on the test's thread. An fn that launches collectives
// calls ranks.all_ready() once, before the first.
template <class Fn>
std::vector<std::string> on_ranks(int world, Fn fn) {
  Ranks ranks(world);
  return testing::rank_failures(world, [&](int r) {
    try {
      fn(r, ranks);
    } catch (...) {
      ranks.fail();
      throw;
    }
  });
}

}  // namespace dcpmla::peer_testing

// Skipped, not failed, with fewer than n usable GPUs.
#define DCPMLA_PEER_REQUIRE_GPUS(n)                            \
  if (::dcpmla::peer_testing::gpu_count() < (n)) {             \
    GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " \
                 << ::dcpmla::peer_testing::gpu_count();       \
  }                                                            \
  static_assert(true, "")

#define EXPECT_EVERY_RANK_OK(errors)                              \
  for (std::size_t rank_ = 0; rank_ < (errors).size(); ++rank_) { \
    EXPECT_EQ((errors)[rank_], "") << "rank " << rank_;           \
  }                                                               \
  static_assert(true, "")
