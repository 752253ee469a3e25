// Where the W ranks of a demo run: CPU threads, all simulated on GPU 0 (in-process collectives
// through device memory), or one rank per GPU with NCCL or peer (NVLink store) collectives.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dcpmla/testing/runner.h"

namespace dcpmla::tool {

struct Placement {
  std::string description;                   // e.g. "cuda backend, 2 GPUs over NCCL"
  testing::BackendFactory backend;           // rank -> its backend
  testing::CommunicatorFactory collectives;  // empty: in-process collectives
  bool multi_gpu = false;
  std::shared_ptr<void> resources;  // what the factories refer to (the NCCL or peer group)

  testing::RunResult run(const testing::Scenario& sc, const testing::RunOptions& options) const;
};

// backend "cpu" or "cuda"; gpus 0 (simulate every rank on GPU 0) or W (rank r on GPU r).
// cpu_threads_per_rank applies to the CPU backend. comm picks the collectives of a run on W GPUs:
// "nccl", or "peer" (direct NVLink stores; peer_chunk_bytes is the largest chunk a step moves,
// dcp_exchange_chunk_bytes). Throws Error naming --backend, --gpus or --comm.
Placement place_ranks(const std::string& backend, int world, int gpus, int cpu_threads_per_rank,
                      const std::string& comm = "nccl", std::size_t peer_chunk_bytes = 0);

// Every rank on GPU 0 with in-process collectives: the single-GPU simulation that a multi-GPU
// run is checked against. Throws Error(unsupported) without the CUDA backend.
Placement simulated_on_gpu0();

}  // namespace dcpmla::tool
