#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "cuda/device_plan.h"
#include "gpu/check.h"

namespace dcpmla::cuda {
namespace {

bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DCPMLA_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

std::string describe(const LaunchCapacity& c) {
  return fmt::format("{} thread blocks, {} merge rows, {} rows", c.tiles, c.merge_rows, c.rows);
}

}  // namespace

DevicePlan::~DevicePlan() {
  // Destructors never throw: errors here are ignored (the context may already be gone).
  if (device_) cudaFree(device_);
  for (int i = 0; i < 2; ++i) {
    if (staging_[i]) cudaFreeHost(staging_[i]);
    if (copied_[i]) cudaEventDestroy(copied_[i]);
  }
  if (used_) cudaEventDestroy(used_);
}

void DevicePlan::ensure_events() {
  for (auto& e : copied_) {
    if (!e) DCPMLA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  if (!used_) DCPMLA_CUDA_CHECK(cudaEventCreateWithFlags(&used_, cudaEventDisableTiming));
}

void DevicePlan::grow(const LaunchCapacity& want) {
  const LaunchCapacity next = max_capacity(capacity_, want);
  if (next == capacity_) return;
  require(!captured_, ErrorCode::unsupported, "plan",
          fmt::format("at most {}: the capacity of the decode captured in a CUDA graph (reserve "
                      "more with reserve_decode_capacity before capturing)",
                      describe(capacity_)),
          describe(want));
  ensure_events();
  // The old buffer may still be read by kernels of an earlier call.
  if (device_) {
    DCPMLA_CUDA_CHECK(cudaEventSynchronize(used_));
    DCPMLA_CUDA_CHECK(cudaFree(device_));
    device_ = nullptr;
    device_bytes_ = 0;
  }
  capacity_ = next;
  uploaded_.clear();
}

void DevicePlan::reserve(const LaunchCapacity& capacity) {
  require(capacity.tiles >= 0 && capacity.merge_rows >= 0 && capacity.rows >= 0,
          ErrorCode::invalid_argument, "capacity", "non-negative counts", describe(capacity));
  grow(capacity);
}

void DevicePlan::check_fits_capture(const Plan& plan) const {
  const CapturedShape& c = captured_shape_;
  const char* why = "as in the decode captured in the CUDA graph";
  require(plan.config.num_heads == c.num_heads, ErrorCode::inconsistent, "plan.config.num_heads",
          fmt::format("{} {}", c.num_heads, why), std::to_string(plan.config.num_heads));
  require(plan.config.block_size == c.block_size, ErrorCode::inconsistent, "plan.config.block_size",
          fmt::format("{} {}", c.block_size, why), std::to_string(plan.config.block_size));
  require(plan.config.num_blocks == c.num_blocks, ErrorCode::inconsistent, "plan.config.num_blocks",
          fmt::format("{} {}", c.num_blocks, why), std::to_string(plan.config.num_blocks));
  require(plan.num_rows == c.rows, ErrorCode::inconsistent, "plan rows",
          fmt::format("{} {} (pad the batch with Batch::num_tokens)", c.rows, why),
          std::to_string(plan.num_rows));
  require(plan.num_requests == c.requests, ErrorCode::inconsistent, "plan requests",
          fmt::format("{} {}", c.requests, why), std::to_string(plan.num_requests));
  const int bs = plan.config.block_size;
  for (int b = 0; b < plan.num_requests; ++b) {
    const std::int64_t needed = (std::int64_t(plan.request_local_len[b]) + bs - 1) / bs;
    require(needed <= c.block_table_columns, ErrorCode::shape_mismatch,
            fmt::format("request {}", b),
            fmt::format("at most {} blocks (the captured block table's columns)",
                        c.block_table_columns),
            fmt::format("{} blocks", needed));
  }
  require(decode_workspace_bytes(plan) <= c.workspace_bytes, ErrorCode::shape_mismatch,
          "plan workspace",
          fmt::format("at most {} bytes (the captured workspace)", c.workspace_bytes),
          fmt::format("{} bytes", decode_workspace_bytes(plan)));
}

DevicePlan::View DevicePlan::upload_plan(const Plan& plan, cudaStream_t s, bool capturing) {
  launch_ = build_launch_plan(plan);
  const LaunchCapacity counts = capacity_of(launch_, plan);
  if (!capacity_.holds(counts)) {
    require(!capturing, ErrorCode::unsupported, "decode under CUDA stream capture",
            "a plan within the capacity already allocated (run it once outside the capture, or "
            "reserve_decode_capacity)",
            describe(counts));
    grow(counts);
  }
  pack_launch_plan(launch_, plan, capacity_, packed_);
  const std::size_t n = packed_.bytes.size();

  if (device_ == nullptr || packed_.bytes != uploaded_) {
    require(!capturing, ErrorCode::unsupported, "decode under CUDA stream capture",
            "the plan already uploaded by an uncaptured decode() or update on this backend",
            "a plan that differs from the uploaded one (upload it before capturing)");
    ensure_events();
    uploaded_.clear();
    const int k = next_staging_;
    next_staging_ ^= 1;
    // The staging buffer is rewritten only after its previous upload has read it.
    DCPMLA_CUDA_CHECK(cudaEventSynchronize(copied_[k]));
    if (staging_bytes_[k] < n) {
      const std::size_t bytes = std::max(n, 2 * staging_bytes_[k]);
      if (staging_[k]) DCPMLA_CUDA_CHECK(cudaFreeHost(staging_[k]));
      staging_[k] = nullptr;
      staging_bytes_[k] = 0;
      DCPMLA_CUDA_CHECK(cudaHostAlloc(&staging_[k], bytes, cudaHostAllocDefault));
      staging_bytes_[k] = bytes;
    }
    std::memcpy(staging_[k], packed_.bytes.data(), n);
    if (device_ == nullptr) {
      DCPMLA_CUDA_CHECK(cudaMalloc(&device_, n));
      device_bytes_ = n;
    } else {
      // Eager kernels of the previous call (perhaps on another stream) finish reading first;
      // graph replays are ordered by the caller (update on the replay stream).
      DCPMLA_CUDA_CHECK(cudaStreamWaitEvent(s, used_, 0));
    }
    DCPMLA_CUDA_CHECK(cudaMemcpyAsync(device_, staging_[k], n, cudaMemcpyHostToDevice, s));
    DCPMLA_CUDA_CHECK(cudaEventRecord(copied_[k], s));
    uploaded_ = packed_.bytes;
  }

  View v;
  const auto* base = static_cast<const std::byte*>(device_);
  v.header = reinterpret_cast<const PlanHeader*>(base + packed_.header_offset);
  v.tiles = reinterpret_cast<const DecodeTile*>(base + packed_.tiles_offset);
  v.merge_rows = reinterpret_cast<const MergeRow*>(base + packed_.merge_rows_offset);
  v.row_bound = reinterpret_cast<const std::int32_t*>(base + packed_.row_bound_offset);
  v.counts = counts;
  v.capacity = capacity_;
  v.capturing = capturing;
  return v;
}

DevicePlan::View DevicePlan::upload(const DecodeArgs& args, cudaStream_t s) {
  const Plan& plan = *args.plan;
  const bool capturing = is_capturing(s);
  if (captured_) check_fits_capture(plan);
  View v = upload_plan(plan, s, capturing);
  if (capturing) {
    if (!captured_) {
      captured_shape_ = {plan.config.num_heads, plan.config.block_size, plan.config.num_blocks,
                         plan.num_rows,         plan.num_requests,      args.block_table.shape[1],
                         args.workspace.bytes()};
    }
    captured_ = true;
  }
  return v;
}

void DevicePlan::update(const Plan& plan, cudaStream_t s) {
  require(captured_, ErrorCode::unsupported, "update_decode_plan",
          "a backend whose decode was captured in a CUDA graph (decode() uploads plans itself)",
          "no captured decode");
  require(!is_capturing(s), ErrorCode::unsupported, "update_decode_plan",
          "a stream that is not capturing", "a capturing stream");
  check_fits_capture(plan);
  upload_plan(plan, s, false);
}

void DevicePlan::forget_captures() {
  captured_ = false;
  captured_shape_ = {};
}

void DevicePlan::mark_used(cudaStream_t s) {
  if (is_capturing(s)) return;  // captured_ guards the buffer instead
  ensure_events();
  DCPMLA_CUDA_CHECK(cudaEventRecord(used_, s));
}

}  // namespace dcpmla::cuda
