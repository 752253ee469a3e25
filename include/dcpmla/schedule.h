// A schedule: one decode plan's device image, in memory the caller provides (size it with
// schedule_bytes, the CUB pattern), written from the host (update) or planned on the device
// (plan_on_device) and read by Backend::decode. Any number of schedules per backend; a decode
// captured in a CUDA graph reads its schedule's memory, so each capture size gets its own
// schedule, and writing the schedule before a replay makes that replay run the new batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dcpmla/batch.h"
#include "dcpmla/plan.h"
#include "dcpmla/tensor.h"

namespace dcpmla {

class Backend;
using Stream = void*;

// What a schedule can hold.
struct ScheduleCapacity {
  std::int32_t requests = 0;            // B
  std::int64_t rows = 0;                // query rows incl. padding (the decode's q rows at most)
  std::int32_t blocks_per_request = 0;  // block-table columns a request may use
  std::int64_t work_items = 0;
  std::int64_t merge_rows = 0;
  std::int64_t partial_rows = 0;  // split-KV workspace rows (decode_workspace_bytes)
  friend bool operator==(const ScheduleCapacity&, const ScheduleCapacity&) = default;
};

// Exactly what `plan` needs (blocks_per_request: the most blocks one of its requests reads).
ScheduleCapacity capacity_of(const Plan& plan);
// Field-wise maximum: a capacity for every plan of a set.
ScheduleCapacity max_capacity(const ScheduleCapacity& a, const ScheduleCapacity& b);
// The most a batch within these limits can need under `config`'s model: for schedules written
// by plan_on_device, or by the host for batches not known yet. Splits follow the model (at most
// 2 x workers per request, and never under min_split_tokens).
ScheduleCapacity capacity_for_limits(const PlanConfig& config, std::int32_t max_requests,
                                     std::int64_t max_rows, std::int32_t max_blocks_per_request);

// Bytes of backend memory a schedule of this capacity occupies (16-byte aligned sections).
std::size_t schedule_bytes(const ScheduleCapacity& capacity);

// The batch of a device-side plan, in the backend's memory: int32 query_start_loc [B + 1] and
// seq_lens [B] (global T including this step's tokens, vLLM's meaning; every mask causal).
struct DeviceBatchRef {
  TensorRef query_start_loc;     // [B + 1] i32
  TensorRef seq_lens;            // [B] i32
  std::int64_t num_tokens = -1;  // the decode's q rows (padding past query_start_loc[B]); -1: cap
};

// What plan_on_device found wrong in the device batch (read back by Schedule::status). The decode
// of a faulted schedule writes NaN into every output row and runs no work item.
enum class ScheduleFault : std::int32_t {
  none = 0,
  first_start_not_zero,   // query_start_loc[0] != 0
  query_not_increasing,   // query_start_loc[b + 1] <= query_start_loc[b]: Q < 1
  length_below_query,     // seq_lens[b] < Q_b
  rows_over_capacity,     // query_start_loc[B] > num_tokens
  blocks_over_capacity,   // a request needs more blocks than capacity.blocks_per_request
  work_over_capacity,     // the plan needs more work items than the capacity
  merges_over_capacity,   // ... more merge rows
  partials_over_capacity  // ... more split-KV workspace rows
};
const char* to_string(ScheduleFault fault);

struct ScheduleStatus {
  ScheduleFault fault = ScheduleFault::none;
  std::int32_t request = -1;  // the first request that breaks the rule, -1 for batch-wide rules
  std::string message;        // names the request and the rule; empty when fault == none
  bool ok() const { return fault == ScheduleFault::none; }
};

class Schedule {
 public:
  // A view of `memory` (>= schedule_bytes(capacity) bytes of `backend`'s memory, 16-byte
  // aligned), which the caller keeps alive. The config fixes heads, block size, cache blocks,
  // sharding and device model for every plan written into it; config() adds the capacity's
  // limits (max_work_items, max_partial_rows): plan host batches with make_plan(batch, config()).
  Schedule(Backend& backend, const PlanConfig& config, const ScheduleCapacity& capacity,
           void* memory, std::size_t bytes);
  // Allocates its own memory through the backend.
  Schedule(Backend& backend, const PlanConfig& config, const ScheduleCapacity& capacity);
  Schedule(Schedule&&) noexcept;
  Schedule& operator=(Schedule&&) noexcept;
  ~Schedule();

  // Writes a host plan (made with this schedule's config) with an asynchronous copy on s: no
  // synchronisation (the host waits only if the copy of two updates ago has not run yet). Throws
  // Error, leaving the schedule as it was, when the plan exceeds the capacity or has another
  // config, or (on a GPU) when s is under stream capture: a captured copy would read staging
  // memory that later updates rewrite (a graph plans with plan_on_device).
  void update(const Plan& plan, Stream s);
  // Plans a host batch into the schedule: the plan make_plan(batch, config()) makes, its work
  // items written into the schedule's host image as they are made (no Plan copied), then the
  // same asynchronous copy as update. Throws Error, leaving the schedule as it was, when the
  // batch is invalid or its plan exceeds the capacity, or s is under capture (as update).
  void plan(const Batch& batch, Stream s);
  // Plans on the device from batch (device memory): exactly the plan make_plan makes for the
  // same batch and config, or a fault (status) with every decode output poisoned. Nothing is
  // read or written out of bounds whatever the batch holds. Enqueued on s; no synchronisation.
  void plan_on_device(const DeviceBatchRef& batch, Stream s);
  // Whether plans made with `config` may be written into it: the same heads, block size, cache
  // blocks, sharding and pairs a work item (update refuses the others).
  bool accepts(const PlanConfig& config) const;
  // The fault of the plan written last (synchronises s; ok for host updates).
  ScheduleStatus status(Stream s) const;

  Backend& backend() const { return *backend_; }
  const PlanConfig& config() const { return config_; }
  const ScheduleCapacity& capacity() const { return capacity_; }
  void* memory() const { return memory_; }

  // What the host knows of the plan written last: set by update; by plan_on_device only the
  // request count (a shape) and on_device (the counts then live on the device only).
  struct HostView {
    bool written = false;
    bool on_device = false;
    std::int32_t requests = 0;
    std::int64_t rows = 0;        // the decode's q rows (num_tokens)
    std::int64_t real_rows = 0;   // query_start_loc[B]; -1 when planned on the device
    std::int64_t work_items = 0;  // -1 when planned on the device
    std::int64_t merge_rows = 0;
    std::int32_t max_splits = 1;
    bool kv_shared = false;  // most KV tokens read by more than one work item
  };
  const HostView& host_view() const { return host_; }
  // Backend-specific state (staging buffers); the backend creates it on first use.
  std::shared_ptr<void>& backend_state() { return state_; }

 private:
  void limit_config();
  void require_fits(const ScheduleCapacity& need) const;

  Backend* backend_ = nullptr;
  PlanConfig config_;
  ScheduleCapacity capacity_;
  void* memory_ = nullptr;
  bool owned_ = false;
  HostView host_;
  std::shared_ptr<void> state_;
  friend class ScheduleWriter;
};

}  // namespace dcpmla
