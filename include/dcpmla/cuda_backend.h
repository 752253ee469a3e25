// The CUDA backend (sm_90a): the Backend interface over one GPU's memory.
//
// Stream is a cudaStream_t (nullptr: the legacy default stream). Every call is asynchronous on
// that stream except where noted: upload from and download to pageable (unregistered) host memory
// synchronise the stream before returning, so the host buffer may be reused or read at once;
// with pinned host memory they are fully asynchronous and synchronize() is the caller's job.
// Errors from the CUDA runtime become Error(backend_failure, <call>, "cudaSuccess", <message>).
//
// decode() runs a Schedule (schedule.h): written from the host with Schedule::update (an
// asynchronous copy from pinned memory) or planned on the GPU with Schedule::plan_on_device. A
// decode captured in a CUDA graph is launched for its schedule's capacity and reads the plan,
// counts included, from the schedule's memory, so writing the schedule on the replay stream
// before a replay makes the replay run the new batch. Several schedules (one per capture size)
// on one backend replay in any order. An eager decode may take a host Plan instead (the backend
// writes it into a schedule of its own); under stream capture that is refused.
//
// Block ids in the device block table cannot be checked on the host: an id outside
// [0, num_blocks) reads no memory; its tokens become NaN keys, whose rows come out NaN.
#pragma once

#include <memory>

#include "dcpmla/backend.h"

namespace dcpmla {

// True iff device 0 exists and runs this build's kernels. Never throws.
bool cuda_available();

// Throws Error(backend_failure) when `device` cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace dcpmla
