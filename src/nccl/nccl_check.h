// NCCL and CUDA runtime failures as dcpmla::Error(backend_failure, <call>, "<success>", <message>),
// and the scoped current-device switch NCCL calls use.
#pragma once

#include <nccl.h>

#include <string>

#include "dcpmla/error.h"
#include "gpu/device_scope.h"

namespace dcpmla::nccl {

// NCCL's description of `result`, followed by ncclGetLastError(comm) when it adds anything.
std::string failure_message(ncclResult_t result, ncclComm_t comm);

// Throws Error(backend_failure, call, "ncclSuccess", failure_message(result, comm)) unless
// result is ncclSuccess.
void check_nccl(ncclResult_t result, const char* call, ncclComm_t comm = nullptr);

// Throws Error(backend_failure, call, "cudaSuccess", <CUDA's message>) unless cuda_result
// (a cudaError_t) is cudaSuccess.
void check_cuda(int cuda_result, const char* call);

// NCCL calls and the stream handed to them belong to the communicator's device.
using DeviceScope = gpu::DeviceScope;

}  // namespace dcpmla::nccl

#define DCPMLA_NCCL_CHECK(call, comm) ::dcpmla::nccl::check_nccl((call), #call, (comm))
#define DCPMLA_NCCL_CUDA_CHECK(call) ::dcpmla::nccl::check_cuda(int(call), #call)
