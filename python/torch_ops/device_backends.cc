#include "device_backends.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"

#ifdef DCPMLA_TORCH_CUDA
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "dcpmla/cuda_backend.h"
#endif

namespace dcpmla::torch_ops {
namespace {

std::mutex& cpu_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Made under cpu_mutex().
Backend& cpu_backend() {
  static const std::unique_ptr<Backend> backend =
      make_cpu_backend(int(std::max(1u, std::thread::hardware_concurrency())));
  return *backend;
}

#ifdef DCPMLA_TORCH_CUDA
// torch's current stream of a device, from libtorch_cuda (loaded by torch whenever it uses CUDA;
// linking it would keep this module from loading into a CPU-only torch).
void* current_cuda_stream(int device) {
  using Getter = int32_t (*)(int32_t, void**);
  static const Getter getter = [] {
    void* lib = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
    return lib ? reinterpret_cast<Getter>(dlsym(lib, "aoti_torch_get_current_cuda_stream"))
               : nullptr;
  }();
  DCPMLA_REQUIRE(getter != nullptr, ErrorCode::backend_failure, "torch",
                 "libtorch_cuda loaded (aoti_torch_get_current_cuda_stream)", "not found");
  void* stream = nullptr;
  DCPMLA_REQUIRE(getter(device, &stream) == 0, ErrorCode::backend_failure, "torch",
                 "the current CUDA stream of device " + std::to_string(device),
                 "an error from aoti_torch_get_current_cuda_stream");
  return stream;
}

std::mutex& cuda_mutex() {
  static std::mutex mutex;
  return mutex;
}

// One backend per device, made on first use and kept for the process.
Backend& cuda_backend(int device) {
  static std::vector<std::unique_ptr<Backend>> backends;
  const std::lock_guard<std::mutex> lock(cuda_mutex());
  if (std::size_t(device) >= backends.size()) backends.resize(std::size_t(device) + 1);
  if (!backends[std::size_t(device)]) backends[std::size_t(device)] = make_cuda_backend(device);
  return *backends[std::size_t(device)];
}
#endif

}  // namespace

bool built_with_cuda() {
#ifdef DCPMLA_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

BackendCall::BackendCall(Place place) {
  if (!place.cuda()) {
    lock_ = std::unique_lock<std::mutex>(cpu_mutex());
    backend_ = &cpu_backend();
    return;
  }
#ifdef DCPMLA_TORCH_CUDA
  if (cudaGetDevice(&previous_device_) != cudaSuccess) previous_device_ = -1;
  backend_ = &cuda_backend(place.device);
  stream_ = current_cuda_stream(place.device);
#else
  throw Error(ErrorCode::unsupported, "device", "CPU tensors (this build has no CUDA backend)",
              describe(place));
#endif
}

BackendCall::~BackendCall() {
#ifdef DCPMLA_TORCH_CUDA
  if (previous_device_ >= 0) cudaSetDevice(previous_device_);
#endif
}

}  // namespace dcpmla::torch_ops
