// The host side of the schedules torch ops run: a schedule tensor (uint8, schedule_bytes of its
// capacity) holds a plan's device image, and the Schedule that wrote it (its config, capacity and
// what the host knows of the plan written last) is kept here, found by the tensor's address.
// plan_host_ / plan_device_ register a schedule tensor, mla_decode_ reads it, and
// schedule_release_ forgets it (BatchMLADecodeWrapper does so when its schedule is freed).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dcpmla/schedule.h"
#include "tensor_args.h"

namespace dcpmla::torch_ops {

// The plan config of the ops' int[] config argument [num_heads, block_size, num_blocks,
// dcp_world_size, dcp_rank, dcp_interleave], with `backend`'s model; checked.
PlanConfig plan_config(const std::vector<std::int64_t>& config, const Backend& backend);
// The capacity for the int[] limits [max_num_reqs, max_num_tokens, max_blocks_per_req].
ScheduleCapacity capacity(const PlanConfig& config, const std::vector<std::int64_t>& limits);

// The schedule over `memory` (schedule_bytes(capacity) bytes or more on `place`) for exactly this
// config and capacity: the one registered there, or a new one replacing it.
Schedule& prepare_schedule(Place place, Backend& backend, const PlanConfig& config,
                           const ScheduleCapacity& capacity, const TensorRef& memory);
// The schedule registered over `memory` on `place`; Error naming `name` when there is none.
Schedule& registered_schedule(Place place, const TensorRef& memory, const char* name);
void release_schedule(const void* memory);

}  // namespace dcpmla::torch_ops
