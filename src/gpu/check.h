// CUDA runtime errors as dcpmla::Error(backend_failure, <call>, "cudaSuccess", <message>).
#pragma once

#include <cuda_runtime_api.h>

#include "dcpmla/error.h"

namespace dcpmla::gpu {

inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) {
    throw Error(ErrorCode::backend_failure, call, "cudaSuccess", cudaGetErrorString(e));
  }
}

// After a kernel launch: reports launch-configuration errors (and earlier asynchronous ones).
inline void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

}  // namespace dcpmla::gpu

#define DCPMLA_CUDA_CHECK(call) ::dcpmla::gpu::check((call), #call)
