// How the planner cuts requests' KV into splits (the host side; the GPU planner evaluates the same
// rules of plan_rules.h in parallel): a batch-wide chunk from the device model's cost, or, when
// the batch stays unsplit, the last-wave cut. docs/design/decode-kernel.md has the measurements.
#pragma once

#include <cstdint>
#include <vector>

#include "dcpmla/plan.h"

namespace dcpmla {

// Per request: Q, local KV blocks, work items a split needs.
struct SplitInputs {
  std::vector<std::int32_t> q;
  std::vector<std::int64_t> kv_blocks;
  std::vector<std::int64_t> tiles;
  void resize(int requests) {
    q.resize(std::size_t(requests));
    kv_blocks.resize(std::size_t(requests));
    tiles.resize(std::size_t(requests));
  }
};

// Chunk in blocks for every request (a request of kv_blocks <= chunk is not split).
std::vector<std::int64_t> choose_chunks(const SplitInputs& in, const PlanConfig& config);

}  // namespace dcpmla
