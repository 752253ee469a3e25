// One rank of a multi-process NCCL group, for processes_test: joins the group through the unique
// id (from a file, which rank 0 may create, or from an environment variable), runs the three
// collectives of a DCP step on known data and checks the results. Exit status 0 = all correct.
//
//   nccl_rank_process --world W --rank R --device D (--id-file PATH [--create-id] | --id-env VAR)
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "dcpmla/nccl_comm.h"

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
std::vector<T> run_on_device(const std::vector<T>& input, std::size_t out_elements,
                             const std::function<void(const void*, void*)>& collective) {
  void *in = nullptr, *out = nullptr;
  check_cuda(cudaMalloc(&in, input.size() * sizeof(T)), "cudaMalloc");
  check_cuda(cudaMalloc(&out, out_elements * sizeof(T)), "cudaMalloc");
  check_cuda(cudaMemcpy(in, input.data(), input.size() * sizeof(T), cudaMemcpyHostToDevice),
             "upload");
  collective(in, out);
  std::vector<T> result(out_elements);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check_cuda(cudaMemcpy(result.data(), out, out_elements * sizeof(T), cudaMemcpyDeviceToHost),
             "download");
  cudaFree(in);
  cudaFree(out);
  return result;
}

int run(int world, int rank, int device, const std::string& id_file, bool create_id,
        const std::string& id_env) {
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
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok && failures++ < 5) fmt::print(stderr, "rank {}: {}\n", rank, what);
  };

  // all_gather of i32: element i of rank q is q * 1000000 + i.
  const std::size_t n = 1000;
  std::vector<std::int32_t> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = std::int32_t(rank * 1000000 + i);
  const auto gathered = run_on_device(mine, n * world, [&](const void* in, void* out) {
    comm->all_gather(in, out, n, dcpmla::DType::i32, nullptr);
  });
  for (int q = 0; q < world; ++q)
    for (std::size_t i = 0; i < n; ++i)
      expect(gathered[q * n + i] == std::int32_t(q * 1000000 + i),
             fmt::format("all_gather element {} of rank {}", i, q));

  // reduce_scatter_sum: send chunk c element i of rank q is q + c + i % 5 (exact sums).
  std::vector<float> send(n * world);
  for (int c = 0; c < world; ++c)
    for (std::size_t i = 0; i < n; ++i) send[c * n + i] = float(rank + c + int(i % 5));
  const auto summed = run_on_device(send, n, [&](const void* in, void* out) {
    comm->reduce_scatter_sum(static_cast<const float*>(in), static_cast<float*>(out), n, nullptr);
  });
  for (std::size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int q = 0; q < world; ++q) want += float(q + rank + int(i % 5));
    expect(summed[i] == want,
           fmt::format("reduce_scatter element {}: {} != {}", i, summed[i], want));
  }

  // all_to_all of bf16 bits: chunk `to` element i of rank `from` is from * 256 + to * 16 + i % 16.
  std::vector<std::uint16_t> out(n * world);
  for (int to = 0; to < world; ++to)
    for (std::size_t i = 0; i < n; ++i)
      out[to * n + i] = std::uint16_t(rank * 256 + to * 16 + i % 16);
  const auto routed = run_on_device(out, n * world, [&](const void* in, void* o) {
    comm->all_to_all(in, o, n, dcpmla::DType::bf16, nullptr);
  });
  for (int from = 0; from < world; ++from)
    for (std::size_t i = 0; i < n; ++i)
      expect(routed[from * n + i] == std::uint16_t(from * 256 + rank * 16 + i % 16),
             fmt::format("all_to_all element {} from rank {}", i, from));

  fmt::print("rank {} of {} on device {}: {}\n", rank, world, device,
             failures ? fmt::format("{} FAILURES", failures) : std::string("ok"));
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"one rank of a multi-process NCCL group (dcpmla test helper)"};
  int world = 0, rank = -1, device = -1;
  std::string id_file, id_env;
  bool create_id = false;
  app.add_option("--world", world)->required();
  app.add_option("--rank", rank)->required();
  app.add_option("--device", device)->required();
  app.add_option("--id-file", id_file);
  app.add_flag("--create-id", create_id);
  app.add_option("--id-env", id_env);
  CLI11_PARSE(app, argc, argv);
  // NVLink multicast stays off unless the environment sets it (shared machines).
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  try {
    return run(world, rank, device, id_file, create_id, id_env);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rank {}: error: {}\n", rank, e.what());
    return 2;
  }
}
