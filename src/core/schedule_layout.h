// Where a schedule's sections lie in its memory, as the host writes them and the kernels (and
// the CPU decode) read them. The header comes first and the work items last, so a host update
// copies one range: the header up to the plan's last work item.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dcpmla/plan.h"
#include "dcpmla/schedule.h"

namespace dcpmla {

// The plan's counts. The first 32 bytes are what the decode kernels read.
struct ScheduleHeader {
  std::int64_t num_items;
  std::int64_t num_merge_rows;
  std::int64_t padding_begin;  // rows [padding_begin, padding_end) get O = 0, LSE = -inf
  std::int64_t padding_end;    // (every row gets NaN when fault is set)
  // kNoFault, or (request + 1) << 8 | ScheduleFault: the first rule broken.
  std::uint64_t fault;
  std::int64_t num_partial_rows;
  std::int32_t max_splits;
  std::int32_t num_requests;
  std::int64_t num_rows;
};
static_assert(sizeof(ScheduleHeader) == 64);
inline constexpr std::uint64_t kNoFault = ~std::uint64_t(0);

struct ScheduleLayout {
  std::size_t row_bound = 0;   // [capacity.rows] int32
  std::size_t merge_rows = 0;  // [capacity.merge_rows] MergeRow
  std::size_t items = 0;       // [capacity.work_items] WorkItem
  std::size_t scratch = 0;     // the GPU planner's scratch (device_planner.h)
  std::size_t bytes = 0;
};
ScheduleLayout schedule_layout(const ScheduleCapacity& capacity);

// Typed pointers into one schedule's memory.
struct ScheduleView {
  ScheduleHeader* header;
  std::int32_t* row_bound;
  MergeRow* merge_rows;
  WorkItem* items;
  std::byte* scratch;
};
ScheduleView schedule_view(void* memory, const ScheduleCapacity& capacity);

// Writes `plan` into a host image of the schedule (the layout's bytes) and returns how many
// leading bytes hold it. The plan must fit the capacity (Schedule::update checks).
std::size_t pack_schedule(const Plan& plan, const ScheduleCapacity& capacity, std::byte* image);
// The same but for the work items, which are in the image already (work_items of them).
std::size_t pack_schedule_counts(const Plan& plan, std::int64_t work_items,
                                 const ScheduleCapacity& capacity, std::byte* image);

// The ScheduleStatus of a fault word.
ScheduleStatus decode_fault(std::uint64_t fault);

}  // namespace dcpmla
