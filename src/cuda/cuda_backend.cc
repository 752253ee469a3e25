#include "dcpmla/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <string>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "core/schedule_layout.h"
#include "cuda/decode/launch_plan.h"
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

// Two pinned staging images of a schedule used in turn, so an update waits (on the host) only
// for the copy of the update before the previous one.
class ScheduleStaging {
 public:
  explicit ScheduleStaging(std::size_t bytes) {
    try {
      for (int i = 0; i < 2; ++i) {
        DCPMLA_CUDA_CHECK(cudaHostAlloc(&image_[i], bytes, cudaHostAllocDefault));
        DCPMLA_CUDA_CHECK(cudaEventCreateWithFlags(&copied_[i], cudaEventDisableTiming));
      }
    } catch (...) {
      release();  // the destructor of a half-made object does not run
      throw;
    }
  }
  ~ScheduleStaging() { release(); }
  ScheduleStaging(const ScheduleStaging&) = delete;
  ScheduleStaging& operator=(const ScheduleStaging&) = delete;

  // The image in turn is written (write may throw before writing: the device copy is untouched).
  void write(const ScheduleImageWriter& write, void* device, cudaStream_t s) {
    const int k = next_;
    DCPMLA_CUDA_CHECK(cudaEventSynchronize(copied_[k]));
    auto* image = static_cast<std::byte*>(image_[k]);
    const std::size_t n = write(image);
    next_ ^= 1;
    DCPMLA_CUDA_CHECK(cudaMemcpyAsync(device, image, n, cudaMemcpyHostToDevice, s));
    DCPMLA_CUDA_CHECK(cudaEventRecord(copied_[k], s));
  }

 private:
  // Never throws; a copy still reading an image is waited for first.
  void release() {
    for (int i = 0; i < 2; ++i) {
      if (copied_[i]) cudaEventSynchronize(copied_[i]), cudaEventDestroy(copied_[i]);
      if (image_[i]) cudaFreeHost(image_[i]);
      copied_[i] = nullptr;
      image_[i] = nullptr;
    }
    cudaGetLastError();  // a failure here must not be reported by the next launch
  }

  void* image_[2] = {nullptr, nullptr};
  cudaEvent_t copied_[2] = {nullptr, nullptr};
  int next_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    int count = 0;
    DCPMLA_CUDA_CHECK(cudaGetDeviceCount(&count));
    DCPMLA_REQUIRE(device >= 0 && device < count, ErrorCode::backend_failure, "device",
                   "a CUDA device index in [0, " + std::to_string(count) + ")",
                   std::to_string(device));
    DCPMLA_CUDA_CHECK(cudaSetDevice(device_));
    DCPMLA_CUDA_CHECK(cuda::probe_kernels());
    DCPMLA_CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device_));
  }
  ~CudaBackend() override {
    // The eager schedule frees on this device.
    cudaSetDevice(device_);
    if (eager_used_) cudaEventSynchronize(eager_used_), cudaEventDestroy(eager_used_);
    eager_.reset();
    cudaGetLastError();
  }

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
    cudaGetLastError();  // a failure here must not be reported by the next launch
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

  DeviceModel device_model() const override {
    // One decode thread block per SM at a time, kTilePairs pairs each; no split under 256
    // tokens (docs/design/decode-kernel.md).
    return {sms_, cuda::kTilePairs, 256};
  }
  void write_schedule(Schedule& schedule, const ScheduleImageWriter& write, Stream s) override {
    use_device();
    // A captured copy would read the pinned image at every replay, long after later updates
    // rewrote it: a graph plans on the device (plan_on_device) instead. Checked before the
    // staging of a first update is made (cudaHostAlloc is refused under capture).
    DCPMLA_REQUIRE(!cuda::is_capturing(as_stream(s)), ErrorCode::unsupported, "stream",
                   "a stream not under capture for Schedule::update and Schedule::plan (a CUDA "
                   "graph plans with plan_on_device)",
                   "a stream under capture");
    auto& state = schedule.backend_state();
    if (!state) {
      const ScheduleLayout l = schedule_layout(schedule.capacity());
      state = std::make_shared<ScheduleStaging>(l.scratch);
    }
    static_cast<ScheduleStaging*>(state.get())->write(write, schedule.memory(), as_stream(s));
  }
  void plan_schedule(Schedule& schedule, const DeviceBatchRef& batch, std::int64_t num_tokens,
                     Stream s) override {
    use_device();
    cuda::plan_on_device(schedule, batch, num_tokens, as_stream(s));
  }

  void write_kv(const KvWriteArgs& a, Stream s) override {
    use_device();
    cuda::write_kv(a, as_stream(s));
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
  void merge_states(const MergeStatesArgs& a, Stream s) override {
    use_device();
    cuda::merge_states(a, as_stream(s));
  }

 protected:
  void check_decode(const DecodeArgs& a, Stream s) const override {
    // A host plan runs from the backend's eager schedule, written by a host copy: not capturable.
    DCPMLA_REQUIRE(a.schedule || !cuda::is_capturing(as_stream(s)), ErrorCode::unsupported, "plan",
                   "a Schedule (DecodeArgs::schedule) for a decode captured in a CUDA graph",
                   "a host plan under stream capture");
    cuda::check_decode(a, a.schedule ? a.schedule->config() : a.plan->config, rounds_);
  }
  void run_decode(const DecodeArgs& a, Stream s) override {
    use_device();
    if (a.schedule) return cuda::decode(a, *a.schedule, rounds_, as_stream(s));
    run_eager(a, *a.plan, as_stream(s));
  }

 private:
  // An eager plan runs from a schedule of the backend's, grown to fit; the previous eager decode
  // (maybe on another stream) finishes reading it before it is rewritten. Its stream is not under
  // capture (check_decode).
  void run_eager(const DecodeArgs& a, const Plan& plan, cudaStream_t s) {
    if (!eager_used_) {
      DCPMLA_CUDA_CHECK(cudaEventCreateWithFlags(&eager_used_, cudaEventDisableTiming));
    }
    const ScheduleCapacity need = capacity_of(plan);
    const bool same_config = eager_ && eager_->accepts(plan.config);
    if (!same_config || max_capacity(need, eager_->capacity()) != eager_->capacity()) {
      const ScheduleCapacity cap = eager_ ? max_capacity(need, eager_->capacity()) : need;
      DCPMLA_CUDA_CHECK(cudaEventSynchronize(eager_used_));
      eager_.reset();
      eager_.emplace(*this, plan.config, cap);
    } else {
      DCPMLA_CUDA_CHECK(cudaStreamWaitEvent(s, eager_used_, 0));
    }
    eager_->update(plan, s);
    try {
      cuda::decode(a, *eager_, rounds_, s);
    } catch (...) {
      // The update's copy is queued: the next eager decode waits for it before rewriting.
      cudaEventRecord(eager_used_, s);
      throw;
    }
    DCPMLA_CUDA_CHECK(cudaEventRecord(eager_used_, s));
  }

  // The current device is per host thread; every entry point selects this backend's.
  void use_device() { DCPMLA_CUDA_CHECK(cudaSetDevice(device_)); }

  int device_;
  int sms_ = 0;
  const cuda::Rounds rounds_ = cuda::rounds_by_default();
  std::optional<Schedule> eager_;
  cudaEvent_t eager_used_ = nullptr;
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
    if (cudaGetDevice(&current) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    const bool ok = cudaSetDevice(0) == cudaSuccess && cuda::probe_kernels() == cudaSuccess;
    cudaSetDevice(current);  // no side effect on the caller's device, whatever the answer
    cudaGetLastError();
    return ok;
  } catch (...) {
    return false;
  }
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

}  // namespace dcpmla
