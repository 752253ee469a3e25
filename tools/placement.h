// Where the W ranks of a demo run: CPU threads, all simulated on GPU 0 (in-process collectives
// through device memory), or one rank per GPU with NCCL collectives.
#pragma once

#include <memory>
#include <string>

#include "dcpmla/sim/runner.h"

namespace dcpmla::tool {

struct Placement {
  std::string description;               // e.g. "cuda backend, 2 GPUs over NCCL"
  sim::BackendFactory backend;           // rank -> its backend
  sim::CommunicatorFactory collectives;  // empty: in-process collectives
  bool multi_gpu = false;
  std::shared_ptr<void> resources;  // what the factories refer to (the NCCL group)

  sim::RunResult run(const sim::Scenario& sc, const sim::RunOptions& options) const;
};

// backend "cpu" or "cuda"; gpus 0 (simulate every rank on GPU 0) or W (rank r on GPU r, NCCL).
// cpu_threads_per_rank applies to the CPU backend. Throws Error naming --backend or --gpus.
Placement place_ranks(const std::string& backend, int world, int gpus, int cpu_threads_per_rank);

// Every rank on GPU 0 with in-process collectives: the single-GPU simulation that a multi-GPU
// run is checked against. Throws Error(unsupported) without the CUDA backend.
Placement simulated_on_gpu0();

}  // namespace dcpmla::tool
