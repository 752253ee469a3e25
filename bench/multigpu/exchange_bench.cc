// The collectives alone, NCCL against the peer communicator: per call time of back-to-back calls
// of one collective on every rank (GPU r = rank r), eager (events only around the loop, so the
// host enqueues ahead) and replayed from a CUDA graph of the same calls (no launch cost on the
// host). Chunks from the LSE's few KB to the ragged query's 10 MB. JSON and a table.
//
//   dcpmla_exchange_bench --worlds 2 --out exchange.json
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"
#include "dcpmla/peer_comm.h"
#include "dcpmla/testing/run_ranks.h"
#include "event_timer.h"

namespace dcpmla::bench {
namespace {

enum class Op { all_gather, all_to_all_peers, reduce_scatter_sum };
const char* to_string(Op op) {
  switch (op) {
    case Op::all_gather:
      return "all_gather";
    case Op::all_to_all_peers:
      return "all_to_all_peers";
    case Op::reduce_scatter_sum:
      return "reduce_scatter_sum";
  }
  return "?";
}

// One rank's buffers for chunks of up to `chunk` bytes: send and recv [W, chunk].
struct RankBuffers {
  RankBuffers(const RankBuffers&) = delete;
  RankBuffers& operator=(const RankBuffers&) = delete;
  RankBuffers(int device, int world, std::size_t chunk) : device(device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    check_cuda(cudaMalloc(&send, world * chunk), "cudaMalloc");
    check_cuda(cudaMalloc(&recv, world * chunk), "cudaMalloc");
    check_cuda(cudaMemset(send, 0, world * chunk), "cudaMemset");
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check_cuda(cudaEventCreate(&begin), "cudaEventCreate");
    check_cuda(cudaEventCreate(&end), "cudaEventCreate");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  ~RankBuffers() {
    cudaSetDevice(device);
    cudaStreamSynchronize(stream);
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    cudaStreamDestroy(stream);
    cudaFree(send);
    cudaFree(recv);
  }
  int device;
  void* send = nullptr;
  void* recv = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
};

void call(Communicator& comm, Op op, const RankBuffers& b, std::size_t bytes) {
  switch (op) {
    case Op::all_gather:
      comm.all_gather(b.send, b.recv, bytes / 2, DType::bf16, b.stream);
      return;
    case Op::all_to_all_peers:
      comm.all_to_all_peers(b.send, b.recv, bytes / 2, DType::bf16, b.stream);
      return;
    case Op::reduce_scatter_sum:
      comm.reduce_scatter_sum(static_cast<const float*>(b.send), static_cast<float*>(b.recv),
                              bytes / 4, b.stream);
      return;
  }
}

struct Timing {
  double eager_us = 0, graph_us = 0;  // per call, the slowest rank
};

// `calls` calls back to back on every rank, eager and from a graph; per call microseconds.
Timing time_calls(const std::vector<Communicator*>& comms,
                  std::vector<std::unique_ptr<RankBuffers>>& bufs, Op op, std::size_t bytes,
                  int calls) {
  const int W = int(comms.size());
  std::vector<double> eager(W), graph(W);
  std::barrier sync(W);
  testing::run_ranks(W, [&](int r) {
    RankBuffers& b = *bufs[std::size_t(r)];
    Communicator& comm = *comms[std::size_t(r)];
    check_cuda(cudaSetDevice(b.device), "cudaSetDevice");
    for (int i = 0; i < 20; ++i) call(comm, op, b, bytes);
    check_cuda(cudaStreamSynchronize(b.stream), "cudaStreamSynchronize");
    sync.arrive_and_wait();
    check_cuda(cudaEventRecord(b.begin, b.stream), "cudaEventRecord");
    for (int i = 0; i < calls; ++i) call(comm, op, b, bytes);
    check_cuda(cudaEventRecord(b.end, b.stream), "cudaEventRecord");
    check_cuda(cudaStreamSynchronize(b.stream), "cudaStreamSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, b.begin, b.end), "cudaEventElapsedTime");
    eager[std::size_t(r)] = 1e3 * ms / calls;

    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    check_cuda(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
    for (int i = 0; i < calls; ++i) call(comm, op, b, bytes);
    check_cuda(cudaStreamEndCapture(b.stream, &g), "cudaStreamEndCapture");
    check_cuda(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    check_cuda(cudaGraphLaunch(exec, b.stream), "cudaGraphLaunch");  // warm
    check_cuda(cudaStreamSynchronize(b.stream), "cudaStreamSynchronize");
    sync.arrive_and_wait();
    check_cuda(cudaEventRecord(b.begin, b.stream), "cudaEventRecord");
    check_cuda(cudaGraphLaunch(exec, b.stream), "cudaGraphLaunch");
    check_cuda(cudaEventRecord(b.end, b.stream), "cudaEventRecord");
    check_cuda(cudaStreamSynchronize(b.stream), "cudaStreamSynchronize");
    check_cuda(cudaEventElapsedTime(&ms, b.begin, b.end), "cudaEventElapsedTime");
    graph[std::size_t(r)] = 1e3 * ms / calls;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  });
  return {*std::max_element(eager.begin(), eager.end()),
          *std::max_element(graph.begin(), graph.end())};
}

int run(int argc, char** argv) {
  CLI::App app{"dcpmla collectives alone: NCCL and the peer communicator"};
  std::vector<int> worlds;
  std::vector<std::string> comm_kinds = {"nccl", "peer"};
  // The LSE (16 KB), the a2a rows and the query at 32K x 32 (2.1, 2.4 MB), ragged (8.8, 9.9 MB).
  std::vector<std::size_t> sizes = {16384, 2105344, 2359296, 8816640, 9879552};
  int calls = 200;
  std::string out_path = "exchange_bench.json", commit;
  if (const char* c = std::getenv("DCPMLA_COMMIT")) commit = c;
  app.add_option("--worlds", worlds, "world sizes (default: 2 and every GPU)");
  app.add_option("--comm", comm_kinds, "communicators: nccl, peer")
      ->check(CLI::IsMember({"nccl", "peer"}));
  app.add_option("--sizes", sizes, "chunk bytes per rank (multiples of 4)");
  app.add_option("--calls", calls, "calls per timing")->check(CLI::Range(10, 100000));
  app.add_option("--out", out_path, "JSON output");
  app.add_option("--commit", commit, "commit recorded with the results");
  CLI11_PARSE(app, argc, argv);
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  int gpus = 0;
  check_cuda(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  if (worlds.empty()) worlds = gpus > 2 ? std::vector<int>{2, gpus} : std::vector<int>{2};
  for (int w : worlds) {
    DCPMLA_REQUIRE(w >= 2 && w <= gpus, ErrorCode::invalid_argument, "--worlds",
                   fmt::format("world sizes in [2, {}]", gpus), std::to_string(w));
  }
  for (std::size_t b : sizes) {
    DCPMLA_REQUIRE(b % 4 == 0 && b > 0, ErrorCode::invalid_argument, "--sizes",
                   "positive multiples of 4 bytes", std::to_string(b));
  }
  const std::size_t max_chunk = *std::max_element(sizes.begin(), sizes.end());
  nlohmann::json doc{{"program", "dcpmla_exchange_bench"},
                     {"commit", commit},
                     {"calls", calls},
                     {"timing",
                      "per call: (last event - first event) / calls on each rank, the slowest "
                      "rank; eager: calls enqueued back to back; graph: the same calls captured "
                      "in one CUDA graph per rank and replayed"},
                     {"results", nlohmann::json::array()}};
  fmt::print("{:>4} {:>5} {:>18} {:>10} {:>10} {:>10} {:>10}\n", "W", "comm", "op", "chunk_KB",
             "eager_us", "graph_us", "GB/s_out");
  for (int w : worlds) {
    const std::vector<int> devices = first_devices(w);
    for (const std::string& kind : comm_kinds) {
      std::unique_ptr<NcclLocalGroup> nccl;
      std::unique_ptr<PeerGroup> peer;
      std::vector<Communicator*> comms;
      if (kind == "peer") {
        peer = std::make_unique<PeerGroup>(devices, max_chunk);
        for (int r = 0; r < w; ++r) comms.push_back(&peer->communicator(r));
      } else {
        nccl = std::make_unique<NcclLocalGroup>(devices);
        for (int r = 0; r < w; ++r) comms.push_back(&nccl->communicator(r));
      }
      std::vector<std::unique_ptr<RankBuffers>> bufs;
      for (int r = 0; r < w; ++r) bufs.push_back(std::make_unique<RankBuffers>(r, w, max_chunk));
      for (Op op : {Op::all_gather, Op::all_to_all_peers, Op::reduce_scatter_sum}) {
        for (std::size_t bytes : sizes) {
          const Timing t = time_calls(comms, bufs, op, bytes, calls);
          // Bytes each rank sends to its peers, over the graph time.
          const double out_gb_s = double(bytes) * (w - 1) / (t.graph_us * 1e3);
          fmt::print("{:>4} {:>5} {:>18} {:>10.1f} {:>10.2f} {:>10.2f} {:>10.1f}\n", w, kind,
                     to_string(op), bytes / 1024.0, t.eager_us, t.graph_us, out_gb_s);
          doc["results"].push_back({{"world", w},
                                    {"comm", kind},
                                    {"op", to_string(op)},
                                    {"chunk_bytes", bytes},
                                    {"eager_us_per_call", t.eager_us},
                                    {"graph_us_per_call", t.graph_us},
                                    {"send_to_peers_GB_per_s_graph", out_gb_s}});
        }
      }
      bufs.clear();
    }
  }
  std::ofstream(out_path) << doc.dump(2) << "\n";
  fmt::print("wrote {}\n", out_path);
  return 0;
}

}  // namespace
}  // namespace dcpmla::bench

int main(int argc, char** argv) {
  try {
    return dcpmla::bench::run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "dcpmla_exchange_bench: {}\n", e.what());
    return 1;
  }
}
