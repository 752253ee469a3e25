// A simulation scenario with an explicit batch: the (Q, T) lists of the SPEC test vectors instead
// of make_scenario's random draft counts and lengths. Could move into dcpmla/sim next to
// make_scenario.
#pragma once

#include <cstdint>
#include <span>

#include "dcpmla/sim/scenario.h"

namespace dcpmla::tool {

// Request b has q_lens[b] query tokens and global length total_lens[b] (which includes them);
// masks is empty (all causal) or one per request. From spec: world, interleave, heads,
// block_size, padding_rows, extra_blocks, dtypes, scales and seed; requests, max_drafts and
// max_context are set from the lists. Block tables, query and KV are drawn as make_scenario
// draws them: ids a random permutation of the cache (rank 0 holds the most tokens), unused
// columns -1, extra_blocks unused pages; q ~ N(0, 0.5) rounded to q_dtype, latents ~ N(0, 1).
// Throws Error on inconsistent lists or spec.
sim::Scenario make_fixed_scenario(sim::ScenarioSpec spec, std::span<const int> q_lens,
                                  std::span<const std::int64_t> total_lens,
                                  std::span<const Mask> masks = {});

}  // namespace dcpmla::tool
