// The planner: a pure function from (batch, sharding, shape, device model) to everything a backend
// needs to run one rank's decode: work items in launch order and the merge rows of split requests.
// Backends execute plans as they are (through a Schedule, schedule.h); nothing re-tiles them.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "dcpmla/batch.h"
#include "dcpmla/sharding.h"

namespace dcpmla {

// What the planner knows of the machine that runs a plan (Backend::device_model supplies it).
struct DeviceModel {
  // Work items run at once (SMs of a GPU, threads of the CPU); 0: never split a request's KV.
  int workers = 0;
  // (row, head) pairs one work item computes at most; 0: all of a request's Q x H pairs.
  int tile_pairs = 0;
  // A split never cuts a request's local KV into chunks shorter than this many tokens.
  int min_split_tokens = 256;
};

struct PlanConfig {
  Sharding sharding;
  int num_heads = 0;            // heads seen by the kernel (after the DCP query all-gather)
  int block_size = 0;           // tokens per cache block
  std::int64_t num_blocks = 0;  // blocks in each rank's cache (block ids must be < this)
  DeviceModel model;
  // > 0: cut every request's local KV into chunks of this many blocks instead of the model's
  // choice. Chunks start at multiples of the chunk, so two plans with the same chunk cut every
  // request's KV at the same places (flattened and native forms then agree bit for bit).
  int kv_chunk_blocks = 0;
  // Limits a split must respect (-1: none): a split is chosen only when the plan's work items and
  // split-KV partial rows stay within them (a Schedule's capacity; the workspace the caller has).
  std::int64_t max_work_items = -1;
  std::int64_t max_partial_rows = -1;
};

// An allocator whose resize leaves elements default-initialised (for trivial types: unwritten),
// so that make_plan writes each work item once instead of after zeroing them all.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// One unit of backend work: pairs [pair_begin, pair_begin + num_pairs) of one request, where its
// pairs are its Q rows x H heads in row-major order (pair = j * H + h), against local KV tokens
// [kv_begin, kv_end). 32 bytes: the device reads the plan's items as they are.
struct WorkItem {
  std::int32_t request;         // block-table row
  std::int32_t row_begin;       // first query row of the request
  std::int32_t pair_begin;      // first pair of the item
  std::int32_t num_pairs;       // >= 1
  std::int32_t kv_begin;        // local token index, a multiple of block_size
  std::int32_t kv_end;          // exclusive
  std::int32_t kv_visible_end;  // max over the item's rows of min(row bound, kv_end); >= kv_begin
  // -1: the request is not split and the item writes the final O / LSE rows. Otherwise the first
  // of the request's Q consecutive rows of this split in the fp32 partial workspace.
  std::int32_t partial_row;
};
static_assert(sizeof(WorkItem) == 32);

// One query row of a split request: merges num_splits partials (split s at partial row
// first_partial_row + s * split_stride_rows) into output row out_row, for every head.
struct MergeRow {
  std::int32_t out_row;
  std::int32_t first_partial_row;
  std::int32_t num_splits;
  std::int32_t split_stride_rows;  // the request's Q
};
static_assert(sizeof(MergeRow) == 16);

struct Plan {
  PlanConfig config;
  std::int32_t num_requests = 0;
  std::int64_t num_rows = 0;       // query rows incl. padding
  std::int64_t num_real_rows = 0;  // query_start_loc[B]
  std::int32_t max_splits = 1;     // most splits of one request
  // Block-table columns the group's fullest rank (rank 0) reads for one request at most: what
  // every rank requires of the table, so all ranks accept or refuse a shared table alike.
  std::int32_t blocks_per_request = 0;

  std::vector<std::int32_t> row_local_bound;    // [num_rows], visible local prefix; 0 for padding
  std::vector<std::int32_t> request_local_len;  // [B], local_len(rank, T_b)
  // Launch order: work items of the longest KV walk first, a request split's items together.
  // Every request has >= 1 item (maybe with empty KV).
  std::vector<WorkItem, UninitializedAllocator<WorkItem>> work;
  std::vector<MergeRow> merges;       // [rows of split requests]
  std::int64_t num_partial_rows = 0;  // rows of the split-KV partial workspace
  // KV tokens of the request splits cut into several work items (their row tiles walk the same
  // KV, from L2 after the first), and of those that are one item: the CUDA decode asks for its
  // bulk copies' L2 promotion by which is larger.
  std::int64_t kv_shared_tokens = 0;
  std::int64_t kv_alone_tokens = 0;
};

// Validates (throws Error naming the argument, expected and actual) and plans. The batch's block
// table is not read; validate_block_ids checks it when asked.
Plan make_plan(const Batch& batch, const PlanConfig& config);

// Only the validation part of make_plan.
void validate_batch(const Batch& batch, const PlanConfig& config);

// The config alone (block size, sharding, heads, cache blocks, device model, forced chunk), as
// make_plan and a Schedule check it.
void validate_config(const PlanConfig& config);

// Every block id a rank of config's group reads from batch.block_table is in [0, num_blocks), and
// the table has the columns for it. Rank 0 reads the most (every rank uses a prefix of the same
// row), so all ranks accept or refuse a shared batch alike.
void validate_block_ids(const Batch& batch, const PlanConfig& config);

// Bytes of scratch a decode with `partial_rows` split rows and `num_heads` heads needs: fp32
// partial O [rows, H, 512] + LSE [rows, H].
std::size_t decode_workspace_bytes(std::int64_t partial_rows, int num_heads);
inline std::size_t decode_workspace_bytes(const Plan& plan) {
  return decode_workspace_bytes(plan.num_partial_rows, plan.config.num_heads);
}

}  // namespace dcpmla
