// One rank of a benchmarked DCP step: rank r on GPU r with its own CUDA backend and stream, a
// cache holding only its shard of every request (random bf16, never zeros), its plan, the DCP
// workspace and this rank's heads of the query.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "dcpmla/backend.h"
#include "dcpmla/dcp.h"
#include "dcpmla/plan.h"
#include "dcpmla/testing/observed.h"
#include "grid.h"

namespace dcpmla::bench {

class RankStep {
 public:
  // target_work_items 0: split the KV as the CUDA backend's device model says for this rank's
  // shard.
  RankStep(int rank, int world, const Shape& shape, const ShapeBatch& batch, int block_size,
           int target_work_items);
  RankStep(const RankStep&) = delete;
  RankStep& operator=(const RankStep&) = delete;
  ~RankStep();

  // Enqueues one step on this rank's stream (no host synchronisation); with an observer, through
  // the observed backend and communicator.
  void run(Communicator& comm, Combine combine, DType payload, testing::CallObserver* observer);
  void synchronize();
  Stream stream() const { return stream_; }
  // Downloads this rank's LSE: every row sees keys on every rank here, so all must be finite.
  bool output_finite();

  std::int64_t rows() const { return plan_.num_rows; }
  // Bytes of KV this rank reads per step (each request's local shard once).
  double kv_bytes() const;
  std::size_t work_items() const { return plan_.work.size(); }

 private:
  int rank_;
  std::unique_ptr<Backend> backend_;  // first: the buffers below free through it
  cudaStream_t stream_ = nullptr;
  Plan plan_;
  KvCacheRef cache_ref_;
  DeviceBuffer cache_, block_table_, q_, out_, lse_;
  std::unique_ptr<DcpWorkspace> workspace_;
  DcpStepArgs args_;
};

}  // namespace dcpmla::bench
