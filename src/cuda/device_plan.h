// The device copy of a Plan (tiles, merge rows, row bounds), owned by one backend and reused
// across decode calls: the device buffer grows only when too small, and an unchanged plan is not
// uploaded again.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "launch_plan.h"

namespace dcpmla::cuda {

class DevicePlan {
 public:
  // Device views of the uploaded plan, valid for kernels enqueued after upload() on its stream.
  struct View {
    const DecodeTile* tiles = nullptr;
    std::int64_t num_tiles = 0;
    const MergeRow* merge_rows = nullptr;
    std::int64_t num_merge_rows = 0;
    const std::int32_t* row_bound = nullptr;  // [num_rows] plan.row_local_bound
    std::int64_t padding_begin = 0;
    std::int64_t padding_end = 0;
  };

  DevicePlan() = default;
  DevicePlan(const DevicePlan&) = delete;
  DevicePlan& operator=(const DevicePlan&) = delete;
  ~DevicePlan();

  // Builds the launch plan and enqueues its upload on s (after every kernel that read the
  // previous one, on any stream). Under stream capture only an unchanged plan is accepted.
  View upload(const Plan& plan, cudaStream_t s);
  // Call after enqueueing the kernels that read the view.
  void mark_used(cudaStream_t s);

 private:
  void ensure_events();

  LaunchPlan launch_;
  PackedLaunchPlan packed_;
  std::vector<std::byte> uploaded_;  // what the device buffer holds (empty: nothing valid)
  View view_;

  void* device_ = nullptr;  // device buffer
  std::size_t device_bytes_ = 0;
  void* staging_ = nullptr;  // pinned host staging buffer
  std::size_t staging_bytes_ = 0;
  cudaEvent_t copied_ = nullptr;  // the last upload has read the staging buffer
  cudaEvent_t used_ = nullptr;    // the last kernels have read the device buffer
  bool captured_ = false;         // a captured graph may still read device_
  std::vector<void*> retired_;    // device buffers captured graphs may read; freed at the end
};

}  // namespace dcpmla::cuda
