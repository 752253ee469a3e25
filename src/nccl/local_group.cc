#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"
#include "nccl_check.h"

namespace dcpmla {

NcclLocalGroup::NcclLocalGroup(std::vector<int> devices) : devices_(std::move(devices)) {
  const std::string given = fmt::format("[{}]", fmt::join(devices_, ", "));
  DCPMLA_REQUIRE(!devices_.empty(), ErrorCode::invalid_argument, "devices",
                 "at least one CUDA device", "none");
  std::vector<int> sorted = devices_;
  std::sort(sorted.begin(), sorted.end());
  DCPMLA_REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                 ErrorCode::invalid_argument, "devices",
                 "distinct devices (NCCL runs one rank per device)", given);
  DCPMLA_REQUIRE(sorted.front() >= 0, ErrorCode::out_of_range, "devices", "device indices >= 0",
                 given);
  int count = 0;
  DCPMLA_NCCL_CUDA_CHECK(cudaGetDeviceCount(&count));
  DCPMLA_REQUIRE(sorted.back() < count, ErrorCode::out_of_range, "devices",
                 fmt::format("CUDA device indices in [0, {}) ({} present)", count, count), given);

  handles_.assign(devices_.size(), nullptr);
  {
    // ncclCommInitAll switches devices as it goes: the caller's current device is restored
    // whatever it returns (a DeviceScope of the current device would restore nothing).
    int current = 0;
    DCPMLA_NCCL_CUDA_CHECK(cudaGetDevice(&current));
    const ncclResult_t made = ncclCommInitAll(handles_.data(), world(), devices_.data());
    cudaSetDevice(current);
    nccl::check_nccl(made, "ncclCommInitAll(handles_.data(), world(), devices_.data())", nullptr);
  }
  try {
    for (ncclComm_t h : handles_) communicators_.push_back(NcclCommunicator::wrap(h));
  } catch (...) {
    communicators_.clear();
    for (ncclComm_t h : handles_) ncclCommDestroy(h);
    throw;
  }
}

NcclLocalGroup::~NcclLocalGroup() {
  communicators_.clear();
  ncclGroupStart();
  for (ncclComm_t h : handles_) ncclCommFinalize(h);
  ncclGroupEnd();
  for (ncclComm_t h : handles_) ncclCommDestroy(h);
}

NcclCommunicator& NcclLocalGroup::communicator(int rank) const {
  DCPMLA_REQUIRE(rank >= 0 && rank < world(), ErrorCode::out_of_range, "rank",
                 fmt::format("in [0, world = {})", world()), std::to_string(rank));
  return *communicators_[std::size_t(rank)];
}

}  // namespace dcpmla
