// The device copy of a Plan (header, tiles, merge rows, row bounds), owned by one backend and
// reused across decode calls. The buffer is laid out for a capacity (LaunchCapacity) that only
// grows, and an unchanged plan is not uploaded again.
//
// CUDA graphs: a decode captured in a graph launches its kernels for the capacity and reads the
// plan (counts included) from this buffer. Once a capture has happened the buffer never moves:
// a later plan that fits the capacity and the captured shapes (heads, rows, requests, block-table
// columns, workspace) is written in place, so replaying the graph runs it; one that does not fit
// is refused with Error(unsupported) instead of leaving the graph reading a stale or freed plan.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda/decode/launch_plan.h"
#include "dcpmla/backend.h"

namespace dcpmla::cuda {

class DevicePlan {
 public:
  // Device views of the uploaded plan, valid for kernels enqueued after upload() on its stream.
  struct View {
    const PlanHeader* header = nullptr;
    const DecodeTile* tiles = nullptr;
    const MergeRow* merge_rows = nullptr;
    const std::int32_t* row_bound = nullptr;  // [capacity.rows] plan.row_local_bound
    LaunchCapacity capacity;                  // what kernels launched now must cover
    LaunchCapacity counts;                    // this plan's own tiles, merge rows, rows
    bool capturing = false;                   // under stream capture: launch for the capacity
  };

  DevicePlan() = default;
  DevicePlan(const DevicePlan&) = delete;
  DevicePlan& operator=(const DevicePlan&) = delete;
  ~DevicePlan();

  // Grows the capacity (outside any capture; before the first capture, or within what a captured
  // graph already covers).
  void reserve(const LaunchCapacity& capacity);

  // Makes `plan` the uploaded one for decode `args` (args.plan == &plan; its buffers are what a
  // capture would bake in) and enqueues its upload on s when it changed. Under stream capture
  // only the uploaded plan is accepted.
  View upload(const DecodeArgs& args, cudaStream_t s);
  // The same for a plan alone, checked against the shapes of the captured decode: the in-place
  // update before a graph replay. Requires a decode to have been captured.
  void update(const Plan& plan, cudaStream_t s);
  // The caller will not replay the graphs captured so far: the buffer may move and grow again.
  void forget_captures();
  // Call after enqueueing the kernels that read the view.
  void mark_used(cudaStream_t s);

 private:
  // The shapes a captured decode baked into its kernels' arguments.
  struct CapturedShape {
    int num_heads = 0;
    int block_size = 0;
    std::int64_t num_blocks = 0;
    std::int64_t rows = 0;
    std::int32_t requests = 0;
    std::int64_t block_table_columns = 0;
    std::size_t workspace_bytes = 0;
  };
  void check_fits_capture(const Plan& plan) const;
  View upload_plan(const Plan& plan, cudaStream_t s, bool capturing);
  void ensure_events();
  void grow(const LaunchCapacity& capacity);

  LaunchPlan launch_;
  PackedLaunchPlan packed_;
  std::vector<std::byte> uploaded_;  // what the device buffer holds (empty: nothing valid)
  LaunchCapacity capacity_;
  bool captured_ = false;  // a captured graph reads device_: it never moves or shrinks
  CapturedShape captured_shape_;

  void* device_ = nullptr;  // device buffer, sized for capacity_
  std::size_t device_bytes_ = 0;
  // Two pinned staging buffers used in turn, so an upload waits (on the host) only for the copy
  // of the upload before the previous one.
  void* staging_[2] = {nullptr, nullptr};
  std::size_t staging_bytes_[2] = {0, 0};
  cudaEvent_t copied_[2] = {nullptr, nullptr};
  int next_staging_ = 0;
  cudaEvent_t used_ = nullptr;  // the last eager kernels have read the device buffer
};

}  // namespace dcpmla::cuda
