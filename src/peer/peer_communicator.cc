#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "comm/collective_args.h"
#include "dcpmla/error.h"
#include "dcpmla/peer_comm.h"
#include "gpu/device_scope.h"
#include "peer_shared.h"

namespace dcpmla {
namespace {

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

}  // namespace

PeerCommunicator::PeerCommunicator(const Shared& shared, int rank, int world, int device)
    : shared_(&shared), rank_(rank), world_(world), device_(device) {}

PeerCommunicator::PeerCommunicator(std::unique_ptr<Shared> owned, int rank, int world, int device)
    : owned_(std::move(owned)),
      shared_(owned_.get()),
      rank_(rank),
      world_(world),
      device_(device) {}

// Checks the arguments the way the NCCL communicator does, then the chunk against the staging
// capacity, and enqueues the exchange (nothing for a count of 0).
static void exchange(const PeerCommunicator::Shared& shared, const collective::CollectiveArgs& a,
                     peer::ExchangeOp op, bool copy_own, int device, Stream s) {
  collective::check(a);
  if (a.count == 0) return;
  const std::size_t chunk = a.count * a.element_bytes;
  DCPMLA_REQUIRE(
      chunk <= shared.chunk_capacity, ErrorCode::invalid_argument, std::string(a.op) + ": count",
      fmt::format("chunks of at most the group's chunk_capacity, {} bytes", shared.chunk_capacity),
      fmt::format("{} elements of {} bytes ({} bytes)", a.count, a.element_bytes, chunk));
  peer::ExchangeParams p{};
  p.op = op;
  p.world = a.world;
  p.rank = a.rank;
  p.send = static_cast<const std::uint8_t*>(a.send);
  p.recv = static_cast<std::uint8_t*>(const_cast<void*>(a.recv));
  p.chunk = chunk;
  p.copy_own = copy_own;
  p.vector16 = chunk % 16 == 0 && aligned16(a.send) && aligned16(a.recv);
  p.lanes = peer::lanes_for_chunk(chunk);
  p.chunk_capacity = shared.chunk_capacity;
  for (int r = 0; r < a.world; ++r) p.areas[r] = shared.areas[r];
  gpu::DeviceScope on(device);
  peer::launch_exchange(p, static_cast<cudaStream_t>(s));
}

void PeerCommunicator::all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                                  Stream s) {
  const auto a = collective::all_gather_args(send, recv, count, dtype, world_, rank_);
  const bool in_place = static_cast<const std::uint8_t*>(send) ==
                        static_cast<const std::uint8_t*>(recv) + rank_ * count * dtype_size(dtype);
  exchange(*shared_, a, peer::ExchangeOp::gather, !in_place, device_, s);
}

void PeerCommunicator::reduce_scatter_sum(const float* send, float* recv, std::size_t count,
                                          Stream s) {
  exchange(*shared_, collective::reduce_scatter_args(send, recv, count, world_, rank_),
           peer::ExchangeOp::scatter_sum, false, device_, s);
}

void PeerCommunicator::all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                                  Stream s) {
  exchange(*shared_, collective::all_to_all_args(send, recv, count, dtype, world_, rank_),
           peer::ExchangeOp::all_to_all, true, device_, s);
}

void PeerCommunicator::all_to_all_peers(const void* send, void* recv, std::size_t count,
                                        DType dtype, Stream s) {
  exchange(*shared_, collective::all_to_all_args(send, recv, count, dtype, world_, rank_),
           peer::ExchangeOp::all_to_all, false, device_, s);
}

}  // namespace dcpmla
