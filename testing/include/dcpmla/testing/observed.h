// A Backend and a Communicator that forward every call to another one and report each kernel and
// each collective to an observer, right before and right after enqueuing it: a test sees the
// operations a DCP step makes, a benchmark records CUDA events between them. Memory calls
// (allocate, upload, copy, ...) are forwarded unreported.
#pragma once

#include <cstddef>
#include <string>

#include "dcpmla/backend.h"
#include "dcpmla/comm.h"

namespace dcpmla::testing {

enum class Op {
  // Backend kernels
  write_kv,
  decode,
  unpack_query,
  combine_rescale,
  combine_pack,
  combine_merge,
  convert,
  // Communicator collectives
  all_gather,
  reduce_scatter_sum,
  all_to_all,
  all_to_all_peers,
};
const char* to_string(Op op);
bool is_collective(Op op);

// One reported call. The buffer fields are set for collectives only, as passed to the
// Communicator (count: elements per chunk).
struct Call {
  Op op = Op::decode;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DType dtype = DType::f32;
};

class CallObserver {
 public:
  virtual ~CallObserver() = default;
  // Both run on the calling thread, in stream order around the call's enqueue on s.
  virtual void before(const Call& call, Stream s) {}
  virtual void after(const Call& call, Stream s) {}
};

// Both must outlive it.
class ObservedBackend final : public Backend {
 public:
  ObservedBackend(Backend& inner, CallObserver& observer) : inner_(inner), observer_(observer) {}
  std::string name() const override { return inner_.name(); }
  void* allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) override { inner_.deallocate(p); }
  void upload(void* dst, const void* src, std::size_t bytes, Stream s) override {
    inner_.upload(dst, src, bytes, s);
  }
  void download(void* dst, const void* src, std::size_t bytes, Stream s) override {
    inner_.download(dst, src, bytes, s);
  }
  void synchronize(Stream s) override { inner_.synchronize(s); }
  void copy(void* dst, const void* src, std::size_t bytes, Stream s) override {
    inner_.copy(dst, src, bytes, s);
  }
  void accumulate(float* dst, const float* src, std::size_t count, Stream s) override {
    inner_.accumulate(dst, src, count, s);
  }
  DeviceModel device_model() const override { return inner_.device_model(); }
  void write_schedule(Schedule& schedule, const ScheduleImageWriter& write, Stream s) override {
    inner_.write_schedule(schedule, write, s);
  }
  void plan_schedule(Schedule& schedule, const DeviceBatchRef& batch, std::int64_t num_tokens,
                     Stream s) override {
    inner_.plan_schedule(schedule, batch, num_tokens, s);
  }
  void write_kv(const KvWriteArgs& args, Stream s) override;
  void unpack_query(const UnpackQueryArgs& args, Stream s) override;
  void combine_rescale(const CombineRescaleArgs& args, Stream s) override;
  void combine_pack(const CombinePackArgs& args, Stream s) override;
  void combine_merge(const CombineMergeArgs& args, Stream s) override;
  void convert(const ConvertArgs& args, Stream s) override;
  void merge_states(const MergeStatesArgs& args, Stream s) override {
    inner_.merge_states(args, s);
  }

 protected:
  void run_decode(const DecodeArgs& args, Stream s) override;

 private:
  Backend& inner_;
  CallObserver& observer_;
};

// Both must outlive it.
class ObservedCommunicator final : public Communicator {
 public:
  ObservedCommunicator(Communicator& inner, CallObserver& observer)
      : inner_(inner), observer_(observer) {}
  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count, Stream s) override;
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  void all_to_all_peers(const void* send, void* recv, std::size_t count, DType dtype,
                        Stream s) override;

 private:
  Communicator& inner_;
  CallObserver& observer_;
};

// Makes a reported collective again on comm, with the same buffers, count and dtype.
void replay(const Call& call, Communicator& comm, Stream s);

}  // namespace dcpmla::testing
