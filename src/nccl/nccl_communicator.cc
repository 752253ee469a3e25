#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>

#include "comm/collective_args.h"
#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"
#include "nccl_check.h"
#include "nccl_types.h"

namespace dcpmla {
namespace {

cudaStream_t as_stream(Stream s) {
  return static_cast<cudaStream_t>(s);
}

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t comm, bool owned) : comm_(comm), owned_(owned) {
  DCPMLA_REQUIRE(comm != nullptr, ErrorCode::invalid_argument, "comm", "an initialised ncclComm_t",
                 "null");
  DCPMLA_NCCL_CHECK(ncclCommUserRank(comm_, &rank_), comm_);
  DCPMLA_NCCL_CHECK(ncclCommCount(comm_, &world_), comm_);
  DCPMLA_NCCL_CHECK(ncclCommCuDevice(comm_, &device_), comm_);
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::wrap(ncclComm_t comm) {
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, false));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::join(const ncclUniqueId& id, int world,
                                                         int rank, int device) {
  DCPMLA_REQUIRE(world >= 1, ErrorCode::invalid_argument, "world", ">= 1", std::to_string(world));
  DCPMLA_REQUIRE(rank >= 0 && rank < world, ErrorCode::out_of_range, "rank",
                 fmt::format("in [0, world = {})", world), std::to_string(rank));
  DCPMLA_REQUIRE(device >= 0, ErrorCode::invalid_argument, "device", "a CUDA device index >= 0",
                 std::to_string(device));
  int devices = 0;
  DCPMLA_NCCL_CUDA_CHECK(cudaGetDeviceCount(&devices));
  DCPMLA_REQUIRE(device < devices, ErrorCode::out_of_range, "device",
                 fmt::format("a CUDA device index in [0, {})", devices), std::to_string(device));
  ncclComm_t comm = nullptr;
  {
    nccl::DeviceScope on(device);  // ncclCommInitRank binds the communicator to the current device
    DCPMLA_NCCL_CHECK(ncclCommInitRank(&comm, world, id, rank), nullptr);
  }
  try {
    return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, true));
  } catch (...) {
    ncclCommDestroy(comm);
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (!owned_) return;
  // Finalize first: it completes this rank's outstanding operations before the resources go.
  ncclCommFinalize(comm_);
  ncclCommDestroy(comm_);
}

void NcclCommunicator::all_gather(const void* send, void* recv, std::size_t count, DType dtype,
                                  Stream s) {
  const ncclDataType_t type = nccl::nccl_dtype(dtype);
  collective::check(collective::all_gather_args(send, recv, count, dtype, world_, rank_));
  if (count == 0) return;
  nccl::DeviceScope on(device_);
  DCPMLA_NCCL_CHECK(ncclAllGather(send, recv, count, type, comm_, as_stream(s)), comm_);
}

void NcclCommunicator::reduce_scatter_sum(const float* send, float* recv, std::size_t count,
                                          Stream s) {
  collective::check(collective::reduce_scatter_args(send, recv, count, world_, rank_));
  if (count == 0) return;
  nccl::DeviceScope on(device_);
  DCPMLA_NCCL_CHECK(ncclReduceScatter(send, recv, count, ncclFloat32, ncclSum, comm_, as_stream(s)),
                    comm_);
}

void NcclCommunicator::all_to_all(const void* send, void* recv, std::size_t count, DType dtype,
                                  Stream s) {
  send_recv_chunks(send, recv, count, dtype, s, true);
}

void NcclCommunicator::all_to_all_peers(const void* send, void* recv, std::size_t count,
                                        DType dtype, Stream s) {
  send_recv_chunks(send, recv, count, dtype, s, false);
}

void NcclCommunicator::send_recv_chunks(const void* send, void* recv, std::size_t count,
                                        DType dtype, Stream s, bool own_chunk) {
  const ncclDataType_t type = nccl::nccl_dtype(dtype);
  collective::check(collective::all_to_all_args(send, recv, count, dtype, world_, rank_));
  if (count == 0) return;
  nccl::DeviceScope on(device_);
  const std::size_t chunk = count * dtype_size(dtype);
  const auto* from = static_cast<const std::uint8_t*>(send);
  auto* to = static_cast<std::uint8_t*>(recv);
  // Every send and receive in one group, so they progress together (one rank's send waits for
  // its peer's receive). The group is closed even when a call fails, then the failure thrown.
  DCPMLA_NCCL_CHECK(ncclGroupStart(), comm_);
  ncclResult_t failed = ncclSuccess;
  const char* failed_call = "";
  for (int peer = 0; peer < world_ && failed == ncclSuccess; ++peer) {
    if (peer == rank_ && !own_chunk) continue;
    const std::size_t offset = std::size_t(peer) * chunk;
    failed = ncclSend(from + offset, count, type, peer, comm_, as_stream(s));
    failed_call = "ncclSend";
    if (failed == ncclSuccess) {
      failed = ncclRecv(to + offset, count, type, peer, comm_, as_stream(s));
      failed_call = "ncclRecv";
    }
  }
  const ncclResult_t ended = ncclGroupEnd();
  nccl::check_nccl(failed, failed_call, comm_);
  nccl::check_nccl(ended, "ncclGroupEnd", comm_);
}

}  // namespace dcpmla
