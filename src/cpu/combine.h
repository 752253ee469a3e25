// CPU implementations of the DCP combine pieces and the small layout kernels.
#pragma once

#include "dcpmla/backend.h"
#include "thread_pool.h"

namespace dcpmla::cpu {

void unpack_query(ThreadPool& pool, const UnpackQueryArgs& args);
void combine_rescale(ThreadPool& pool, const CombineRescaleArgs& args);
void combine_pack(ThreadPool& pool, const CombinePackArgs& args);
void combine_merge(ThreadPool& pool, const CombineMergeArgs& args);
void convert(const ConvertArgs& args);

}  // namespace dcpmla::cpu
