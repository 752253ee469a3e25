// One rank of a multi-process NCCL group, for processes_test: joins the group through the unique
// id (from a file, which rank 0 may create, or from an environment variable), runs the collectives
// of a DCP step on known data and checks the results. With --peer it also joins a peer
// communicator over the NCCL one (PeerCommunicator::join, one process per GPU) and runs the same
// checks through it. The checks include collectives captured in a CUDA graph and replayed with
// new inputs. Exit status 0 = all correct.
//
//   nccl_rank_process --world W --rank R --device D (--id-file PATH [--create-id] | --id-env VAR)
//                     [--peer] [--peer-capacity-of-rank1 BYTES]
//
// --peer-capacity-of-rank1: rank 1 passes BYTES to PeerCommunicator::join, the others the usual
// capacity; every rank must then get Error(invalid_argument, "chunk_capacity") from join (exit 0
// when it does), with no collective run through the peer communicator.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"
#include "dcpmla/peer_comm.h"

namespace {

using dcpmla::Communicator;
using dcpmla::DType;

// Above the largest chunk any check moves (the back-to-back calls' 96000 bytes).
constexpr std::size_t kPeerCapacity = std::size_t(1) << 20;
// Every output buffer starts as these bytes: a chunk a collective must leave alone keeps them.
constexpr std::uint8_t kUntouched = 0xCD;

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Counts failures and prints the first few.
class Expect {
 public:
  Expect(int rank, std::string label) : rank_(rank), label_(std::move(label)) {}
  void operator()(bool ok, const std::string& what) {
    if (!ok && failures_++ < 5) fmt::print(stderr, "rank {} ({}): {}\n", rank_, label_, what);
  }
  int failures() const { return failures_; }

 private:
  int rank_;
  std::string label_;
  int failures_ = 0;
};

// Runs `collective(in, out)` on s with `input` uploaded and out_elements of output (initially
// kUntouched bytes), and returns the output.
template <class T>
std::vector<T> run_on_device(const std::vector<T>& input, std::size_t out_elements, cudaStream_t s,
                             const std::function<void(const void*, void*)>& collective) {
  void *in = nullptr, *out = nullptr;
  check_cuda(cudaMalloc(&in, input.size() * sizeof(T)), "cudaMalloc");
  check_cuda(cudaMalloc(&out, out_elements * sizeof(T)), "cudaMalloc");
  check_cuda(cudaMemcpy(in, input.data(), input.size() * sizeof(T), cudaMemcpyHostToDevice),
             "upload");
  check_cuda(cudaMemset(out, kUntouched, out_elements * sizeof(T)), "cudaMemset");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  collective(in, out);
  std::vector<T> result(out_elements);
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  check_cuda(cudaMemcpy(result.data(), out, out_elements * sizeof(T), cudaMemcpyDeviceToHost),
             "download");
  cudaFree(in);
  cudaFree(out);
  return result;
}

// all_gather, reduce_scatter_sum, all_to_all and all_to_all_peers, each on its own buffers with a
// host synchronisation after it. Counts n: 1000 elements, and 333 (chunks of 333 to 1332 bytes,
// not multiples of 16: the peer exchange's byte path).
void check_each(Communicator& comm, std::size_t n, cudaStream_t s, Expect& expect) {
  const int world = comm.world(), rank = comm.rank();
  const auto W = std::size_t(world);

  // all_gather of i32: element i of rank q is q * 1000000 + i.
  std::vector<std::int32_t> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = std::int32_t(rank * 1000000 + i);
  const auto gathered = run_on_device(mine, n * W, s, [&](const void* in, void* out) {
    comm.all_gather(in, out, n, DType::i32, s);
  });
  for (int q = 0; q < world; ++q)
    for (std::size_t i = 0; i < n; ++i)
      expect(gathered[q * n + i] == std::int32_t(q * 1000000 + i),
             fmt::format("all_gather n={} element {} of rank {}", n, i, q));

  // all_gather of bytes (fp8_e4m3): byte i of rank q is q * 31 + i * 7 (mod 256).
  std::vector<std::uint8_t> my_bytes(n);
  for (std::size_t i = 0; i < n; ++i) my_bytes[i] = std::uint8_t(rank * 31 + i * 7);
  const auto gathered_bytes = run_on_device(my_bytes, n * W, s, [&](const void* in, void* out) {
    comm.all_gather(in, out, n, DType::fp8_e4m3, s);
  });
  for (int q = 0; q < world; ++q)
    for (std::size_t i = 0; i < n; ++i)
      expect(gathered_bytes[q * n + i] == std::uint8_t(q * 31 + i * 7),
             fmt::format("all_gather fp8 n={} byte {} of rank {}", n, i, q));

  // reduce_scatter_sum: send chunk c element i of rank q is q + c + i % 5 (exact sums).
  std::vector<float> send(n * W);
  for (int c = 0; c < world; ++c)
    for (std::size_t i = 0; i < n; ++i) send[c * n + i] = float(rank + c + int(i % 5));
  const auto summed = run_on_device(send, n, s, [&](const void* in, void* out) {
    comm.reduce_scatter_sum(static_cast<const float*>(in), static_cast<float*>(out), n, s);
  });
  for (std::size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int q = 0; q < world; ++q) want += float(q + rank + int(i % 5));
    expect(summed[i] == want,
           fmt::format("reduce_scatter n={} element {}: {} != {}", n, i, summed[i], want));
  }

  // all_to_all(_peers) of bf16 bits: chunk `to` element i of rank `from` is
  // from * 256 + to * 16 + i % 16.
  std::vector<std::uint16_t> out(n * W);
  for (int to = 0; to < world; ++to)
    for (std::size_t i = 0; i < n; ++i)
      out[to * n + i] = std::uint16_t(rank * 256 + to * 16 + i % 16);
  for (const bool peers_only : {false, true}) {
    const auto routed = run_on_device(out, n * W, s, [&](const void* in, void* o) {
      if (peers_only) {
        comm.all_to_all_peers(in, o, n, DType::bf16, s);
      } else {
        comm.all_to_all(in, o, n, DType::bf16, s);
      }
    });
    const char* op = peers_only ? "all_to_all_peers" : "all_to_all";
    for (int from = 0; from < world; ++from)
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t want = peers_only && from == rank
                                       ? std::uint16_t(kUntouched * 0x101)
                                       : std::uint16_t(from * 256 + rank * 16 + i % 16);
        expect(routed[from * n + i] == want,
               fmt::format("{} n={} element {} from rank {}", op, n, i, from));
      }
  }
}

// Byte b of chunk `chunk` of call `call`'s send buffer on rank `rank`, for the moving collectives.
std::uint8_t moved_byte(int rank, int call, int chunk, std::size_t b) {
  return std::uint8_t(rank * 37 + call * 11 + chunk * 5 + b * 3 + (b >> 8));
}

// 100 collectives of every kind and many sizes back to back on one stream, without a host
// synchronisation between them, each on its own part of one send and one receive buffer; then one
// synchronisation and every byte of the receive buffer checked (the padding between the parts
// too, which no call may write).
void check_back_to_back(Communicator& comm, cudaStream_t s, Expect& expect) {
  const int world = comm.world(), rank = comm.rank();
  const auto W = std::size_t(world);
  struct Call {
    int op;  // 0 all_gather fp8, 1 reduce_scatter_sum f32, 2 all_to_all bf16, 3 all_to_all_peers
             // i32
    std::size_t count, element_bytes, send_at, recv_at;
  };
  constexpr int kCalls = 100;
  std::vector<Call> calls;
  std::size_t send_bytes = 0, recv_bytes = 0;
  auto pad16 = [](std::size_t b) { return (b + 15) / 16 * 16; };
  for (int i = 0; i < kCalls; ++i) {
    Call c{};
    c.op = i % 4;
    c.count = i % 5 == 0 ? std::size_t(1 + i) : 1 + std::size_t(i) * 7919 % 24000;
    c.element_bytes = c.op == 0 ? 1 : c.op == 2 ? 2 : 4;
    const std::size_t chunk = c.count * c.element_bytes;
    c.send_at = send_bytes;
    c.recv_at = recv_bytes;
    send_bytes += pad16(c.op == 0 ? chunk : W * chunk);
    recv_bytes += pad16(c.op == 1 ? chunk : W * chunk);
    calls.push_back(c);
  }

  std::vector<std::uint8_t> send(send_bytes, 0), want(recv_bytes, kUntouched);
  for (int i = 0; i < kCalls; ++i) {
    const Call& c = calls[std::size_t(i)];
    const std::size_t chunk = c.count * c.element_bytes;
    if (c.op == 1) {
      // Chunk k element e of rank q is q + k + (e + i) % 9: the rank-order sum is exact.
      auto* in = reinterpret_cast<float*>(send.data() + c.send_at);
      auto* out = reinterpret_cast<float*>(want.data() + c.recv_at);
      for (int k = 0; k < world; ++k)
        for (std::size_t e = 0; e < c.count; ++e)
          in[std::size_t(k) * c.count + e] = float(rank + k + int((e + i) % 9));
      for (std::size_t e = 0; e < c.count; ++e) {
        float sum = 0;
        for (int q = 0; q < world; ++q) sum += float(q + rank + int((e + i) % 9));
        out[e] = sum;
      }
      continue;
    }
    const int send_chunks = c.op == 0 ? 1 : world;
    for (int k = 0; k < send_chunks; ++k)
      for (std::size_t b = 0; b < chunk; ++b)
        send[c.send_at + std::size_t(k) * chunk + b] = moved_byte(rank, i, k, b);
    for (int from = 0; from < world; ++from) {
      if (c.op == 3 && from == rank) continue;
      for (std::size_t b = 0; b < chunk; ++b)
        want[c.recv_at + std::size_t(from) * chunk + b] =
            moved_byte(from, i, c.op == 0 ? 0 : rank, b);
    }
  }

  void *send_d = nullptr, *recv_d = nullptr;
  check_cuda(cudaMalloc(&send_d, send_bytes), "cudaMalloc");
  check_cuda(cudaMalloc(&recv_d, recv_bytes), "cudaMalloc");
  check_cuda(cudaMemcpy(send_d, send.data(), send_bytes, cudaMemcpyHostToDevice), "upload");
  check_cuda(cudaMemset(recv_d, kUntouched, recv_bytes), "cudaMemset");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (const Call& c : calls) {
    const auto* in = static_cast<const std::uint8_t*>(send_d) + c.send_at;
    auto* out = static_cast<std::uint8_t*>(recv_d) + c.recv_at;
    switch (c.op) {
      case 0:
        comm.all_gather(in, out, c.count, DType::fp8_e4m3, s);
        break;
      case 1:
        comm.reduce_scatter_sum(reinterpret_cast<const float*>(in), reinterpret_cast<float*>(out),
                                c.count, s);
        break;
      case 2:
        comm.all_to_all(in, out, c.count, DType::bf16, s);
        break;
      default:
        comm.all_to_all_peers(in, out, c.count, DType::i32, s);
        break;
    }
  }
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<std::uint8_t> got(recv_bytes);
  check_cuda(cudaMemcpy(got.data(), recv_d, recv_bytes, cudaMemcpyDeviceToHost), "download");
  cudaFree(send_d);
  cudaFree(recv_d);
  for (int i = 0; i < kCalls; ++i) {
    const Call& c = calls[std::size_t(i)];
    const std::size_t end = i + 1 < kCalls ? calls[std::size_t(i) + 1].recv_at : recv_bytes;
    std::size_t wrong = 0, first = 0;
    for (std::size_t b = end; b-- > c.recv_at;) {
      if (got[b] != want[b]) {
        ++wrong;
        first = b;
      }
    }
    expect(wrong == 0, fmt::format("back-to-back call {} (op {}, count {}): {} bytes wrong, the "
                                   "first at byte {} of its part",
                                   i, c.op, c.count, wrong, first - c.recv_at));
  }
}

// An all_gather (i32), an all_to_all (bf16 bits) and a reduce_scatter_sum captured in one CUDA
// graph, replayed kReplays times with new inputs uploaded on the stream before each replay (how
// an engine replays its decode step); every replay's outputs checked. Value v of replay r on rank
// q: q * 1000 + r * 100 + v % 97 (all_gather), q * 256 + to * 16 + r + v % 8 (all_to_all), and
// q + chunk + r + v % 5 for the sum (exact).
void check_graph_replays(Communicator& comm, cudaStream_t s, Expect& expect) {
  constexpr int kReplays = 5;
  constexpr std::size_t n = 4000;  // per chunk: 16 KB of i32, 8 KB of bf16
  const int world = comm.world(), rank = comm.rank();
  const auto W = std::size_t(world);
  std::int32_t *ag_in = nullptr, *ag_out = nullptr;
  std::uint16_t *a2a_in = nullptr, *a2a_out = nullptr;
  float *rs_in = nullptr, *rs_out = nullptr;
  check_cuda(cudaMalloc(&ag_in, n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&ag_out, W * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&a2a_in, W * n * 2), "cudaMalloc");
  check_cuda(cudaMalloc(&a2a_out, W * n * 2), "cudaMalloc");
  check_cuda(cudaMalloc(&rs_in, W * n * 4), "cudaMalloc");
  check_cuda(cudaMalloc(&rs_out, n * 4), "cudaMalloc");

  cudaGraph_t graph = nullptr;
  check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  comm.all_gather(ag_in, ag_out, n, DType::i32, s);
  comm.all_to_all(a2a_in, a2a_out, n, DType::bf16, s);
  comm.reduce_scatter_sum(rs_in, rs_out, n, s);
  check_cuda(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

  std::vector<std::int32_t> ag(n), ag_got(W * n);
  std::vector<std::uint16_t> a2a(W * n), a2a_got(W * n);
  std::vector<float> rs(W * n), rs_got(n);
  for (int r = 0; r < kReplays; ++r) {
    for (std::size_t v = 0; v < n; ++v) ag[v] = std::int32_t(rank * 1000 + r * 100 + v % 97);
    for (std::size_t to = 0; to < W; ++to)
      for (std::size_t v = 0; v < n; ++v) {
        a2a[to * n + v] = std::uint16_t(rank * 256 + to * 16 + std::size_t(r) + v % 8);
        rs[to * n + v] = float(rank + int(to) + r + int(v % 5));
      }
    check_cuda(cudaMemcpyAsync(ag_in, ag.data(), n * 4, cudaMemcpyHostToDevice, s), "upload");
    check_cuda(cudaMemcpyAsync(a2a_in, a2a.data(), W * n * 2, cudaMemcpyHostToDevice, s), "upload");
    check_cuda(cudaMemcpyAsync(rs_in, rs.data(), W * n * 4, cudaMemcpyHostToDevice, s), "upload");
    check_cuda(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    check_cuda(cudaMemcpyAsync(ag_got.data(), ag_out, W * n * 4, cudaMemcpyDeviceToHost, s),
               "download");
    check_cuda(cudaMemcpyAsync(a2a_got.data(), a2a_out, W * n * 2, cudaMemcpyDeviceToHost, s),
               "download");
    check_cuda(cudaMemcpyAsync(rs_got.data(), rs_out, n * 4, cudaMemcpyDeviceToHost, s),
               "download");
    check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    std::size_t wrong = 0;
    for (int q = 0; q < world; ++q)
      for (std::size_t v = 0; v < n; ++v) {
        wrong += ag_got[std::size_t(q) * n + v] != std::int32_t(q * 1000 + r * 100 + v % 97);
        wrong +=
            a2a_got[std::size_t(q) * n + v] != std::uint16_t(q * 256 + rank * 16 + r + int(v % 8));
      }
    for (std::size_t v = 0; v < n; ++v) {
      float want = 0;
      for (int q = 0; q < world; ++q) want += float(q + rank + r + int(v % 5));
      wrong += rs_got[v] != want;
    }
    expect(wrong == 0, fmt::format("graph replay {}: {} values wrong", r, wrong));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (void* p :
       {static_cast<void*>(ag_in), static_cast<void*>(ag_out), static_cast<void*>(a2a_in),
        static_cast<void*>(a2a_out), static_cast<void*>(rs_in), static_cast<void*>(rs_out)})
    cudaFree(p);
}

int check_collectives(Communicator& comm, const std::string& label, cudaStream_t s) {
  Expect expect(comm.rank(), label);
  for (const std::size_t n : {std::size_t(1000), std::size_t(333)}) check_each(comm, n, s, expect);
  check_back_to_back(comm, s, expect);
  check_graph_replays(comm, s, expect);
  return expect.failures();
}

// Returns once every rank has reached this point (an all_gather over comm, then a stream
// synchronisation).
void barrier(Communicator& comm, cudaStream_t s) {
  void* bytes = nullptr;
  check_cuda(cudaMalloc(&bytes, std::size_t(comm.world()) + 1), "cudaMalloc");
  auto* recv = static_cast<std::uint8_t*>(bytes);
  comm.all_gather(recv + comm.world(), recv, 1, DType::fp8_e4m3, s);
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  cudaFree(bytes);
}

// --peer-capacity-of-rank1: join must throw Error(invalid_argument, "chunk_capacity") on every
// rank.
int expect_unequal_capacities_rejected(Communicator& bootstrap, int device, std::size_t capacity) {
  const int rank = bootstrap.rank();
  try {
    dcpmla::PeerCommunicator::join(bootstrap, device, capacity);
    fmt::print(stderr, "rank {}: PeerCommunicator::join accepted unequal capacities\n", rank);
    return 1;
  } catch (const dcpmla::Error& e) {
    if (e.code() == dcpmla::ErrorCode::invalid_argument && e.argument() == "chunk_capacity") {
      fmt::print("rank {}: unequal capacities rejected: {}\n", rank, e.what());
      return 0;
    }
    fmt::print(stderr, "rank {}: PeerCommunicator::join threw another error: {}\n", rank, e.what());
    return 1;
  }
}

int run(int world, int rank, int device, const std::string& id_file, bool create_id,
        const std::string& id_env, bool peer, std::size_t peer_capacity_of_rank1) {
  ncclUniqueId id;
  if (!id_env.empty()) {
    id = dcpmla::nccl_unique_id_from_env(id_env);
  } else if (create_id) {
    id = dcpmla::new_nccl_unique_id();
    dcpmla::write_nccl_unique_id(id_file, id);
  } else {
    id = dcpmla::read_nccl_unique_id(id_file, std::chrono::seconds(60));
  }
  const auto comm = dcpmla::NcclCommunicator::join(id, world, rank, device);
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");

  if (peer_capacity_of_rank1 != 0) {
    const int status = expect_unequal_capacities_rejected(
        *comm, device, rank == 1 ? peer_capacity_of_rank1 : kPeerCapacity);
    cudaStreamDestroy(s);
    return status;
  }

  int failures = check_collectives(*comm, "nccl", s);
  std::string report = fmt::format("nccl {}", failures ? "FAILED" : "ok");
  if (peer) {
    auto peers = dcpmla::PeerCommunicator::join(*comm, device, kPeerCapacity);
    const int peer_failures = check_collectives(*peers, "peer", s);
    report += fmt::format(", peer {}", peer_failures ? "FAILED" : "ok");
    failures += peer_failures;
    // Peers write into this rank's area until their last collective ends: every rank's stream
    // is synchronised (in check_collectives), then the barrier, then the areas go.
    barrier(*comm, s);
    peers.reset();
  }
  cudaStreamDestroy(s);
  fmt::print("rank {} of {} on device {}: {}\n", rank, world, device, report);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"one rank of a multi-process NCCL group (dcpmla test helper)"};
  int world = 0, rank = -1, device = -1;
  std::string id_file, id_env;
  bool create_id = false, peer = false;
  std::size_t peer_capacity_of_rank1 = 0;
  app.add_option("--world", world)->required();
  app.add_option("--rank", rank)->required();
  app.add_option("--device", device)->required();
  app.add_option("--id-file", id_file);
  app.add_flag("--create-id", create_id);
  app.add_option("--id-env", id_env);
  app.add_flag("--peer", peer, "also check a PeerCommunicator joined over the NCCL one");
  app.add_option("--peer-capacity-of-rank1", peer_capacity_of_rank1,
                 "check that join rejects this capacity on rank 1 (the others: the usual one)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  // NVLink multicast stays off unless the environment sets it (shared machines).
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  try {
    return run(world, rank, device, id_file, create_id, id_env, peer, peer_capacity_of_rank1);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: error: {}\n", rank, e.what());
    return 2;
  }
}
