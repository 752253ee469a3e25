// NcclCommunicator's collectives on real GPUs, one rank per GPU and one thread per rank: every
// dtype moved bit for bit, the f32 sum, chunk routing of the all-to-all, in-place forms, count 0,
// CUDA-graph capture, and both owning and non-owning construction. Skipped with fewer than 2 GPUs.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"
#include "gpu_buffers.h"
#include "multigpu_support.h"

namespace dcpmla {
namespace {

using multigpu_testing::on_ranks;
using multigpu_testing::world;

using gpu_testing::check_cuda;
using gpu_testing::DeviceBytes;

// Byte k of the chunk that rank `from` sends to rank `to` (any bytes: these collectives only move
// them, so NaN patterns in f32 or bf16 are fine).
std::uint8_t pattern(int from, int to, std::size_t k, int salt = 0) {
  return std::uint8_t((from * 131 + to * 29 + salt * 7 + k * 13 + k / 251) & 0xff);
}

// "" when equal, else where the first difference is.
std::string first_difference(const std::vector<std::uint8_t>& got,
                             const std::vector<std::uint8_t>& want) {
  if (got.size() != want.size()) return fmt::format("size {} != {}", got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) return fmt::format("byte {}: {} != {}", i, got[i], want[i]);
  }
  return "";
}

void expect_same(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                 const std::string& what) {
  const std::string d = first_difference(got, want);
  if (!d.empty()) throw std::runtime_error(what + ": " + d);
}

TEST(NcclCommunicator, AllGatherMovesEveryDtypeBitForBit) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  NcclLocalGroup group(first_devices(W));
  const auto errors = on_ranks(W, [&](int r) {
    NcclCommunicator& comm = group.communicator(r);
    for (DType t : {DType::f32, DType::bf16, DType::fp8_e4m3, DType::i32, DType::i64}) {
      const std::size_t count = 1003, chunk = count * dtype_size(t);
      DeviceBytes send(r, chunk), recv(r, chunk * W);
      std::vector<std::uint8_t> mine(chunk), want(chunk * W);
      for (std::size_t k = 0; k < chunk; ++k) mine[k] = pattern(r, 0, k, int(t));
      for (int q = 0; q < W; ++q)
        for (std::size_t k = 0; k < chunk; ++k) want[q * chunk + k] = pattern(q, 0, k, int(t));
      send.fill(mine);
      comm.all_gather(send.get(), recv.get(), count, t, nullptr);
      expect_same(recv.read(), want, std::string("all_gather ") + to_string(t));
    }
  });
  EXPECT_EVERY_RANK_OK(errors);
}

TEST(NcclCommunicator, ReduceScatterSumsEachRanksChunk) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  NcclLocalGroup group(first_devices(W));
  const std::size_t count = 4099;
  // Small integers and halves: every sum is exact in f32, whatever the order of the additions.
  auto value = [](int rank, std::size_t i) { return float(rank + 1) * 0.5f + float(i % 1000); };
  const auto errors = on_ranks(W, [&](int r) {
    std::vector<float> send(count * W);
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = value(r, i);
    DeviceBytes s(r, send.size() * 4), out(r, count * 4);
    s.fill(std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(send.data()),
                                     reinterpret_cast<std::uint8_t*>(send.data() + send.size())));
    group.communicator(r).reduce_scatter_sum(reinterpret_cast<const float*>(s.get()),
                                             reinterpret_cast<float*>(out.get()), count, nullptr);
    const auto bytes = out.read();
    std::vector<float> got(count);
    std::memcpy(got.data(), bytes.data(), bytes.size());
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < W; ++q) want += value(q, std::size_t(r) * count + i);
      if (got[i] != want) {
        throw std::runtime_error(fmt::format("element {}: {} != {}", i, got[i], want));
      }
    }
  });
  EXPECT_EVERY_RANK_OK(errors);
}

// all_to_all, and all_to_all_peers, which leaves the rank's own chunk of recv alone.
TEST(NcclCommunicator, AllToAllRoutesChunkRToRankR) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  NcclLocalGroup group(first_devices(W));
  const auto errors = on_ranks(W, [&](int r) {
    // The a2a combine's payload: [W, rows, heads per rank, 513] f32, and a bf16 one.
    for (auto [t, count] : {std::pair{DType::f32, std::size_t(7 * 3 * 513)},
                            std::pair{DType::bf16, std::size_t(5 * 576)}}) {
      const std::size_t chunk = count * dtype_size(t);
      DeviceBytes send(r, chunk * W), recv(r, chunk * W);
      std::vector<std::uint8_t> mine(chunk * W), want(chunk * W);
      for (int to = 0; to < W; ++to)
        for (std::size_t k = 0; k < chunk; ++k) mine[to * chunk + k] = pattern(r, to, k, int(t));
      for (int from = 0; from < W; ++from)
        for (std::size_t k = 0; k < chunk; ++k)
          want[from * chunk + k] = pattern(from, r, k, int(t));
      send.fill(mine);
      group.communicator(r).all_to_all(send.get(), recv.get(), count, t, nullptr);
      expect_same(recv.read(), want, std::string("all_to_all ") + to_string(t));
      // Over the peers only: recv's own chunk keeps what it held.
      std::vector<std::uint8_t> untouched(chunk * W, 0x5a);
      recv.fill(untouched);
      group.communicator(r).all_to_all_peers(send.get(), recv.get(), count, t, nullptr);
      std::copy_n(untouched.begin(), chunk, want.begin() + std::ptrdiff_t(r * chunk));
      expect_same(recv.read(), want, std::string("all_to_all_peers ") + to_string(t));
    }
  });
  EXPECT_EVERY_RANK_OK(errors);
}

TEST(NcclCommunicator, InPlaceFormsAndCountZero) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  NcclLocalGroup group(first_devices(W));
  const auto errors = on_ranks(W, [&](int r) {
    NcclCommunicator& comm = group.communicator(r);
    // Count 0 is a no-op on every rank, null buffers included.
    comm.all_gather(nullptr, nullptr, 0, DType::bf16, nullptr);
    comm.reduce_scatter_sum(nullptr, nullptr, 0, nullptr);
    comm.all_to_all(nullptr, nullptr, 0, DType::f32, nullptr);
    // In-place all-gather: each rank's send is its own chunk of recv.
    const std::size_t count = 300;
    DeviceBytes buf(r, count * W);
    std::vector<std::uint8_t> host(count * W, 0), want(count * W);
    for (int q = 0; q < W; ++q)
      for (std::size_t k = 0; k < count; ++k) want[q * count + k] = pattern(q, 0, k, 5);
    for (std::size_t k = 0; k < count; ++k) host[r * count + k] = pattern(r, 0, k, 5);
    buf.fill(host);
    comm.all_gather(buf.get() + r * count, buf.get(), count, DType::fp8_e4m3, nullptr);
    expect_same(buf.read(), want, "in-place all_gather");
  });
  EXPECT_EVERY_RANK_OK(errors);
}

// Bad arguments throw on every rank before anything is enqueued: nobody is left waiting in a
// collective, and the communicator still works afterwards.
TEST(NcclCommunicator, BadArgumentsThrowBeforeEnqueuing) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  NcclLocalGroup group(first_devices(W));
  const auto errors = on_ranks(W, [&](int r) {
    NcclCommunicator& comm = group.communicator(r);
    DeviceBytes buf(r, 64 * W);
    try {
      comm.all_to_all(buf.get(), buf.get(), 16, DType::fp8_e4m3, nullptr);
      throw std::runtime_error("overlapping all_to_all was accepted");
    } catch (const Error& e) {
      if (e.argument() != "all_to_all: recv") throw;
    }
    try {
      comm.all_gather(nullptr, buf.get(), 8, DType::f32, nullptr);
      throw std::runtime_error("null send was accepted");
    } catch (const Error& e) {
      if (e.argument() != "all_gather: send") throw;
    }
    DeviceBytes send(r, 8), recv(r, 8 * W);
    send.fill(std::vector<std::uint8_t>(8, std::uint8_t(r + 1)));
    comm.all_gather(send.get(), recv.get(), 8, DType::fp8_e4m3, nullptr);
    std::vector<std::uint8_t> want(8 * W);
    for (int q = 0; q < W; ++q) std::fill_n(want.begin() + q * 8, 8, std::uint8_t(q + 1));
    expect_same(recv.read(), want, "all_gather after rejected calls");
  });
  EXPECT_EVERY_RANK_OK(errors);
}

// No host synchronisation inside a collective: the three collectives of a DCP step capture into
// a CUDA graph on each rank's stream, and replays move the data present at replay time.
TEST(NcclCommunicator, CollectivesCaptureInACudaGraph) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  NcclLocalGroup group(first_devices(W));
  const auto errors = on_ranks(W, [&](int r) {
    NcclCommunicator& comm = group.communicator(r);
    check_cuda(cudaSetDevice(r), "cudaSetDevice");
    cudaStream_t stream;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const std::size_t count = 2048;
    DeviceBytes ag_send(r, count * 2), ag_recv(r, count * 2 * W);
    DeviceBytes rs_send(r, count * 4 * W), rs_recv(r, count * 4);
    DeviceBytes a2a_send(r, count * 4 * W), a2a_recv(r, count * 4 * W);

    // An engine runs a step eagerly before capturing it (its connections are set up then).
    comm.all_gather(ag_send.get(), ag_recv.get(), count, DType::bf16, stream);
    comm.reduce_scatter_sum(reinterpret_cast<const float*>(rs_send.get()),
                            reinterpret_cast<float*>(rs_recv.get()), count, stream);
    comm.all_to_all(a2a_send.get(), a2a_recv.get(), count, DType::f32, stream);
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

    cudaGraph_t graph;
    check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    comm.all_gather(ag_send.get(), ag_recv.get(), count, DType::bf16, stream);
    comm.reduce_scatter_sum(reinterpret_cast<const float*>(rs_send.get()),
                            reinterpret_cast<float*>(rs_recv.get()), count, stream);
    comm.all_to_all(a2a_send.get(), a2a_recv.get(), count, DType::f32, stream);
    check_cuda(cudaStreamEndCapture(stream, &graph), "end capture");
    cudaGraphExec_t exec;
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

    for (int replay = 0; replay < 2; ++replay) {
      std::vector<std::uint8_t> ag(count * 2), a2a(count * 4 * W);
      for (std::size_t k = 0; k < ag.size(); ++k) ag[k] = pattern(r, 0, k, replay);
      for (int to = 0; to < W; ++to)
        for (std::size_t k = 0; k < count * 4; ++k)
          a2a[to * count * 4 + k] = pattern(r, to, k, replay);
      std::vector<float> rs(count * W);
      for (std::size_t i = 0; i < rs.size(); ++i) rs[i] = float(replay * 100 + r + int(i % 7));
      ag_send.fill(ag);
      a2a_send.fill(a2a);
      rs_send.fill(
          std::vector<std::uint8_t>(reinterpret_cast<std::uint8_t*>(rs.data()),
                                    reinterpret_cast<std::uint8_t*>(rs.data() + rs.size())));
      check_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

      std::vector<std::uint8_t> want_ag(count * 2 * W), want_a2a(count * 4 * W);
      for (int q = 0; q < W; ++q) {
        for (std::size_t k = 0; k < count * 2; ++k)
          want_ag[q * count * 2 + k] = pattern(q, 0, k, replay);
        for (std::size_t k = 0; k < count * 4; ++k)
          want_a2a[q * count * 4 + k] = pattern(q, r, k, replay);
      }
      expect_same(ag_recv.read(), want_ag, fmt::format("replay {} all_gather", replay));
      expect_same(a2a_recv.read(), want_a2a, fmt::format("replay {} all_to_all", replay));
      const auto sum_bytes = rs_recv.read();
      std::vector<float> sum(count);
      std::memcpy(sum.data(), sum_bytes.data(), sum_bytes.size());
      for (std::size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int q = 0; q < W; ++q) want += float(replay * 100 + q + int((r * count + i) % 7));
        if (sum[i] != want) {
          throw std::runtime_error(fmt::format("replay {} reduce_scatter element {}: {} != {}",
                                               replay, i, sum[i], want));
        }
      }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  });
  EXPECT_EVERY_RANK_OK(errors);
}

TEST(NcclCommunicator, WrapReadsRankWorldAndDeviceAndDoesNotOwn) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  NcclLocalGroup group(first_devices(W));
  EXPECT_EQ(group.world(), W);
  for (int r = 0; r < W; ++r) {
    const auto view = NcclCommunicator::wrap(group.communicator(r).handle());
    EXPECT_EQ(view->rank(), r);
    EXPECT_EQ(view->world(), W);
    EXPECT_EQ(view->device(), r);
    EXPECT_FALSE(view->owns_handle());
  }
  // The views are gone; the group's communicators still work.
  const auto errors = on_ranks(W, [&](int r) {
    DeviceBytes send(r, 4), recv(r, 4 * W);
    send.fill({1, 2, 3, std::uint8_t(r)});
    group.communicator(r).all_gather(send.get(), recv.get(), 1, DType::i32, nullptr);
    std::vector<std::uint8_t> want;
    for (int q = 0; q < W; ++q) want.insert(want.end(), {1, 2, 3, std::uint8_t(q)});
    expect_same(recv.read(), want, "all_gather after the views were destroyed");
  });
  EXPECT_EVERY_RANK_OK(errors);
}

// Way (b) inside one process: one thread per GPU joins with a shared unique id; each owns and
// destroys its communicator.
TEST(NcclCommunicator, JoinOneThreadPerGpu) {
  DCPMLA_REQUIRE_GPUS(2);
  const int W = world();
  const ncclUniqueId id = new_nccl_unique_id();
  const auto errors = on_ranks(W, [&](int r) {
    const auto comm = NcclCommunicator::join(id, W, r, r);
    if (!comm->owns_handle() || comm->rank() != r || comm->world() != W || comm->device() != r) {
      throw std::runtime_error("joined communicator reports the wrong rank, world or device");
    }
    DeviceBytes send(r, 8), recv(r, 8 * W);
    send.fill(std::vector<std::uint8_t>(8, std::uint8_t(0x40 + r)));
    comm->all_gather(send.get(), recv.get(), 2, DType::f32, nullptr);
    std::vector<std::uint8_t> want(8 * W);
    for (int q = 0; q < W; ++q) std::fill_n(want.begin() + q * 8, 8, std::uint8_t(0x40 + q));
    expect_same(recv.read(), want, "all_gather on a joined communicator");
  });
  EXPECT_EVERY_RANK_OK(errors);
}

}  // namespace
}  // namespace dcpmla
