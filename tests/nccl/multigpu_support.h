// Helpers of the multi-GPU suites: how many GPUs can run the CUDA backend, backend and NCCL or
// peer communicator factories for testing::run_dcp, and a thread per rank.
//
// With DCPMLA_MULTIGPU_TESTS_ON_CPU=1 the DCP suite runs its ranks on the CPU backend with
// in-process collectives instead (W = 2), which checks the suite itself where no GPU exists.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "dcpmla/cpu_backend.h"
#include "dcpmla/cuda_backend.h"
#include "dcpmla/nccl_comm.h"
#include "dcpmla/peer_comm.h"
#include "dcpmla/testing/run_ranks.h"
#include "dcpmla/testing/runner.h"
#include "gpu_buffers.h"

namespace dcpmla::multigpu_testing {

inline bool on_cpu() {
  const char* v = std::getenv("DCPMLA_MULTIGPU_TESTS_ON_CPU");
  return v != nullptr && std::string(v) == "1";
}

// NVLink multicast stays off (NCCL_NVLS_ENABLE=0) unless the environment sets it: on shared
// machines a program that uses it can take the GPUs out of service. Before NCCL initialises.
inline void keep_nvls_off() {
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
}

using gpu_testing::gpu_count;

// The DCP world the multi-GPU suites use: every GPU present, at most 8 (2 on the CPU).
inline int world() {
  return on_cpu() ? 2 : std::min(gpu_count(), 8);
}

// Rank r on GPU r.
inline testing::BackendFactory one_gpu_per_rank() {
  if (on_cpu()) return [](int) { return make_cpu_backend(1); };
  return [](int rank) { return make_cuda_backend(rank); };
}
// Every rank simulated on GPU 0 (in-process collectives): the single-GPU DCP simulation.
inline testing::BackendFactory all_on_gpu0() {
  if (on_cpu()) return [](int) { return make_cpu_backend(1); };
  return [](int) { return make_cuda_backend(0); };
}

// Which collectives a multi-GPU run uses.
enum class CommKind { nccl, peer };
inline const char* to_string(CommKind k) {
  return k == CommKind::nccl ? "nccl" : "peer";
}

// The staging chunk of the suites' peer groups: above the largest step the suites run (rows of
// 16 requests x 8 tokens + padding, 128 heads, W = 2).
inline constexpr std::size_t kPeerChunkBytes = std::size_t(48) << 20;

// The collectives of a multi-GPU run: an NCCL or a peer group over GPUs 0..W-1 (in-process ones
// on the CPU). Lives as long as the runs that use it.
class RankCollectives {
 public:
  explicit RankCollectives(int world, CommKind kind = CommKind::nccl) {
    if (on_cpu()) {
      in_process_ = std::make_unique<InProcessGroup>(world);
    } else if (kind == CommKind::peer) {
      peer_ = std::make_unique<PeerGroup>(first_devices(world), kPeerChunkBytes);
    } else {
      nccl_ = std::make_unique<NcclLocalGroup>(first_devices(world));
    }
  }
  // Rank r's communicator: a non-owning view of the group's.
  testing::CommunicatorFactory factory() const {
    if (in_process_) {
      return [g = in_process_.get()](int rank, Backend& be) -> std::unique_ptr<Communicator> {
        return std::make_unique<InProcessCommunicator>(*g, rank, &be);
      };
    }
    if (peer_) {
      return [g = peer_.get()](int rank, Backend&) -> std::unique_ptr<Communicator> {
        return std::make_unique<CommunicatorRef>(g->communicator(rank));
      };
    }
    return [g = nccl_.get()](int rank, Backend&) -> std::unique_ptr<Communicator> {
      return NcclCommunicator::wrap(g->communicator(rank).handle());
    };
  }

 private:
  std::unique_ptr<NcclLocalGroup> nccl_;
  std::unique_ptr<PeerGroup> peer_;
  std::unique_ptr<InProcessGroup> in_process_;
};

}  // namespace dcpmla::multigpu_testing

// Every multi-GPU test starts with one of these: skipped, not failed, with fewer than n usable
// GPUs (the second one: unless the suite runs on the CPU).
#define DCPMLA_REQUIRE_GPUS(n)                                 \
  ::dcpmla::multigpu_testing::keep_nvls_off();                 \
  if (::dcpmla::multigpu_testing::gpu_count() < (n)) {         \
    GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " \
                 << ::dcpmla::multigpu_testing::gpu_count();   \
  }                                                            \
  static_assert(true, "")

namespace dcpmla::multigpu_testing {

// Runs fn(rank) on one thread per rank and returns each rank's failure as text ("" when it
// returned normally): gtest assertions stay on the test's thread.
template <class Fn>
std::vector<std::string> on_ranks(int world, Fn fn) {
  return testing::rank_failures(world, fn);
}

}  // namespace dcpmla::multigpu_testing

#define EXPECT_EVERY_RANK_OK(errors)                              \
  for (std::size_t rank_ = 0; rank_ < (errors).size(); ++rank_) { \
    EXPECT_EQ((errors)[rank_], "") << "rank " << rank_;           \
  }                                                               \
  static_assert(true, "")

#define DCPMLA_REQUIRE_GPUS_OR_CPU_RUN(n)      \
  if (!::dcpmla::multigpu_testing::on_cpu()) { \
    DCPMLA_REQUIRE_GPUS(n);                    \
  }                                            \
  static_assert(true, "")
