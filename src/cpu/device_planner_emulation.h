// The GPU planner's steps (core/device_planner.h) run on the host over host memory: the CPU
// backend's Schedule::plan_on_device, and how CI checks those steps against make_plan.
#pragma once

#include "dcpmla/schedule.h"

namespace dcpmla::cpu {

// Plans `batch` (host memory) into the schedule's memory (host memory).
void plan_on_host(Schedule& schedule, const DeviceBatchRef& batch, std::int64_t num_tokens);

}  // namespace dcpmla::cpu
