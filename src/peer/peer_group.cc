#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "dcpmla/error.h"
#include "dcpmla/peer_comm.h"
#include "gpu/device_scope.h"
#include "peer_shared.h"

namespace dcpmla {
namespace {

// Peer access from every device to every other one; the first pair without it, or none.
bool all_pairs_reach(const std::vector<int>& devices, std::string* missing) {
  for (int a : devices) {
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || !can) {
        cudaGetLastError();
        if (missing) *missing = fmt::format("device {} cannot access device {}", a, b);
        return false;
      }
    }
  }
  return true;
}

void enable_peer_access(int device, int peer) {
  gpu::DeviceScope on(device);
  const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // clears the sticky-free error so later checks do not see it
    return;
  }
  DCPMLA_CUDA_CHECK(e);
}

}  // namespace

bool PeerGroup::supported(const std::vector<int>& devices) {
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty() || sorted.size() > std::size_t(peer::kMaxWorld) ||
      std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return false;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  for (int d : devices) {
    if (d < 0 || d >= count) return false;
  }
  return all_pairs_reach(devices, nullptr);
}

PeerGroup::PeerGroup(std::vector<int> devices, std::size_t chunk_capacity)
    : devices_(std::move(devices)), shared_(std::make_unique<PeerCommunicator::Shared>()) {
  const std::string given = fmt::format("[{}]", fmt::join(devices_, ", "));
  DCPMLA_REQUIRE(!devices_.empty() && devices_.size() <= std::size_t(peer::kMaxWorld),
                 ErrorCode::invalid_argument, "devices",
                 fmt::format("1 to {} CUDA devices", peer::kMaxWorld), given);
  std::vector<int> sorted = devices_;
  std::sort(sorted.begin(), sorted.end());
  DCPMLA_REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                 ErrorCode::invalid_argument, "devices", "distinct devices (one rank per device)",
                 given);
  int count = 0;
  DCPMLA_CUDA_CHECK(cudaGetDeviceCount(&count));
  DCPMLA_REQUIRE(sorted.front() >= 0 && sorted.back() < count, ErrorCode::out_of_range, "devices",
                 fmt::format("CUDA device indices in [0, {})", count), given);
  DCPMLA_REQUIRE(chunk_capacity >= 1 && chunk_capacity <= (std::size_t(1) << 40),
                 ErrorCode::invalid_argument, "chunk_capacity", "1 byte to 1 TiB",
                 std::to_string(chunk_capacity));
  std::string missing;
  DCPMLA_REQUIRE(all_pairs_reach(devices_, &missing), ErrorCode::unsupported, "devices",
                 "peer access between every pair (NVLink or PCIe P2P)", missing);

  const int W = world();
  shared_->chunk_capacity = (chunk_capacity + 15) / 16 * 16;
  const peer::AreaLayout layout = peer::area_layout(W, shared_->chunk_capacity);
  try {
    for (int r = 0; r < W; ++r) {
      for (int q = 0; q < W; ++q) {
        if (q != r) enable_peer_access(devices_[std::size_t(r)], devices_[std::size_t(q)]);
      }
      gpu::DeviceScope on(devices_[std::size_t(r)]);
      void* base = nullptr;
      DCPMLA_CUDA_CHECK(cudaMalloc(&base, layout.total_bytes));
      shared_->areas[r] = peer::area_at(base, W, shared_->chunk_capacity);
      // Flags and call counters start at 0 (no call made); the staging bytes need no value.
      DCPMLA_CUDA_CHECK(cudaMemset(static_cast<std::uint8_t*>(base) + layout.ready_offset, 0,
                                   layout.total_bytes - layout.ready_offset));
      DCPMLA_CUDA_CHECK(cudaDeviceSynchronize());
    }
  } catch (...) {
    for (int r = 0; r < W; ++r) {
      if (shared_->areas[r].staging == nullptr) continue;
      gpu::DeviceScope on(devices_[std::size_t(r)]);
      cudaFree(shared_->areas[r].staging);
    }
    throw;
  }
  for (int r = 0; r < W; ++r) {
    communicators_.push_back(std::unique_ptr<PeerCommunicator>(
        new PeerCommunicator(*shared_, r, W, devices_[std::size_t(r)])));
  }
}

PeerGroup::~PeerGroup() {
  // Peers write into every area (staging and flags): no area goes while any device of the group
  // may still run an exchange.
  for (int d : devices_) {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(d);
    cudaDeviceSynchronize();
    cudaSetDevice(current);
  }
  for (int r = 0; r < world(); ++r) {
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(devices_[std::size_t(r)]);
    cudaFree(shared_->areas[r].staging);
    cudaSetDevice(current);
  }
}

std::size_t PeerGroup::chunk_capacity() const {
  return shared_->chunk_capacity;
}

PeerCommunicator& PeerGroup::communicator(int rank) const {
  DCPMLA_REQUIRE(rank >= 0 && rank < world(), ErrorCode::out_of_range, "rank",
                 fmt::format("in [0, world = {})", world()), std::to_string(rank));
  return *communicators_[std::size_t(rank)];
}

}  // namespace dcpmla
