// PeerCommunicator's collectives on real GPUs, rank r on device r with its own thread and stream.
// Every result is compared with the host's whole (guards around each buffer included): moved
// bytes exactly, the f32 sum bit for bit in rank order. Both copy paths (16-byte vectors, bytes),
// in-place forms, calls back to back without host synchronisation, CUDA-graph replays, the chunk
// capacity and count 0. Each test runs W = every GPU (at most 8), and W = 2 when there are more;
// skipped with fewer than 2 GPUs.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "dcpmla/error.h"
#include "dcpmla/peer_comm.h"
#include "peer_test_support.h"

namespace dcpmla {
namespace {

using peer_testing::check_cuda;
using peer_testing::DeviceBytes;
using peer_testing::DeviceStream;
using peer_testing::gpu_count;
using peer_testing::Mismatches;
using peer_testing::on_ranks;
using peer_testing::Ranks;

constexpr std::size_t kMiB = std::size_t(1) << 20;
// Sentinel bytes after every buffer (and before one at an offset): writes outside it show up.
constexpr std::size_t kGuard = 64;

std::vector<int> worlds() {
  const int n = std::min(gpu_count(), 8);
  std::vector<int> w{n};
  if (n > 2) w.push_back(2);
  return w;
}

// Every multi-GPU test starts with this: skipped, not failed, without 2 GPUs that reach each
// other (peer access between every pair of the largest world covers the smaller ones).
#define DCPMLA_REQUIRE_PEER_GPUS()                                                        \
  DCPMLA_PEER_REQUIRE_GPUS(2);                                                            \
  if (!PeerGroup::supported(first_devices(worlds().front()))) {                           \
    GTEST_SKIP() << "no peer access between every pair of the first " << worlds().front() \
                 << " GPUs";                                                              \
  }                                                                                       \
  static_assert(true, "")

enum class Op { all_gather, all_to_all, all_to_all_peers, reduce_scatter_sum };

const char* name(Op op) {
  switch (op) {
    case Op::all_gather:
      return "all_gather";
    case Op::all_to_all:
      return "all_to_all";
    case Op::all_to_all_peers:
      return "all_to_all_peers";
    case Op::reduce_scatter_sum:
      return "reduce_scatter_sum";
  }
  return "?";
}

// One collective as every rank calls it. Out of place, send and recv are separate allocations,
// each buffer send_offset / recv_offset bytes into its own. In place (all_gather,
// reduce_scatter_sum) there is one buffer, [W, count], recv_offset bytes into its allocation:
// all_gather's recv (send = its chunk `rank`) or reduce_scatter_sum's send (recv = its chunk
// `rank`). Offsets that are not multiples of 16 take the byte path.
struct Call {
  Op op;
  DType dtype;
  std::size_t count;
  bool in_place = false;
  std::size_t send_offset = 0;
  std::size_t recv_offset = 0;

  std::size_t chunk() const { return count * dtype_size(dtype); }
  std::size_t send_bytes(int world) const {
    return op == Op::all_gather ? chunk() : std::size_t(world) * chunk();
  }
  std::size_t recv_bytes(int world) const {
    return op == Op::reduce_scatter_sum ? chunk() : std::size_t(world) * chunk();
  }
  std::string describe() const {
    const std::string where =
        in_place ? fmt::format("in place at +{}", recv_offset)
                 : fmt::format("send at +{}, recv at +{}", send_offset, recv_offset);
    return fmt::format("{} {} count {} ({})", name(op), to_string(dtype), count, where);
  }
};

// Byte k of rank r's allocations wherever a call puts no data: guards, and recv before the call.
std::vector<std::uint8_t> sentinel(int rank, std::size_t bytes) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t k = 0; k < bytes; ++k) {
    v[k] = std::uint8_t(0xa5 ^ (std::size_t(rank) * 37 + k * 11 + k / 256));
  }
  return v;
}

std::mt19937 generator(std::uint32_t seed, std::size_t call, int rank) {
  std::seed_seq seq{seed, std::uint32_t(call), std::uint32_t(rank)};
  return std::mt19937(seq);
}

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t bytes) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t k = 0; k < bytes; k += 4) {
    const std::uint32_t word = rng();
    std::memcpy(v.data() + k, &word, std::min<std::size_t>(4, bytes - k));
  }
  return v;
}

// f32 of both signs and magnitudes 2^-10 to 2^10: their sums round, so the order of the
// additions shows in the bits.
std::vector<std::uint8_t> random_floats(std::mt19937& rng, std::size_t count) {
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  std::uniform_int_distribution<int> exponent(-10, 10);
  std::vector<std::uint8_t> v(count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) {
    const float x = std::ldexp(unit(rng), exponent(rng));
    std::memcpy(v.data() + i * sizeof(float), &x, sizeof(float));
  }
  return v;
}

// sends[i][q]: rank q's send for call i ([1 or W, count]; in place, what the call reads), fresh
// for every call: a generator per (test seed, call, rank).
using Sends = std::vector<std::vector<std::vector<std::uint8_t>>>;

Sends make_sends(const std::vector<Call>& calls, int world, std::uint32_t seed) {
  Sends sends(calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    for (int q = 0; q < world; ++q) {
      std::mt19937 rng = generator(seed, i, q);
      sends[i].push_back(c.op == Op::reduce_scatter_sum
                             ? random_floats(rng, c.send_bytes(world) / sizeof(float))
                             : random_bytes(rng, c.send_bytes(world)));
    }
  }
  return sends;
}

// Rank r's allocations for call c before it runs: {send, recv} out of place, {buffer} in place.
std::vector<std::vector<std::uint8_t>> before_call(const Call& c, int world, int r,
                                                   const std::vector<std::uint8_t>& send) {
  if (c.in_place) {
    auto buffer = sentinel(r, c.recv_offset + std::size_t(world) * c.chunk() + kGuard);
    const std::size_t own = c.op == Op::all_gather ? std::size_t(r) * c.chunk() : 0;
    std::copy(send.begin(), send.end(), buffer.begin() + std::ptrdiff_t(c.recv_offset + own));
    return {buffer};
  }
  auto s = sentinel(r, c.send_offset + c.send_bytes(world) + kGuard);
  std::copy(send.begin(), send.end(), s.begin() + std::ptrdiff_t(c.send_offset));
  return {s, sentinel(r + 100, c.recv_offset + c.recv_bytes(world) + kGuard)};
}

// recv [count] of reduce_scatter_sum on rank r: element i is (((0 + x_0) + x_1) + ...) + x_{W-1}
// in f32, x_q = rank q's send [r, i].
std::vector<std::uint8_t> rank_order_sum(const std::vector<std::vector<std::uint8_t>>& sends, int r,
                                         std::size_t count) {
  std::vector<std::uint8_t> out(count * sizeof(float));
  for (std::size_t i = 0; i < count; ++i) {
    float acc = 0.0f;
    for (const auto& send : sends) {
      float x;
      std::memcpy(&x, send.data() + (std::size_t(r) * count + i) * sizeof(float), sizeof(float));
      acc += x;
    }
    std::memcpy(out.data() + i * sizeof(float), &acc, sizeof(float));
  }
  return out;
}

// What rank r's allocations must hold after call c (sends: every rank's, for this call).
std::vector<std::vector<std::uint8_t>> after_call(
    const Call& c, int world, int r, const std::vector<std::vector<std::uint8_t>>& sends) {
  auto images = before_call(c, world, r, sends[std::size_t(r)]);
  std::uint8_t* recv = images.back().data() + c.recv_offset;
  const std::size_t chunk = c.chunk();
  for (int q = 0; q < world; ++q) {
    const std::uint8_t* from = sends[std::size_t(q)].data();
    std::uint8_t* to = recv + std::size_t(q) * chunk;
    switch (c.op) {
      case Op::all_gather:
        std::copy_n(from, chunk, to);
        break;
      case Op::all_to_all_peers:
        if (q == r) break;
        [[fallthrough]];
      case Op::all_to_all:
        std::copy_n(from + std::size_t(r) * chunk, chunk, to);
        break;
      case Op::reduce_scatter_sum:
        break;
    }
  }
  if (c.op == Op::reduce_scatter_sum) {
    const auto sum = rank_order_sum(sends, r, c.count);
    std::copy(sum.begin(), sum.end(), recv + (c.in_place ? std::size_t(r) * chunk : 0));
  }
  return images;
}

using Allocations = std::vector<std::unique_ptr<DeviceBytes>>;

// Call c's send and recv in rank r's allocations (laid out as before_call says).
std::pair<std::uint8_t*, std::uint8_t*> buffers_of(const Call& c, int r, const Allocations& a) {
  if (!c.in_place) return {a[0]->get() + c.send_offset, a[1]->get() + c.recv_offset};
  std::uint8_t* buffer = a[0]->get() + c.recv_offset;
  std::uint8_t* own = buffer + std::size_t(r) * c.chunk();
  return c.op == Op::all_gather ? std::pair{own, buffer} : std::pair{buffer, own};
}

void issue(PeerCommunicator& comm, const Call& c, const Allocations& a, cudaStream_t s) {
  const auto [send, recv] = buffers_of(c, comm.rank(), a);
  switch (c.op) {
    case Op::all_gather:
      comm.all_gather(send, recv, c.count, c.dtype, s);
      break;
    case Op::all_to_all:
      comm.all_to_all(send, recv, c.count, c.dtype, s);
      break;
    case Op::all_to_all_peers:
      comm.all_to_all_peers(send, recv, c.count, c.dtype, s);
      break;
    case Op::reduce_scatter_sum:
      comm.reduce_scatter_sum(reinterpret_cast<const float*>(send), reinterpret_cast<float*>(recv),
                              c.count, s);
      break;
  }
}

// Allocates and fills rank r's buffers of call c (synchronously).
Allocations prepare(const Call& c, int world, int r, const std::vector<std::uint8_t>& send,
                    const DeviceStream& stream) {
  Allocations a;
  const auto images = before_call(c, world, r, send);
  for (const auto& image : images) {
    a.push_back(std::make_unique<DeviceBytes>(r, image.size()));
    a.back()->upload(image, stream.get());
  }
  stream.synchronize();
  return a;
}

void check_after(const Call& c, int world, int r,
                 const std::vector<std::vector<std::uint8_t>>& sends, const Allocations& a,
                 const DeviceStream& stream, Mismatches& m, const std::string& what) {
  const auto want = after_call(c, world, r, sends);
  for (std::size_t k = 0; k < want.size(); ++k) {
    const char* part = c.in_place ? "buffer" : k == 0 ? "send" : "recv";
    m.bytes(a[k]->read(stream.get()), want[k], fmt::format("{}: {}, {}", what, c.describe(), part));
  }
}

// With skew, rank (i / kSkewEvery) % W pauses before issuing call i when kSkewEvery divides i:
// it reaches that call well after the others.
constexpr std::size_t kSkewEvery = 25;

// Every rank makes the calls in order on its stream, back to back; the host synchronises only
// before the first and after the last, then checks every call's buffers.
std::vector<std::string> run_calls(PeerGroup& group, const std::vector<Call>& calls,
                                   const Sends& sends, bool skew = false) {
  const int W = group.world();
  return on_ranks(W, [&](int r, Ranks& ranks) {
    PeerCommunicator& comm = group.communicator(r);
    DeviceStream stream(comm.device());
    std::vector<Allocations> memory;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      memory.push_back(prepare(calls[i], W, r, sends[i][std::size_t(r)], stream));
    }
    if (!ranks.all_ready()) return;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (skew && i % kSkewEvery == 0 && int(i / kSkewEvery) % W == r) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      issue(comm, calls[i], memory[i], stream.get());
    }
    stream.synchronize();
    Mismatches m;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      check_after(calls[i], W, r, sends[i], memory[i], stream, m, fmt::format("call {}", i));
    }
    m.throw_if_any();
  });
}

// Each call (its own buffers) run with fresh data; the round's calls run back to back.
void expect_calls_correct(PeerGroup& group, const std::vector<Call>& calls, std::uint32_t seed,
                          bool skew = false) {
  const auto errors = run_calls(group, calls, make_sends(calls, group.world(), seed), skew);
  EXPECT_EVERY_RANK_OK(errors);
}

// [4096, 576] bf16 is the latent rows of a 4096-token step; +5 makes it odd.
const std::size_t kCounts[] = {1, 3, 8, 577, 4096, 4096 * 576, 4096 * 576 + 5};

TEST(PeerCommunicator, AllGatherOutOfPlaceAndInPlace) {
  DCPMLA_REQUIRE_PEER_GPUS();
  std::uint32_t seed = 1000;
  for (int W : worlds()) {
    SCOPED_TRACE(fmt::format("W = {}", W));
    // The largest chunk, 4096 * 576 + 5 f32, is 9 MiB.
    PeerGroup group(first_devices(W), 10 * kMiB);
    for (DType t : {DType::bf16, DType::f32}) {
      for (std::size_t n : kCounts) {
        expect_calls_correct(group,
                             {{Op::all_gather, t, n},
                              {Op::all_gather, t, n, false, 2, 0},
                              {Op::all_gather, t, n, false, 2, 2},
                              {Op::all_gather, t, n, true, 0, 0},
                              {Op::all_gather, t, n, true, 0, 2}},
                             seed++);
      }
    }
  }
}

TEST(PeerCommunicator, AllToAllAndAllToAllPeers) {
  DCPMLA_REQUIRE_PEER_GPUS();
  std::uint32_t seed = 2000;
  for (int W : worlds()) {
    SCOPED_TRACE(fmt::format("W = {}", W));
    PeerGroup group(first_devices(W), 8 * kMiB);
    // 7 * 3 * 513: the a2a combine's [rows, heads per rank, 513] f32 payload.
    for (std::size_t n : {1, 3, 8, 577, 4096, 7 * 3 * 513, 262144, 262147}) {
      for (DType t : {DType::bf16, DType::f32}) {
        std::vector<Call> calls;
        for (Op op : {Op::all_to_all, Op::all_to_all_peers}) {
          calls.push_back({op, t, n});
          calls.push_back({op, t, n, false, 2, 0});
          calls.push_back({op, t, n, false, 0, 2});
        }
        expect_calls_correct(group, calls, seed++);
      }
    }
  }
}

TEST(PeerCommunicator, ReduceScatterSumsInRankOrderOutOfPlaceAndInPlace) {
  DCPMLA_REQUIRE_PEER_GPUS();
  std::uint32_t seed = 3000;
  for (int W : worlds()) {
    SCOPED_TRACE(fmt::format("W = {}", W));
    PeerGroup group(first_devices(W), 8 * kMiB);
    for (std::size_t n : {1, 3, 4, 577, 4096, 7 * 3 * 513, 1 << 20, (1 << 20) + 1}) {
      const DType f32 = DType::f32;
      // Offsets of 4: still f32-aligned, but not 16-byte aligned (the scalar loop).
      expect_calls_correct(group,
                           {{Op::reduce_scatter_sum, f32, n},
                            {Op::reduce_scatter_sum, f32, n, false, 4, 0},
                            {Op::reduce_scatter_sum, f32, n, false, 0, 4},
                            {Op::reduce_scatter_sum, f32, n, true, 0, 0},
                            {Op::reduce_scatter_sum, f32, n, true, 0, 4}},
                           seed++);
    }
  }
}

// 300 calls per rank with no host synchronisation between them, each with its own buffers: the
// staging areas alternate by call parity, so calls i and i + 2 share one while their counts, and
// with them the slices each block owns, differ (7 counts against a period of 2).
//
// Every kSkewEvery-th call is a large all_gather on the byte path, reached late by one rank: the
// others finish it while that rank still copies its own chunk, and at once push the next call, a
// large one again but cut into other slices. A staging slot reused too early is overwritten
// before that rank reads it (a version of the kernel with one staging slot fails here; with small
// calls alone, or without the pause, the ranks stay too close together for it to show).
TEST(PeerCommunicator, BackToBackCallsWithoutHostSynchronisation) {
  DCPMLA_REQUIRE_PEER_GPUS();
  const std::size_t counts[] = {1, 577, 4096, 3, 16391, 8, 12288};
  const Op ops[] = {Op::all_gather, Op::all_to_all, Op::reduce_scatter_sum, Op::all_to_all_peers};
  std::vector<Call> calls;
  for (std::size_t i = 0; i < 300; ++i) {
    Call c{ops[i % 4], (i / 4) % 2 ? DType::f32 : DType::bf16, counts[i % 7]};
    if (c.op == Op::reduce_scatter_sum) c.dtype = DType::f32;
    if (i % 5 == 4) c.send_offset = c.op == Op::reduce_scatter_sum ? 4 : 2;
    if (i % 11 == 3 && (c.op == Op::all_gather || c.op == Op::reduce_scatter_sum)) {
      c.in_place = true;
    }
    if (i % kSkewEvery < 2) {
      // 3 MB, then 2.4 MB chunks of bf16, 2 bytes off alignment.
      c = {Op::all_gather, DType::bf16, i % kSkewEvery == 0 ? 1500001u : 1200003u, false, 2, 0};
    }
    calls.push_back(c);
  }
  std::uint32_t seed = 4000;
  for (int W : worlds()) {
    SCOPED_TRACE(fmt::format("W = {}", W));
    PeerGroup group(first_devices(W), 8 * kMiB);
    expect_calls_correct(group, calls, seed++, /*skew=*/true);
  }
}

struct GraphDeleter {
  void operator()(cudaGraph_t g) const { cudaGraphDestroy(g); }
};
struct GraphExecDeleter {
  void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); }
};
using Graph = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDeleter>;
using GraphExec = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

std::size_t node_count(cudaGraph_t graph) {
  std::size_t n = 0;
  check_cuda(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
  return n;
}

// Captures what `enqueue` puts on s (thread-local mode: the other ranks' threads keep using CUDA).
Graph capture(cudaStream_t s, const std::function<void()>& enqueue) {
  check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  check_cuda(cudaStreamEndCapture(s, &graph), "end capture");
  return Graph(graph);
}

// The call counters live in device memory: a graph replayed 20 times, with new send data
// uploaded before each replay (outside the graph), moves each replay's data; eager calls after
// the replays still pair up.
TEST(PeerCommunicator, CapturedInACudaGraphAndReplayed) {
  DCPMLA_REQUIRE_PEER_GPUS();
  constexpr int kReplays = 20;
  // 577 * 16 bf16 takes the vector path, 1027 f32 the byte path.
  const Call gather{Op::all_gather, DType::bf16, 577 * 16};
  const Call exchange{Op::all_to_all_peers, DType::f32, 1027, false, 0, 0};
  // Replay k moves the sends of calls 2k and 2k + 1; the last pair runs eagerly.
  std::vector<Call> calls;
  for (int k = 0; k <= kReplays; ++k) {
    calls.push_back(gather);
    calls.push_back(exchange);
  }
  std::uint32_t seed = 5000;
  for (int W : worlds()) {
    SCOPED_TRACE(fmt::format("W = {}", W));
    PeerGroup group(first_devices(W), 8 * kMiB);
    const Sends sends = make_sends(calls, W, seed++);
    const auto errors = on_ranks(W, [&](int r, Ranks& ranks) {
      PeerCommunicator& comm = group.communicator(r);
      DeviceStream stream(comm.device());
      const cudaStream_t s = stream.get();
      const Allocations ag = prepare(gather, W, r, sends[0][std::size_t(r)], stream);
      const Allocations a2a = prepare(exchange, W, r, sends[1][std::size_t(r)], stream);
      auto enqueue = [&] {
        issue(comm, gather, ag, s);
        issue(comm, exchange, a2a, s);
      };
      const Graph graph = capture(s, enqueue);
      if (node_count(graph.get()) != 2) {
        throw std::runtime_error(
            fmt::format("captured {} nodes, want 2 (one kernel a call)", node_count(graph.get())));
      }
      cudaGraphExec_t exec_handle = nullptr;
      check_cuda(cudaGraphInstantiate(&exec_handle, graph.get(), 0), "cudaGraphInstantiate");
      const GraphExec exec(exec_handle);
      if (!ranks.all_ready()) return;

      Mismatches m;
      for (int k = 0; k <= kReplays; ++k) {
        const auto& ag_send = sends[std::size_t(2 * k)][std::size_t(r)];
        const auto& a2a_send = sends[std::size_t(2 * k + 1)][std::size_t(r)];
        check_cuda(cudaMemcpyAsync(buffers_of(gather, r, ag).first, ag_send.data(), ag_send.size(),
                                   cudaMemcpyHostToDevice, s),
                   "upload");
        check_cuda(cudaMemcpyAsync(buffers_of(exchange, r, a2a).first, a2a_send.data(),
                                   a2a_send.size(), cudaMemcpyHostToDevice, s),
                   "upload");
        if (k < kReplays) {
          check_cuda(cudaGraphLaunch(exec.get(), s), "cudaGraphLaunch");
        } else {
          enqueue();
        }
        stream.synchronize();
        const std::string what = k < kReplays ? fmt::format("replay {}", k) : "eager after";
        check_after(gather, W, r, sends[std::size_t(2 * k)], ag, stream, m, what);
        check_after(exchange, W, r, sends[std::size_t(2 * k + 1)], a2a, stream, m, what);
      }
      m.throw_if_any();
    });
    EXPECT_EVERY_RANK_OK(errors);
  }
}

// "" when `call` throws Error(invalid_argument) naming `argument`, else what happened.
std::string rejected(const std::function<void()>& call, const std::string& argument) {
  try {
    call();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::invalid_argument && e.argument() == argument &&
        std::string(e.what()).find(argument) != std::string::npos) {
      return "";
    }
    return fmt::format("want invalid_argument naming '{}', got {}", argument, e.what());
  }
  return fmt::format("'{}' beyond the chunk capacity was accepted", argument);
}

// Bad counts throw on every rank before anything is enqueued (nothing is captured in a graph,
// the stream stays idle), so no rank is left waiting; calls at the capacity still work.
TEST(PeerCommunicator, ChunkOverCapacityThrowsOnEveryRankAndLaunchesNothing) {
  DCPMLA_REQUIRE_PEER_GPUS();
  std::uint32_t seed = 6000;
  for (int W : worlds()) {
    SCOPED_TRACE(fmt::format("W = {}", W));
    PeerGroup group(first_devices(W), 4096);
    const std::size_t cap = group.chunk_capacity();
    ASSERT_GE(cap, 4096u);
    const auto errors = on_ranks(W, [&](int r, Ranks&) {
      PeerCommunicator& comm = group.communicator(r);
      DeviceStream stream(comm.device());
      const cudaStream_t s = stream.get();
      // Separate allocations large enough for the counts: the check that rejects them is the
      // capacity, not an overlap of send and recv.
      DeviceBytes send(r, std::size_t(W) * (cap + 16)), recv(r, std::size_t(W) * (cap + 16));
      void* sp = send.get();
      void* rp = recv.get();
      const std::size_t bf16_over = cap / 2 + 1, f32_over = cap / 4 + 1;
      Mismatches m;
      auto try_all = [&] {
        m.add(rejected([&] { comm.all_gather(sp, rp, bf16_over, DType::bf16, s); },
                       "all_gather: count"));
        m.add(rejected([&] { comm.all_gather(sp, rp, f32_over, DType::f32, s); },
                       "all_gather: count"));
        m.add(rejected([&] { comm.all_to_all(sp, rp, bf16_over, DType::bf16, s); },
                       "all_to_all: count"));
        m.add(rejected([&] { comm.all_to_all_peers(sp, rp, f32_over, DType::f32, s); },
                       "all_to_all: count"));
        m.add(rejected(
            [&] {
              comm.reduce_scatter_sum(static_cast<const float*>(sp), static_cast<float*>(rp),
                                      f32_over, s);
            },
            "reduce_scatter_sum: count"));
      };
      const Graph graph = capture(s, try_all);
      if (const std::size_t n = node_count(graph.get()); n != 0) {
        m.add(fmt::format("rejected calls captured {} graph nodes", n));
      }
      try_all();
      if (const cudaError_t e = cudaStreamQuery(s); e != cudaSuccess) {
        m.add(fmt::format("stream busy after rejected calls: {}", cudaGetErrorString(e)));
      }
      m.throw_if_any();
    });
    EXPECT_EVERY_RANK_OK(errors);
    expect_calls_correct(group,
                         {{Op::all_gather, DType::bf16, cap / 2},
                          {Op::all_to_all, DType::f32, cap / 4, false, 2, 0},
                          {Op::reduce_scatter_sum, DType::f32, cap / 4}},
                         seed++);
  }
}

// Count 0 enqueues nothing (null buffers or not) and leaves recv alone; the calls after it pair
// up as before.
TEST(PeerCommunicator, CountZeroIsANoOp) {
  DCPMLA_REQUIRE_PEER_GPUS();
  std::uint32_t seed = 7000;
  for (int W : worlds()) {
    SCOPED_TRACE(fmt::format("W = {}", W));
    PeerGroup group(first_devices(W), kMiB);
    const auto errors = on_ranks(W, [&](int r, Ranks&) {
      PeerCommunicator& comm = group.communicator(r);
      DeviceStream stream(comm.device());
      const cudaStream_t s = stream.get();
      const std::size_t bytes = 64 * std::size_t(W);
      DeviceBytes send(r, bytes), recv(r, bytes);
      const auto recv_before = sentinel(r, bytes);
      recv.upload(recv_before, s);
      stream.synchronize();
      auto zero_counts = [&] {
        for (void* sp : {static_cast<void*>(nullptr), static_cast<void*>(send.get())}) {
          void* rp = sp ? recv.get() : nullptr;
          comm.all_gather(sp, rp, 0, DType::bf16, s);
          comm.all_to_all(sp, rp, 0, DType::f32, s);
          comm.all_to_all_peers(sp, rp, 0, DType::bf16, s);
          comm.reduce_scatter_sum(static_cast<const float*>(sp), static_cast<float*>(rp), 0, s);
        }
      };
      Mismatches m;
      const Graph graph = capture(s, zero_counts);
      if (const std::size_t n = node_count(graph.get()); n != 0) {
        m.add(fmt::format("count 0 captured {} graph nodes", n));
      }
      zero_counts();
      if (const cudaError_t e = cudaStreamQuery(s); e != cudaSuccess) {
        m.add(fmt::format("stream busy after count 0: {}", cudaGetErrorString(e)));
      }
      m.bytes(recv.read(s), recv_before, "recv after count 0");
      m.throw_if_any();
    });
    EXPECT_EVERY_RANK_OK(errors);
    expect_calls_correct(group,
                         {{Op::all_gather, DType::bf16, 577},
                          {Op::all_to_all_peers, DType::bf16, 4096},
                          {Op::reduce_scatter_sum, DType::f32, 577}},
                         seed++);
  }
}

TEST(PeerGroup, ReportsRanksDevicesAndCapacity) {
  DCPMLA_REQUIRE_PEER_GPUS();
  for (int W : worlds()) {
    SCOPED_TRACE(fmt::format("W = {}", W));
    // 1000 bytes: not a multiple of 16; a call of exactly 1000-byte chunks still fits.
    PeerGroup group(first_devices(W), 1000);
    EXPECT_EQ(group.world(), W);
    EXPECT_EQ(group.devices(), first_devices(W));
    EXPECT_GE(group.chunk_capacity(), 1000u);
    for (int r = 0; r < W; ++r) {
      const PeerCommunicator& comm = group.communicator(r);
      EXPECT_EQ(comm.rank(), r);
      EXPECT_EQ(comm.world(), W);
      EXPECT_EQ(comm.device(), r);
    }
    for (int bad : {-1, W}) {
      try {
        group.communicator(bad);
        ADD_FAILURE() << "communicator(" << bad << ") was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::out_of_range) << e.what();
        EXPECT_EQ(e.argument(), "rank") << e.what();
      }
    }
    expect_calls_correct(group,
                         {{Op::all_gather, DType::bf16, 500},
                          {Op::all_to_all, DType::bf16, 500, false, 2, 2},
                          {Op::reduce_scatter_sum, DType::f32, 250}},
                         8000u + std::uint32_t(W));
  }
}

}  // namespace
}  // namespace dcpmla
