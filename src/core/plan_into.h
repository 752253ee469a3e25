// make_plan with its work items written where the caller says, so that a schedule's host image
// receives them as they are made (Schedule::plan) instead of a copy of a finished plan.
#pragma once

#include <cstdint>
#include <functional>

#include "dcpmla/batch.h"
#include "dcpmla/plan.h"

namespace dcpmla {

// Called once, after every check of the batch and before any work item is written, with the
// plan's other fields final: returns room for `items` work items in launch order, or throws
// (then nothing has been written).
using WorkItemSink = std::function<WorkItem*(Plan& plan, std::int64_t items)>;

// make_plan, its work items in the sink's room (the returned plan's `work` holds them only if
// the sink put them there).
Plan make_plan_into(const Batch& batch, const PlanConfig& config, const WorkItemSink& sink);

}  // namespace dcpmla
