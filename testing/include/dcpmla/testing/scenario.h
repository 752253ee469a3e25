// Random, realistic DCP + speculative-decoding problems: a ragged batch, its query, every
// request's global latent KV, and the block tables of the rank caches. Shared by the demo, the
// property tests and the benchmarks, for every backend.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "dcpmla/batch.h"
#include "dcpmla/dcp.h"
#include "dcpmla/plan.h"
#include "dcpmla/types.h"

namespace dcpmla::testing {

struct ScenarioSpec {
  int world = 2;
  int interleave = 1;
  int heads = 16;  // heads after the query all-gather; a multiple of world
  int requests = 8;
  int max_drafts = 7;  // Q_b = 1 + drafts, drafts drawn from 0..max_drafts
  int block_size = 64;
  std::int64_t max_context = 4096;  // T drawn log-uniformly from [Q, max_context]
  bool short_request = true;  // make request 0 have T < W + Q (rows that see nothing on a rank)
  double full_mask_fraction = 0.0;  // share of requests with a non-causal (full) mask
  int padding_rows = 0;
  int extra_blocks = 3;  // unused (poisoned) pages in every rank cache
  DType kv_dtype = DType::bf16;
  DType q_dtype = DType::bf16;  // f32 or bf16; also the output dtype
  float k_scale = 0.0625f;      // used for fp8 caches only
  float softmax_scale = 0.1352338f;
  std::uint64_t seed = 1;
};

struct Scenario {
  ScenarioSpec spec;
  Batch batch;
  std::int64_t num_blocks = 0;         // blocks in every rank cache
  std::vector<float> q;                // [rows, H, 576], values exactly representable in q_dtype
  std::vector<std::vector<float>> kv;  // per request [T_b, 576] latents before quantisation
};

// Random draft counts and lengths drawn from the spec. Throws Error on an inconsistent spec
// (heads not a multiple of world, ...).
Scenario make_scenario(const ScenarioSpec& spec);

// An explicit batch (the SPEC vectors): request b has q_lens[b] query tokens and global length
// total_lens[b] (which includes them); masks is empty (all causal) or one per request. requests,
// max_drafts, max_context and short_request of the spec are set from the lists; everything else
// (world, interleave, heads, block size, padding rows, extra blocks, dtypes, scales, seed) is
// used as given. Block tables, query and KV are drawn as make_scenario draws them: ids a random
// permutation of the cache (rank 0 holds the most tokens), unused columns -1, extra_blocks
// unused pages; q ~ N(0, 0.5) rounded to q_dtype, latents ~ N(0, 1).
Scenario make_fixed_scenario(ScenarioSpec spec, std::span<const int> q_lens,
                             std::span<const std::int64_t> total_lens,
                             std::span<const Mask> masks = {});

// x rounded to t (f32 or bf16), as a scenario's query holds it.
float round_to(DType t, float x);
// The value a cache of dtype t holds for x as a reader sees it (k_scale applied for fp8).
double stored_value(float x, DType t, float k_scale);

}  // namespace dcpmla::testing
