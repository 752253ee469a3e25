// The planner: a pure function from (batch, sharding, shape, limits) to everything a backend needs
// to run one rank's decode. Backends execute plans; they never re-derive request boundaries.
#pragma once

#include <cstdint>
#include <vector>

#include "dcpmla/batch.h"
#include "dcpmla/sharding.h"

namespace dcpmla {

// How the KV of a request is cut into work items.
struct PlanLimits {
  // Split a request's local KV into chunks of this many blocks (0: choose from target_work_items).
  // Chunks start at multiples of the chunk size, so two plans with the same chunk cut every
  // request's KV at the same places (flattened and native forms then agree bit for bit).
  int kv_chunk_blocks = 0;
  // Aim for about this many work items in total (e.g. a few per thread or per SM); 0 = no split.
  int target_work_items = 0;
  // Never cut chunks smaller than this many blocks when choosing automatically.
  int min_chunk_blocks = 1;
  // Empty, or one entry per request: a positive entry cuts that request's KV into chunks of this
  // many blocks instead of the batch-wide chunk above (e.g. only the requests that would run in
  // a GPU's last, partly filled wave of thread blocks: gpu_plan_limits); 0 keeps the batch-wide
  // chunk.
  std::vector<std::int32_t> request_chunk_blocks = {};
};

struct PlanConfig {
  Sharding sharding;
  int num_heads = 0;            // heads seen by the kernel (after the DCP query all-gather)
  int block_size = 0;           // tokens per cache block
  std::int64_t num_blocks = 0;  // blocks in each rank's cache (block ids must be < this)
  PlanLimits limits;
};

// One unit of backend work: all Q rows of one request against local KV tokens [kv_begin, kv_end).
struct WorkItem {
  std::int32_t request;
  std::int32_t row_begin;  // first query row of the request
  std::int32_t num_rows;   // Q of the request
  std::int32_t kv_begin;   // local token index, a multiple of block_size
  std::int32_t kv_end;     // exclusive
  // -1: the request is not split and the item writes the final O / LSE rows.
  // Otherwise the first of num_rows consecutive rows in the fp32 partial workspace.
  std::int32_t partial_row;
};

// A split request: its num_splits partial results, split s at partial rows
// [first_partial_row + s * num_rows, ... + num_rows), are merged into its output rows.
struct SplitMerge {
  std::int32_t request;
  std::int32_t row_begin;
  std::int32_t num_rows;
  std::int32_t num_splits;
  std::int32_t first_partial_row;
};

struct Plan {
  PlanConfig config;
  std::int32_t num_requests = 0;
  std::int64_t num_rows = 0;       // query rows incl. padding
  std::int64_t num_real_rows = 0;  // query_start_loc[B]
  std::int32_t max_q = 0;
  bool uniform = false;  // num_rows == B * max_q (padding rows make it ragged)
  std::int32_t max_local_len = 0;

  std::vector<std::int32_t> row_request;        // [num_rows], -1 for padding rows
  std::vector<std::int64_t> row_global_bound;   // [num_rows], exclusive; 0 for padding
  std::vector<std::int32_t> row_local_bound;    // [num_rows], visible local prefix on this rank
  std::vector<std::int32_t> request_local_len;  // [B], local_len(rank, T_b)
  std::vector<WorkItem> work;                   // every request has >= 1 item (maybe empty KV)
  std::vector<SplitMerge> merges;
  std::int64_t num_partial_rows = 0;  // rows of the split-KV partial workspace
};

// Validates everything (throws Error naming the argument, expected and actual) and plans.
Plan make_plan(const Batch& batch, const PlanConfig& config);

// Only the validation part of make_plan.
void validate_batch(const Batch& batch, const PlanConfig& config);

// Bytes of scratch a backend needs to run `plan`: fp32 partial O [rows, H, 512] + LSE [rows, H].
std::size_t decode_workspace_bytes(const Plan& plan);

}  // namespace dcpmla
