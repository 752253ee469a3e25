// The DCP step across GPUs: rank r on GPU r with its own CUDA backend, holding only its shard of
// every request's KV, collectives over NCCL. Each result is checked against the same step
// simulated on one GPU (every rank on GPU 0, in-process collectives) and against the
// double-precision reference. Skipped with fewer than 2 GPUs.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>

#include "gpu_buffers.h"
#include "multigpu_support.h"
#include "testing/test_support.h"

namespace dcpmla {
namespace {

using multigpu_testing::all_on_gpu0;
using multigpu_testing::CommKind;
using multigpu_testing::one_gpu_per_rank;
using multigpu_testing::RankCollectives;
using multigpu_testing::world;
using testing::custom_scenario;
using testing::describe;

// Multi-GPU result vs the single-GPU simulation and the reference. The collectives only move
// data, except the ag_rs reduce-scatter, which for W = 2 is one f32 addition (the same bits in
// either order): so wherever the simulation itself is deterministic, a2a and two-rank ag_rs
// results must be bit-identical to it, and within the tolerance otherwise.
void expect_multigpu_matches(const RankCollectives& ranks, const testing::Scenario& sc,
                             const testing::RunOptions& o) {
  SCOPED_TRACE(testing::describe_run(sc, o));
  const auto multi = testing::run_dcp(sc, one_gpu_per_rank(), ranks.factory(), o);
  // The simulation runs its step plainly: its in-process collectives wait on the host.
  testing::RunOptions plain = o;
  plain.run_step = nullptr;
  const auto simulated = testing::run_dcp(sc, all_on_gpu0(), plain);
  const auto tol = testing::tolerance_for(sc.spec, o);

  const auto vs_reference = testing::compare(sc, multi, testing::run_reference(sc), tol);
  EXPECT_TRUE(vs_reference.pass) << describe(vs_reference);

  const auto vs_simulated = testing::agreement(multi, simulated);
  EXPECT_LE(vs_simulated.max_out_diff, tol.out);
  EXPECT_LE(vs_simulated.max_lse_diff, tol.lse);
  for (std::size_t k = 0; k < simulated.lse.size(); ++k) {
    if (std::isinf(simulated.lse[k])) {
      ASSERT_EQ(multi.lse[k], simulated.lse[k]) << "(row, head) " << k;
    }
  }
  const bool exact_collectives = o.combine == Combine::a2a || sc.spec.world == 2;
  if (exact_collectives && !vs_simulated.bit_identical) {
    // Only a difference the simulation does not show against itself is the collectives' fault.
    const bool deterministic =
        testing::agreement(simulated, testing::run_dcp(sc, all_on_gpu0(), plain)).bit_identical;
    EXPECT_FALSE(deterministic) << "not bit-identical to the deterministic simulation: max|dO| "
                                << vs_simulated.max_out_diff << " max|dLSE| "
                                << vs_simulated.max_lse_diff;
  }
}

// Every case runs over NCCL and over the peer communicator (direct NVLink stores).
class DcpMultiGpu : public ::testing::TestWithParam<CommKind> {
 protected:
  void SetUp() override {
    DCPMLA_REQUIRE_GPUS_OR_CPU_RUN(2);
    if (multigpu_testing::on_cpu() && GetParam() == CommKind::peer) {
      GTEST_SKIP() << "the peer communicator needs GPUs (on the CPU: in-process collectives)";
    }
    ranks_ = std::make_unique<RankCollectives>(world(), GetParam());
  }
  const RankCollectives& ranks() const { return *ranks_; }
  testing::RunResult run(const testing::Scenario& sc, const testing::RunOptions& o) const {
    return testing::run_dcp(sc, one_gpu_per_rank(), ranks_->factory(), o);
  }

 private:
  std::unique_ptr<RankCollectives> ranks_;
};

// Random ragged speculative batches: Q from 1 + 0..K drafts, log-uniform contexts, a request
// shorter than W + Q, head counts of real models, bf16 and fp8 caches, both combines, padding
// rows, several split policies and interleaves.
TEST_P(DcpMultiGpu, RandomRaggedBatchesMatchSimulationAndReference) {
  std::mt19937_64 rng(4242);
  auto pick = [&](std::initializer_list<int> v) { return *(v.begin() + rng() % v.size()); };
  for (int i = 0; i < 12; ++i) {
    testing::ScenarioSpec s;
    s.world = world();
    do {
      s.heads = pick({16, 32, 64, 128});
    } while (s.heads % s.world != 0);
    s.block_size = pick({16, 64});
    s.interleave = pick({1, 1, 2, 4});
    s.kv_dtype = i % 2 ? DType::fp8_e4m3 : DType::bf16;
    s.q_dtype = DType::bf16;
    const bool many_heads = s.heads >= 64;
    s.requests = 1 + int(rng() % (many_heads ? 4 : 8));
    s.max_drafts = pick({0, 3, 7});
    s.max_context = s.max_drafts + 1 + std::int64_t(rng() % (many_heads ? 700 : 3000));
    s.short_request = rng() % 2 == 0;
    s.full_mask_fraction = i % 5 == 4 ? 0.3 : 0.0;
    s.padding_rows = i % 3 == 0 ? 1 + int(rng() % 6) : 0;
    s.seed = 9000 + i;
    testing::RunOptions o;
    o.combine = (i / 2) % 2 ? Combine::a2a : Combine::ag_rs;
    if (o.combine == Combine::a2a && i % 4 == 3) o.combine_payload = DType::bf16;  // over NCCL too
    if (const int workers = pick({0, 32, 264}); workers > 0)
      o.model = DeviceModel{workers, 64, 256};
    expect_multigpu_matches(ranks(), testing::make_scenario(s), o);
    if (HasFailure()) return;
  }
}

// Rows that see nothing on a rank, ranks that hold nothing of a request (T < W) or of the whole
// batch, and padding rows: exactly O = 0, LSE = -inf where the reference is empty.
TEST_P(DcpMultiGpu, EmptyRanksAndPaddingRows) {
  struct Shape {
    std::vector<int> q;
    std::vector<std::int64_t> t;
  };
  const std::vector<Shape> shapes = {
      {{1, 2, 3}, {1, 3, 5}},  // T < W + Q
      {{1}, {1}},              // one token: every rank but 0 holds nothing
      {{4, 1, 8}, {4, 2, 9}},  // T == Q
  };
  int seed = 70;
  for (const Shape& sh : shapes) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      for (Combine combine : {Combine::ag_rs, Combine::a2a}) {
        testing::ScenarioSpec spec;
        spec.world = world();
        spec.heads = 8 * world();
        spec.block_size = 1;
        spec.kv_dtype = kv;
        spec.seed = seed++;
        testing::RunOptions o;
        o.combine = combine;
        o.kv_chunk_blocks = seed % 2;
        expect_multigpu_matches(ranks(), custom_scenario(spec, sh.q, sh.t, {}, /*padding=*/3), o);
        if (HasFailure()) return;
      }
    }
  }
}

// The SPEC's batches (testing::spec_batches), 128 heads as DeepSeek-V3 has.
TEST_P(DcpMultiGpu, SpecVectorBatches) {
  int seed = 120;
  for (const testing::SpecBatch& v : testing::spec_batches()) {
    for (DType kv : {DType::bf16, DType::fp8_e4m3}) {
      for (Combine combine : {Combine::ag_rs, Combine::a2a}) {
        testing::ScenarioSpec spec;
        spec.world = world();
        spec.heads = 128;
        spec.block_size = 64;
        spec.kv_dtype = kv;
        spec.seed = seed++;
        testing::RunOptions o;
        o.combine = combine;
        expect_multigpu_matches(ranks(), custom_scenario(spec, v.q, v.t, v.masks, 2), o);
        if (HasFailure()) return;
      }
    }
  }
}

// Across GPUs too, flattened single-token rows and the native form agree bit for bit (same KV
// split), and seeing future drafts fails the comparison.
TEST_P(DcpMultiGpu, FlattenedMatchesNativeAndTheNegativeControlFails) {
  testing::ScenarioSpec spec;
  spec.world = world();
  spec.heads = 16 * world();
  spec.block_size = 16;
  spec.seed = 5;
  const testing::Scenario sc = custom_scenario(spec, {8, 2, 1, 5}, {700, 40, 3, 1200}, {}, 1);
  for (Combine combine : {Combine::ag_rs, Combine::a2a}) {
    testing::RunOptions o;
    o.combine = combine;
    o.kv_chunk_blocks = 4;
    testing::RunOptions flat = o;
    flat.flatten = true;
    const auto native = run(sc, o);
    const auto flattened = run(sc, flat);
    EXPECT_TRUE(testing::agreement(native, flattened).bit_identical) << to_string(combine);

    testing::RunOptions future = o;
    future.see_future = true;
    const auto bad = testing::compare(sc, run(sc, future), testing::run_reference(sc),
                                      testing::tolerance_for(spec));
    EXPECT_FALSE(bad.pass) << to_string(combine);
    EXPECT_GT(bad.max_out_error, 0.05) << to_string(combine);
  }
}

// What an engine does: each rank captures its whole step (query gather, decode, combine) in a
// CUDA graph once and replays it. Run once plainly first (that uploads the plan, outside the
// capture), then captured and replayed three times; the result must be the plain step's.
using gpu_testing::check_cuda;

void capture_and_replay(int, const std::function<void(Stream)>& step) {
  cudaStream_t s = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  try {
    step(s);
    check_cuda(cudaStreamSynchronize(s), "plain step");
    check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
    step(s);
    check_cuda(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
    check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (int i = 0; i < 3; ++i) check_cuda(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    check_cuda(cudaStreamSynchronize(s), "replays");
  } catch (...) {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    throw;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST_P(DcpMultiGpu, WholeStepCapturedInACudaGraphAndReplayed) {
  if (multigpu_testing::on_cpu()) GTEST_SKIP() << "CUDA graphs need the CUDA backend";
  int seed = 510;
  for (Combine combine : {Combine::ag_rs, Combine::a2a}) {
    for (DType payload : {DType::f32, DType::bf16}) {
      if (combine == Combine::ag_rs && payload == DType::bf16) continue;
      testing::ScenarioSpec spec;
      spec.world = world();
      spec.heads = 16 * world();
      spec.requests = 6;
      spec.max_drafts = 5;
      spec.max_context = 2000;
      spec.padding_rows = 3;
      spec.seed = seed++;
      testing::RunOptions o;
      o.combine = combine;
      o.combine_payload = payload;
      o.model = DeviceModel{64, 64, 256};  // split requests: the split merge is captured too
      o.run_step = capture_and_replay;
      expect_multigpu_matches(ranks(), testing::make_scenario(spec), o);
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, DcpMultiGpu,
                         ::testing::Values(CommKind::nccl, CommKind::peer),
                         [](const ::testing::TestParamInfo<CommKind>& info) {
                           return std::string(multigpu_testing::to_string(info.param));
                         });

}  // namespace
}  // namespace dcpmla
