// The CPU backend's log-sum-exp merge of S partial states (Backend::merge_states).
#pragma once

#include "dcpmla/backend.h"
#include "thread_pool.h"

namespace dcpmla::cpu {

void merge_states(ThreadPool& pool, const MergeStatesArgs& args);

}  // namespace dcpmla::cpu
