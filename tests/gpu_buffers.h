// What the multi-GPU tests (NCCL and peer communicators) share: the GPUs present, and raw device
// bytes on one GPU, filled from and read back to the host.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dcpmla/cuda_backend.h"

namespace dcpmla::gpu_testing {

// CUDA devices present, or 0 when the CUDA backend cannot run here. Never throws.
inline int gpu_count() {
  if (!cuda_available()) return 0;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device memory on one GPU.
class DeviceBytes {
 public:
  DeviceBytes(int device, std::size_t bytes) : device_(device), bytes_(bytes) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaMalloc(&data_, bytes ? bytes : 1), "cudaMalloc");
  }
  ~DeviceBytes() {
    cudaSetDevice(device_);
    cudaFree(data_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  std::uint8_t* get() const { return static_cast<std::uint8_t*>(data_); }
  std::size_t size() const { return bytes_; }

  // Synchronous: the device is idle before and after.
  void fill(const std::vector<std::uint8_t>& host) const {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaMemcpy(data_, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<std::uint8_t> read() const {
    std::vector<std::uint8_t> host(bytes_);
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check_cuda(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "download");
    return host;
  }
  // Ordered on s; `host` must stay alive until s has been synchronised.
  void upload(const std::vector<std::uint8_t>& host, cudaStream_t s) const {
    if (host.size() != bytes_) throw std::logic_error("DeviceBytes::upload: size mismatch");
    check_cuda(cudaMemcpyAsync(data_, host.data(), bytes_, cudaMemcpyHostToDevice, s), "upload");
  }
  // Waits for s, then for the copy.
  std::vector<std::uint8_t> read(cudaStream_t s) const {
    std::vector<std::uint8_t> host(bytes_);
    check_cuda(cudaMemcpyAsync(host.data(), data_, bytes_, cudaMemcpyDeviceToHost, s), "download");
    check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return host;
  }

 private:
  int device_;
  std::size_t bytes_;
  void* data_ = nullptr;
};

}  // namespace dcpmla::gpu_testing
