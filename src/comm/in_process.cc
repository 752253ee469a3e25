#include <cstring>

#include "dcpmla/comm.h"
#include "dcpmla/error.h"

namespace dcpmla {

InProcessGroup::InProcessGroup(int world)
    : world_(world), barrier_(world > 0 ? world : 1), published_(world > 0 ? world : 0) {
  DCPMLA_REQUIRE(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
}

InProcessCommunicator::InProcessCommunicator(InProcessGroup& group, int rank, Backend* memory)
    : group_(group), rank_(rank), memory_(memory) {
  DCPMLA_REQUIRE(rank >= 0 && rank < group.world(), ErrorCode::out_of_range, "rank",
                 "in [0, " + std::to_string(group.world()) + ")", std::to_string(rank));
}

template <class Read>
void InProcessCommunicator::exchange(const void* send, Stream s, Read read) {
  // The send buffer must be complete before peers read it, and our reads complete before the
  // peers move on and reuse their buffers.
  if (memory_) memory_->synchronize(s);
  group_.published_[rank_] = send;
  group_.barrier_.arrive_and_wait();
  read(group_.published_);
  if (memory_) memory_->synchronize(s);
  group_.barrier_.arrive_and_wait();
}

void InProcessCommunicator::copy(void* dst, const void* src, std::size_t bytes, Stream s) {
  if (memory_) {
    memory_->copy(dst, src, bytes, s);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void InProcessCommunicator::all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                                       Stream s) {
  const std::size_t bytes = count * dtype_size(dtype);
  exchange(send, s, [&](const std::vector<const void*>& peers) {
    for (int r = 0; r < world(); ++r)
      copy(static_cast<std::uint8_t*>(recv) + r * bytes, peers[r], bytes, s);
  });
}

void InProcessCommunicator::reduce_scatter_sum(const float* send, float* recv, std::size_t count,
                                               Stream s) {
  exchange(send, s, [&](const std::vector<const void*>& peers) {
    // Summed in rank order, so every run gives the same bits.
    const std::size_t offset = std::size_t(rank_) * count;
    copy(recv, static_cast<const float*>(peers[0]) + offset, count * sizeof(float), s);
    for (int r = 1; r < world(); ++r) {
      const float* src = static_cast<const float*>(peers[r]) + offset;
      if (memory_) {
        memory_->accumulate(recv, src, count, s);
      } else {
        for (std::size_t i = 0; i < count; ++i) recv[i] += src[i];
      }
    }
  });
}

void InProcessCommunicator::all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                                       Stream s) {
  const std::size_t bytes = count * dtype_size(dtype);
  exchange(send, s, [&](const std::vector<const void*>& peers) {
    for (int r = 0; r < world(); ++r) {
      copy(static_cast<std::uint8_t*>(recv) + r * bytes,
           static_cast<const std::uint8_t*>(peers[r]) + rank_ * bytes, bytes, s);
    }
  });
}

}  // namespace dcpmla
