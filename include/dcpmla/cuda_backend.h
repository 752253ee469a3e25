// The CUDA backend (sm_90a): the Backend interface over one GPU's memory.
//
// Stream is a cudaStream_t (nullptr: the legacy default stream). Every call is asynchronous on
// that stream except where noted: upload from and download to pageable (unregistered) host memory
// synchronise the stream before returning, so the host buffer may be reused or read at once;
// with pinned host memory they are fully asynchronous and synchronize() is the caller's job.
// Errors from the CUDA runtime become Error(backend_failure, <call>, "cudaSuccess", <message>).
//
// decode() uploads the host Plan into device buffers owned by the backend (grown, never shrunk).
// A repeated call with an unchanged plan skips the upload, which also makes decode capturable in
// a CUDA graph once the same plan has been run outside the capture; a capture that would need a
// new upload throws Error(unsupported). Block ids in the device block table cannot be checked on
// the host (make_plan checks the host batch's): an id outside [0, num_blocks) reads no memory;
// its tokens become NaN keys, whose rows are garbage (O NaN, LSE -inf, which merges drop).
#pragma once

#include <memory>

#include "dcpmla/backend.h"

namespace dcpmla {

// True iff device 0 exists and runs this build's kernels. Never throws.
bool cuda_available();

// Throws Error(backend_failure) when `device` cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

// Split-KV limits for decoding `batch` on `device` (gpu_plan_limits in src/cuda/launch_plan.h):
// no split when the batch fills the SMs, else at most one wave of thread blocks, and no split
// shorter than 256 tokens.
PlanLimits cuda_plan_limits(const Batch& batch, const Sharding& sharding, int num_heads,
                            int block_size, int device = 0);

}  // namespace dcpmla
