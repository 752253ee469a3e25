#include "dcpmla/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "combine.h"
#include "core/schedule_layout.h"
#include "dcpmla/error.h"
#include "decode.h"
#include "device_planner_emulation.h"
#include "kv_write.h"
#include "merge_states.h"
#include "thread_pool.h"

namespace dcpmla {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : pool_(threads) {}

  std::string name() const override { return "cpu"; }

  void* allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw Error(ErrorCode::backend_failure, "allocate", "memory", std::to_string(bytes));
    return p;
  }
  void deallocate(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, std::size_t bytes, Stream) override {
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes, Stream) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize(Stream) override {}
  void copy(void* dst, const void* src, std::size_t bytes, Stream) override {
    std::memcpy(dst, src, bytes);
  }
  void accumulate(float* dst, const float* src, std::size_t count, Stream) override {
    for (std::size_t i = 0; i < count; ++i) dst[i] += src[i];
  }

  DeviceModel device_model() const override {
    // Each work item runs all of a request's pairs; splits keep the threads busy.
    return {pool_.size(), 0, 256};
  }
  void write_schedule(Schedule& schedule, const ScheduleImageWriter& write, Stream) override {
    write(static_cast<std::byte*>(schedule.memory()));
  }
  void plan_schedule(Schedule& schedule, const DeviceBatchRef& batch, std::int64_t num_tokens,
                     Stream) override {
    cpu::plan_on_host(schedule, batch, num_tokens);
  }

  void write_kv(const KvWriteArgs& a, Stream) override { cpu::write_kv(a); }
  void unpack_query(const UnpackQueryArgs& a, Stream) override { cpu::unpack_query(pool_, a); }
  void combine_rescale(const CombineRescaleArgs& a, Stream) override {
    cpu::combine_rescale(pool_, a);
  }
  void combine_pack(const CombinePackArgs& a, Stream) override { cpu::combine_pack(pool_, a); }
  void combine_merge(const CombineMergeArgs& a, Stream) override { cpu::combine_merge(pool_, a); }
  void convert(const ConvertArgs& a, Stream) override { cpu::convert(a); }
  void merge_states(const MergeStatesArgs& a, Stream) override { cpu::merge_states(pool_, a); }

 protected:
  void run_decode(const DecodeArgs& a, Stream s) override {
    if (a.schedule) return cpu::decode(pool_, a, *a.schedule);
    // An eager plan: a schedule of exactly its size, in host memory.
    Schedule schedule(*this, a.plan->config, capacity_of(*a.plan));
    schedule.update(*a.plan, s);
    cpu::decode(pool_, a, schedule);
  }

 private:
  cpu::ThreadPool pool_;
};

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<CpuBackend>(resolve_threads(threads));
}

}  // namespace dcpmla
