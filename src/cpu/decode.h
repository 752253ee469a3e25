// The CPU decode: executes a schedule's work items over one rank's paged cache.
#pragma once

#include "dcpmla/backend.h"
#include "thread_pool.h"

namespace dcpmla::cpu {

// args are validated; the schedule is args.schedule or the backend's copy of args.plan.
void decode(ThreadPool& pool, const DecodeArgs& args, const Schedule& schedule);

}  // namespace dcpmla::cpu
