// The CPU decode: executes a plan's work items over one rank's paged cache.
#pragma once

#include "dcpmla/backend.h"
#include "thread_pool.h"

namespace dcpmla::cpu {

void decode(ThreadPool& pool, const DecodeArgs& args);

}  // namespace dcpmla::cpu
