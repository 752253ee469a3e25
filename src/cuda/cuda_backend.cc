#include "dcpmla/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <string>

#include "cuda/decode/launch_plan.h"
#include "cuda/device_plan.h"
#include "cuda/kernels.h"
#include "gpu/check.h"

namespace dcpmla {
namespace {

cudaStream_t as_stream(Stream s) {
  return static_cast<cudaStream_t>(s);
}

bool is_pageable(const void* host) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, host) != cudaSuccess) {
    cudaGetLastError();  // older runtimes report unregistered host memory as an error
    return true;
  }
  return attr.type == cudaMemoryTypeUnregistered;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    int count = 0;
    DCPMLA_CUDA_CHECK(cudaGetDeviceCount(&count));
    require(device >= 0 && device < count, ErrorCode::backend_failure, "device",
            "a CUDA device index in [0, " + std::to_string(count) + ")", std::to_string(device));
    DCPMLA_CUDA_CHECK(cudaSetDevice(device_));
    DCPMLA_CUDA_CHECK(cuda::probe_kernels());
  }
  ~CudaBackend() override { cudaSetDevice(device_); }  // plan_ frees on this device

  std::string name() const override { return "cuda"; }

  void* allocate(std::size_t bytes) override {
    use_device();
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    DCPMLA_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  // Called from destructors (DeviceBuffer): never throws.
  void deallocate(void* p) override {
    if (!p) return;
    cudaSetDevice(device_);
    cudaFree(p);
  }
  void upload(void* dst, const void* host_src, std::size_t bytes, Stream s) override {
    use_device();
    if (bytes == 0) return;
    DCPMLA_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, as_stream(s)));
    if (is_pageable(host_src)) DCPMLA_CUDA_CHECK(cudaStreamSynchronize(as_stream(s)));
  }
  void download(void* host_dst, const void* src, std::size_t bytes, Stream s) override {
    use_device();
    if (bytes == 0) return;
    DCPMLA_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(s)));
    if (is_pageable(host_dst)) DCPMLA_CUDA_CHECK(cudaStreamSynchronize(as_stream(s)));
  }
  void synchronize(Stream s) override {
    use_device();
    DCPMLA_CUDA_CHECK(cudaStreamSynchronize(as_stream(s)));
  }
  void copy(void* dst, const void* src, std::size_t bytes, Stream s) override {
    use_device();
    if (bytes == 0 || dst == src) return;
    DCPMLA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(s)));
  }
  void accumulate(float* dst, const float* src, std::size_t count, Stream s) override {
    use_device();
    cuda::accumulate(dst, src, count, as_stream(s));
  }

  void write_kv(const KvWriteArgs& a, Stream s) override {
    use_device();
    cuda::write_kv(a, as_stream(s));
  }
  void decode(const DecodeArgs& a, Stream s) override {
    use_device();
    cuda::decode(a, plan_, as_stream(s));
  }
  void unpack_query(const UnpackQueryArgs& a, Stream s) override {
    use_device();
    cuda::unpack_query(a, as_stream(s));
  }
  void combine_rescale(const CombineRescaleArgs& a, Stream s) override {
    use_device();
    cuda::combine_rescale(a, as_stream(s));
  }
  void combine_pack(const CombinePackArgs& a, Stream s) override {
    use_device();
    cuda::combine_pack(a, as_stream(s));
  }
  void combine_merge(const CombineMergeArgs& a, Stream s) override {
    use_device();
    cuda::combine_merge(a, as_stream(s));
  }
  void convert(const ConvertArgs& a, Stream s) override {
    use_device();
    cuda::convert(a, as_stream(s));
  }

  cuda::DevicePlan& device_plan() {
    use_device();
    return plan_;
  }

 private:
  // The current device is per host thread; every entry point selects this backend's.
  void use_device() { DCPMLA_CUDA_CHECK(cudaSetDevice(device_)); }

  int device_;
  cuda::DevicePlan plan_;
};

}  // namespace

bool cuda_available() {
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
      cudaGetLastError();
      return false;
    }
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess || cudaSetDevice(0) != cudaSuccess ||
        cuda::probe_kernels() != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    cudaSetDevice(current);
    return true;
  } catch (...) {
    return false;
  }
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

namespace {

CudaBackend& as_cuda(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  require(cuda != nullptr, ErrorCode::invalid_argument, "backend", "a CUDA backend",
          "the '" + backend.name() + "' backend");
  return *cuda;
}

}  // namespace

DecodeCapacity decode_capacity(const Plan& plan) {
  const cuda::LaunchCapacity c = cuda::capacity_of(cuda::build_launch_plan(plan), plan);
  return {c.tiles, c.merge_rows, c.rows};
}

void reserve_decode_capacity(Backend& backend, const DecodeCapacity& c) {
  as_cuda(backend).device_plan().reserve({c.thread_blocks, c.merge_rows, c.rows});
}

void update_decode_plan(Backend& backend, const Plan& plan, Stream s) {
  as_cuda(backend).device_plan().update(plan, as_stream(s));
}

void forget_captured_decodes(Backend& backend) {
  as_cuda(backend).device_plan().forget_captures();
}

PlanLimits cuda_plan_limits(const Batch& batch, const Sharding& sharding, int num_heads,
                            int block_size, int device) {
  int sms = 0;
  DCPMLA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return cuda::gpu_plan_limits(batch, sharding, num_heads, block_size, sms);
}

}  // namespace dcpmla
