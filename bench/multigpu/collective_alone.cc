#include "collective_alone.h"

namespace dcpmla::bench {

std::string CollectiveCall::name() const {
  return std::string(to_string(launch)) + "/" + to_string(dtype);
}

std::size_t CollectiveCall::send_bytes(int world) const {
  const std::size_t chunk = count * dtype_size(dtype);
  if (op == CollectiveOp::all_gather) return chunk;
  return chunk * std::size_t(op == CollectiveOp::all_to_all_peers ? world - 1 : world);
}

std::size_t CollectiveCall::recv_bytes(int world) const {
  const std::size_t chunk = count * dtype_size(dtype);
  if (op == CollectiveOp::reduce_scatter_sum) return chunk;
  return chunk * std::size_t(op == CollectiveOp::all_to_all_peers ? world - 1 : world);
}

void CollectiveRecorder::all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                                    Stream s) {
  pending_ = CollectiveCall{{}, CollectiveOp::all_gather, send, recv, count, dtype};
  inner_.all_gather(send, recv, count, dtype, s);
}

void CollectiveRecorder::reduce_scatter_sum(const float* send, float* recv, std::size_t count,
                                            Stream s) {
  pending_ = CollectiveCall{{}, CollectiveOp::reduce_scatter_sum, send, recv, count, DType::f32};
  inner_.reduce_scatter_sum(send, recv, count, s);
}

void CollectiveRecorder::all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                                    Stream s) {
  pending_ = CollectiveCall{{}, CollectiveOp::all_to_all, send, recv, count, dtype};
  inner_.all_to_all(send, recv, count, dtype, s);
}

void CollectiveRecorder::all_to_all_peers(const void* send, void* recv, std::size_t count,
                                          DType dtype, Stream s) {
  pending_ = CollectiveCall{{}, CollectiveOp::all_to_all_peers, send, recv, count, dtype};
  inner_.all_to_all_peers(send, recv, count, dtype, s);
}

void CollectiveRecorder::mark_launch(DcpLaunch launch, Stream) {
  if (!is_collective(launch) || !pending_) return;
  pending_->launch = launch;
  calls_.push_back(*pending_);
  pending_.reset();
}

void replay(const CollectiveCall& c, Communicator& comm, Stream s) {
  switch (c.op) {
    case CollectiveOp::all_gather:
      comm.all_gather(c.send, c.recv, c.count, c.dtype, s);
      return;
    case CollectiveOp::reduce_scatter_sum:
      comm.reduce_scatter_sum(static_cast<const float*>(c.send), static_cast<float*>(c.recv),
                              c.count, s);
      return;
    case CollectiveOp::all_to_all:
      comm.all_to_all(c.send, c.recv, c.count, c.dtype, s);
      return;
    case CollectiveOp::all_to_all_peers:
      comm.all_to_all_peers(c.send, c.recv, c.count, c.dtype, s);
      return;
  }
}

}  // namespace dcpmla::bench
