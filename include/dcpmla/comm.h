// Rank-to-rank collectives of a DCP group. The interface mirrors NCCL: device buffers, element
// counts, a stream, no host synchronisation implied, so an NCCL communicator can implement it.
#pragma once

#include <barrier>
#include <cstddef>
#include <memory>
#include <vector>

#include "dcpmla/backend.h"
#include "dcpmla/types.h"

namespace dcpmla {

// Devices 0, 1, ..., count - 1: rank r on GPU r (PeerGroup, NcclLocalGroup). Throws Error naming
// "count" unless count >= 1.
std::vector<int> first_devices(int count);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // recv [world, count] <- every rank's send [count].
  virtual void all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                          Stream s) = 0;
  // recv [count] <- sum over ranks of their send [world, count] chunk `rank` (f32).
  virtual void reduce_scatter_sum(const float* send, float* recv, std::size_t count, Stream s) = 0;
  // recv [world, count] chunk r <- rank r's send chunk `rank`; send is [world, count].
  virtual void all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                          Stream s) = 0;
  // The same exchange for a caller that reads its own chunk from send: recv chunk `rank` may be
  // left as it was, so an implementation can skip that copy. The default makes the full
  // all_to_all.
  virtual void all_to_all_peers(const void* send, void* recv, std::size_t count, DType dtype,
                                Stream s) {
    all_to_all(send, recv, count, dtype, s);
  }
};

// A non-owning view that forwards every call to another communicator, which must outlive it: for
// APIs that take ownership of a communicator while a group owns the real one.
class CommunicatorRef final : public Communicator {
 public:
  explicit CommunicatorRef(Communicator& to) : to_(to) {}
  int rank() const override { return to_.rank(); }
  int world() const override { return to_.world(); }
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override {
    to_.all_gather(send, recv, count, dtype, s);
  }
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count, Stream s) override {
    to_.reduce_scatter_sum(send, recv, count, s);
  }
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override {
    to_.all_to_all(send, recv, count, dtype, s);
  }
  void all_to_all_peers(const void* send, void* recv, std::size_t count, DType dtype,
                        Stream s) override {
    to_.all_to_all_peers(send, recv, count, dtype, s);
  }

 private:
  Communicator& to_;
};

// W ranks as threads of one process whose buffers all live in one address space (host memory, or
// one GPU's memory for ranks simulated on one device). Create one group, then one communicator
// per rank; each rank's thread calls the collectives in the same order. Data moves through the
// rank's backend (copy / accumulate), or plain host memcpy and loops when no backend is given.
// The barriers make every call synchronous: this is the simulation vehicle, not a fast path.
class InProcessGroup {
 public:
  explicit InProcessGroup(int world);
  int world() const { return world_; }

 private:
  friend class InProcessCommunicator;
  int world_;
  std::barrier<> barrier_;
  std::vector<const void*> published_;
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup& group, int rank, Backend* memory = nullptr);
  int rank() const override { return rank_; }
  int world() const override { return group_.world(); }
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count, Stream s) override;
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;

 private:
  // Publishes `send`, waits for every rank, runs `read` (which reads peers' buffers), waits again.
  template <class Read>
  void exchange(const void* send, Stream s, Read read);
  void copy(void* dst, const void* src, std::size_t bytes, Stream s);
  InProcessGroup& group_;
  int rank_;
  Backend* memory_;
};

}  // namespace dcpmla
