#include <algorithm>
#include <cstring>

#include "check.h"
#include "device_plan.h"

namespace dcpmla::cuda {

DevicePlan::~DevicePlan() {
  // Destructors never throw: errors here are ignored (the context may already be gone).
  if (device_) cudaFree(device_);
  for (void* p : retired_) cudaFree(p);
  if (staging_) cudaFreeHost(staging_);
  if (copied_) cudaEventDestroy(copied_);
  if (used_) cudaEventDestroy(used_);
}

void DevicePlan::ensure_events() {
  if (!copied_) DCPMLA_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  if (!used_) DCPMLA_CUDA_CHECK(cudaEventCreateWithFlags(&used_, cudaEventDisableTiming));
}

DevicePlan::View DevicePlan::upload(const Plan& plan, cudaStream_t s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DCPMLA_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;

  launch_ = build_launch_plan(plan);
  pack_launch_plan(launch_, plan, packed_);
  const std::size_t n = packed_.bytes.size();

  const bool unchanged = n == 0 || (device_ != nullptr && packed_.bytes == uploaded_);
  if (!unchanged) {
    require(!capturing, ErrorCode::unsupported, "decode under CUDA stream capture",
            "a plan already uploaded by an uncaptured decode() call on this backend",
            "a plan that differs from the uploaded one (run it once outside the capture)");
    ensure_events();
    uploaded_.clear();
    // The staging buffer is rewritten only after the previous upload has read it.
    DCPMLA_CUDA_CHECK(cudaEventSynchronize(copied_));
    if (staging_bytes_ < n) {
      const std::size_t bytes = std::max(n, 2 * staging_bytes_);
      if (staging_) DCPMLA_CUDA_CHECK(cudaFreeHost(staging_));
      staging_ = nullptr;
      staging_bytes_ = 0;
      DCPMLA_CUDA_CHECK(cudaHostAlloc(&staging_, bytes, cudaHostAllocDefault));
      staging_bytes_ = bytes;
    }
    std::memcpy(staging_, packed_.bytes.data(), n);
    // A buffer a captured graph may read is never overwritten: it is retired instead.
    if (captured_) {
      retired_.push_back(device_);
      device_ = nullptr;
      device_bytes_ = 0;
      captured_ = false;
    }
    if (device_bytes_ < n) {
      if (device_) {
        DCPMLA_CUDA_CHECK(cudaEventSynchronize(used_));
        DCPMLA_CUDA_CHECK(cudaFree(device_));
        device_ = nullptr;
      }
      const std::size_t bytes = std::max(n, 2 * device_bytes_);
      device_bytes_ = 0;
      DCPMLA_CUDA_CHECK(cudaMalloc(&device_, bytes));
      device_bytes_ = bytes;
    } else {
      // Kernels of the previous call (perhaps on another stream) finish reading first.
      DCPMLA_CUDA_CHECK(cudaStreamWaitEvent(s, used_, 0));
    }
    DCPMLA_CUDA_CHECK(cudaMemcpyAsync(device_, staging_, n, cudaMemcpyHostToDevice, s));
    DCPMLA_CUDA_CHECK(cudaEventRecord(copied_, s));
    uploaded_ = packed_.bytes;
  }
  if (capturing && n > 0) captured_ = true;

  View v;
  const auto* base = static_cast<const std::byte*>(device_);
  v.num_tiles = std::int64_t(launch_.tiles.size());
  v.num_merge_rows = std::int64_t(launch_.merge_rows.size());
  if (n > 0) {
    v.tiles = reinterpret_cast<const DecodeTile*>(base + packed_.tiles_offset);
    v.merge_rows = reinterpret_cast<const MergeRow*>(base + packed_.merge_rows_offset);
    v.row_bound = reinterpret_cast<const std::int32_t*>(base + packed_.row_bound_offset);
  }
  v.padding_begin = launch_.padding_begin;
  v.padding_end = launch_.padding_end;
  return v;
}

void DevicePlan::mark_used(cudaStream_t s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DCPMLA_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;  // captured_ guards the buffer instead
  ensure_events();
  DCPMLA_CUDA_CHECK(cudaEventRecord(used_, s));
}

}  // namespace dcpmla::cuda
