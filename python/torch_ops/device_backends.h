// The backend that runs a torch op for the tensors' device: one CPU backend per process (a thread
// per hardware thread, one call at a time: its thread pool is not re-entrant) and, in builds with
// the CUDA backend, one CUDA backend per GPU, run on torch's current stream of that GPU.
#pragma once

#include <memory>
#include <mutex>

#include "dcpmla/backend.h"
#include "tensor_args.h"

namespace dcpmla::torch_ops {

// The backend of `place` for the duration of one op call: holds the CPU backend's lock, or keeps
// torch's current CUDA device as it was (the CUDA backend makes its own device current).
class BackendCall {
 public:
  explicit BackendCall(Place place);
  ~BackendCall();
  BackendCall(const BackendCall&) = delete;
  BackendCall& operator=(const BackendCall&) = delete;

  Backend& backend() const { return *backend_; }
  // torch's current stream on the device (nullptr on the CPU).
  Stream stream() const { return stream_; }

 private:
  std::unique_lock<std::mutex> lock_;
  Backend* backend_ = nullptr;
  Stream stream_ = nullptr;
  int previous_device_ = -1;
};

// Whether this build has the CUDA backend.
bool built_with_cuda();

}  // namespace dcpmla::torch_ops
