// A scoped current-device switch: collectives and the streams handed to them belong to one
// device, while the calling thread may have another one current.
#pragma once

#include <cuda_runtime_api.h>

#include "gpu/check.h"

namespace dcpmla::gpu {

// Makes `device` current for the calling thread for the scope and restores the previous one.
// Host-only calls, so it is allowed while a stream is being captured.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    int current = -1;
    DCPMLA_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device) {
      DCPMLA_CUDA_CHECK(cudaSetDevice(device));
      previous_ = current;
    }
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

}  // namespace dcpmla::gpu
