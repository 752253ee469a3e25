#include "dcpmla/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "combine.h"
#include "dcpmla/error.h"
#include "decode.h"
#include "kv_write.h"
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

  void write_kv(const KvWriteArgs& a, Stream) override { cpu::write_kv(a); }
  void decode(const DecodeArgs& a, Stream) override { cpu::decode(pool_, a); }
  void unpack_query(const UnpackQueryArgs& a, Stream) override { cpu::unpack_query(pool_, a); }
  void combine_rescale(const CombineRescaleArgs& a, Stream) override {
    cpu::combine_rescale(pool_, a);
  }
  void combine_pack(const CombinePackArgs& a, Stream) override { cpu::combine_pack(pool_, a); }
  void combine_merge(const CombineMergeArgs& a, Stream) override { cpu::combine_merge(pool_, a); }
  void convert(const ConvertArgs& a, Stream) override { cpu::convert(a); }

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

int cpu_target_work_items(int threads) {
  return 4 * resolve_threads(threads);
}

}  // namespace dcpmla
