#include "placement.h"

#include <fmt/format.h>

#include <cstdlib>

#include "dcpmla/cpu_backend.h"
#include "dcpmla/error.h"
#if DCPMLA_HAVE_CUDA
#include "dcpmla/cuda_backend.h"
#include "dcpmla/peer_comm.h"
#endif
#if DCPMLA_HAVE_NCCL
#include "dcpmla/nccl_comm.h"
#endif

namespace dcpmla::tool {

testing::RunResult Placement::run(const testing::Scenario& sc,
                                  const testing::RunOptions& options) const {
  return collectives ? testing::run_dcp(sc, backend, collectives, options)
                     : testing::run_dcp(sc, backend, options);
}

Placement simulated_on_gpu0() {
#if DCPMLA_HAVE_CUDA
  Placement p;
  p.description = "cuda backend, every rank simulated on GPU 0";
  // Ranks exchange data through device memory with in-process collectives.
  p.backend = [](int) { return make_cuda_backend(0); };
  return p;
#else
  throw Error(ErrorCode::unsupported, "--backend", "cpu (this build has no CUDA backend)", "cuda");
#endif
}

Placement place_ranks(const std::string& backend, int world, int gpus, int cpu_threads_per_rank,
                      const std::string& comm, std::size_t peer_chunk_bytes) {
  DCPMLA_REQUIRE(backend == "cpu" || backend == "cuda", ErrorCode::invalid_argument, "--backend",
                 "cpu or cuda", "'" + backend + "'");
  DCPMLA_REQUIRE(comm == "nccl" || comm == "peer", ErrorCode::invalid_argument, "--comm",
                 "nccl or peer", "'" + comm + "'");
  DCPMLA_REQUIRE(gpus >= 0, ErrorCode::invalid_argument, "--gpus", ">= 0", std::to_string(gpus));
  DCPMLA_REQUIRE(
      gpus > 0 || comm == "nccl", ErrorCode::invalid_argument, "--comm",
      "nccl (the default) unless the ranks run on --gpus W: simulated ranks exchange data "
      "in process",
      "'" + comm + "'");
  if (backend == "cpu") {
    DCPMLA_REQUIRE(gpus == 0, ErrorCode::invalid_argument, "--gpus", "0 with --backend cpu",
                   std::to_string(gpus));
    Placement p;
    p.description = "cpu backend";
    p.backend = [cpu_threads_per_rank](int) { return make_cpu_backend(cpu_threads_per_rank); };
    return p;
  }
  if (gpus == 0) return simulated_on_gpu0();
  DCPMLA_REQUIRE(
      gpus == world, ErrorCode::invalid_argument, "--gpus",
      fmt::format("0 (every rank simulated on GPU 0) or the DCP world {} (one rank per GPU)",
                  world),
      std::to_string(gpus));
#if DCPMLA_HAVE_CUDA
  if (comm == "peer") {
    auto group = std::make_shared<PeerGroup>(first_devices(gpus), peer_chunk_bytes);
    Placement p;
    p.description = fmt::format(
        "cuda backend, {} GPUs with peer collectives (NVLink stores), each rank holding only its "
        "KV shard",
        gpus);
    p.backend = [](int rank) { return make_cuda_backend(rank); };
    p.collectives = [g = group.get()](int rank, Backend&) -> std::unique_ptr<Communicator> {
      return std::make_unique<CommunicatorRef>(g->communicator(rank));
    };
    p.multi_gpu = true;
    p.resources = group;
    return p;
  }
#endif
#if DCPMLA_HAVE_CUDA && DCPMLA_HAVE_NCCL
  // NVLink multicast stays off unless the environment sets it: on shared machines a program
  // using it can take the GPUs out of service, and these collectives do not need it.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  auto group = std::make_shared<NcclLocalGroup>(first_devices(gpus));
  Placement p;
  p.description =
      fmt::format("cuda backend, {} GPUs over NCCL, each rank holding only its KV shard", gpus);
  p.backend = [](int rank) { return make_cuda_backend(rank); };
  p.collectives = [g = group.get()](int rank, Backend&) -> std::unique_ptr<Communicator> {
    return NcclCommunicator::wrap(g->communicator(rank).handle());
  };
  p.multi_gpu = true;
  p.resources = group;
  return p;
#else
  throw Error(ErrorCode::unsupported, "--gpus",
              "0, or --comm peer (this build has no NCCL communicator: configure with "
              "-DDCPMLA_NCCL=ON)",
              std::to_string(gpus));
#endif
}

}  // namespace dcpmla::tool
