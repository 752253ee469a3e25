// The CUDA backend (sm_90a): the Backend interface over one GPU's memory.
//
// Stream is a cudaStream_t (nullptr: the legacy default stream). Every call is asynchronous on
// that stream except where noted: upload from and download to pageable (unregistered) host memory
// synchronise the stream before returning, so the host buffer may be reused or read at once;
// with pinned host memory they are fully asynchronous and synchronize() is the caller's job.
// Errors from the CUDA runtime become Error(backend_failure, <call>, "cudaSuccess", <message>).
//
// decode() uploads the host Plan into device buffers owned by the backend (grown, never shrunk),
// skipping the upload when the plan is unchanged. Block ids in the device block table cannot be
// checked on the host (make_plan checks the host batch's): an id outside [0, num_blocks) reads no
// memory; its tokens become NaN keys, whose rows are garbage (O NaN, LSE -inf, which merges drop).
//
// CUDA graphs. A decode can be captured once its plan is uploaded (by an uncaptured decode() or
// update_decode_plan with that plan). The captured kernels are launched for the plan buffers'
// capacity and read the plan, counts included, from those buffers. Before each replay, the host
// calls update_decode_plan(backend, next_plan, stream) on the replay stream: it rewrites the
// buffers in place (an asynchronous copy from pinned memory; the host waits only for the copy of
// two updates ago), so the replay runs next_plan with its new lengths and bounds. next_plan must
// keep the captured shapes (heads, block size, cache blocks, rows incl. padding, requests, at most
// the block table's columns, at most the workspace) and fit the capacity; otherwise the update
// throws Error(inconsistent / shape_mismatch / unsupported) and the buffers are untouched.
// reserve_decode_capacity before capturing sizes them for the largest step expected.
#pragma once

#include <memory>

#include "dcpmla/backend.h"

namespace dcpmla {

// True iff device 0 exists and runs this build's kernels. Never throws.
bool cuda_available();

// Throws Error(backend_failure) when `device` cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

// Room in the device plan buffers: decode thread blocks (one per 64 (row, head) pairs of a work
// item), merge rows (query rows of split requests), query rows.
struct DecodeCapacity {
  std::int64_t thread_blocks = 0;
  std::int64_t merge_rows = 0;
  std::int64_t rows = 0;
};
// What decoding `plan` needs; take the largest plan of the steps a graph will replay.
DecodeCapacity decode_capacity(const Plan& plan);
// The functions below throw Error(invalid_argument) when `backend` is not a CUDA backend.
void reserve_decode_capacity(Backend& backend, const DecodeCapacity& capacity);
void update_decode_plan(Backend& backend, const Plan& plan, Stream s);
// Promises that the graphs captured so far will not be replayed: plans may grow and change shape
// again (a new capture then follows the same rules).
void forget_captured_decodes(Backend& backend);

// Split-KV limits for decoding `batch` on `device` (gpu_plan_limits in src/cuda/launch_plan.h):
// no split when the batch fills the SMs, else at most one wave of thread blocks, and no split
// shorter than 256 tokens.
PlanLimits cuda_plan_limits(const Batch& batch, const Sharding& sharding, int num_heads,
                            int block_size, int device = 0);

}  // namespace dcpmla
