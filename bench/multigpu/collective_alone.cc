#include "collective_alone.h"

namespace dcpmla::bench {

std::string CollectiveCall::name() const {
  return std::string(to_string(launch)) + "/" + to_string(call.dtype);
}

std::size_t CollectiveCall::send_bytes(int world) const {
  const std::size_t chunk = call.count * dtype_size(call.dtype);
  if (call.op == testing::Op::all_gather) return chunk;
  return chunk * std::size_t(call.op == testing::Op::all_to_all_peers ? world - 1 : world);
}

std::size_t CollectiveCall::recv_bytes(int world) const {
  const std::size_t chunk = call.count * dtype_size(call.dtype);
  if (call.op == testing::Op::reduce_scatter_sum) return chunk;
  return chunk * std::size_t(call.op == testing::Op::all_to_all_peers ? world - 1 : world);
}

void CollectiveRecorder::after(const testing::Call& call, Stream) {
  const std::optional<Launch> launch = namer_.name(call.op);
  if (launch && is_collective(*launch)) calls_.push_back({*launch, call});
}

}  // namespace dcpmla::bench
