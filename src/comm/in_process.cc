#include <cstring>

#include "dcpmla/comm.h"
#include "dcpmla/error.h"

namespace dcpmla {

InProcessGroup::InProcessGroup(int world)
    : world_(world), barrier_(world > 0 ? world : 1), published_(world > 0 ? world : 0) {
  require(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
}

InProcessCommunicator::InProcessCommunicator(InProcessGroup& group, int rank)
    : group_(group), rank_(rank) {
  require(rank >= 0 && rank < group.world(), ErrorCode::out_of_range, "rank",
          "in [0, " + std::to_string(group.world()) + ")", std::to_string(rank));
}

template <class Read>
void InProcessCommunicator::exchange(const void* send, Read read) {
  group_.published_[rank_] = send;
  group_.barrier_.arrive_and_wait();
  read(group_.published_);
  // Nobody may reuse its send buffer (or publish the next one) before every peer has read it.
  group_.barrier_.arrive_and_wait();
}

void InProcessCommunicator::all_gather(const void* send, void* recv, std::size_t count,
                                       DType dtype, Stream) {
  const std::size_t bytes = count * dtype_size(dtype);
  exchange(send, [&](const std::vector<const void*>& peers) {
    for (int r = 0; r < world(); ++r) {
      std::memcpy(static_cast<std::uint8_t*>(recv) + r * bytes, peers[r], bytes);
    }
  });
}

void InProcessCommunicator::reduce_scatter_sum(const float* send, float* recv, std::size_t count,
                                               Stream) {
  exchange(send, [&](const std::vector<const void*>& peers) {
    for (std::size_t i = 0; i < count; ++i) {
      float sum = 0.0f;
      for (int r = 0; r < world(); ++r) {
        sum += static_cast<const float*>(peers[r])[std::size_t(rank_) * count + i];
      }
      recv[i] = sum;
    }
  });
}

void InProcessCommunicator::all_to_all(const void* send, void* recv, std::size_t count,
                                       DType dtype, Stream) {
  const std::size_t bytes = count * dtype_size(dtype);
  exchange(send, [&](const std::vector<const void*>& peers) {
    for (int r = 0; r < world(); ++r) {
      std::memcpy(static_cast<std::uint8_t*>(recv) + r * bytes,
                  static_cast<const std::uint8_t*>(peers[r]) + rank_ * bytes, bytes);
    }
  });
}

}  // namespace dcpmla
