// dcp_step driven directly: W = 1 equals the plain decode, both combines agree, a workspace is
// reusable across steps of different batches, and bf16 outputs are the rounded fp32 ones.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dcpmla/comm.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/dcp.h"
#include "dcpmla/error.h"
#include "dcpmla/testing/observed.h"
#include "dcpmla/testing/run_ranks.h"
#include "dcpmla/testing/runner.h"
#include "testing/test_support.h"

namespace dcpmla {
namespace {

using testing::custom_scenario;

// A one-rank group that fails the test on any collective: W = 1 steps must not need one.
class NoCollectives final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void all_gather(const void*, void*, std::size_t, DType, Stream) override { fail("all_gather"); }
  void reduce_scatter_sum(const float*, float*, std::size_t, Stream) override {
    fail("reduce_scatter_sum");
  }
  void all_to_all(const void*, void*, std::size_t, DType, Stream) override { fail("all_to_all"); }

 private:
  static void fail(const char* what) { ADD_FAILURE() << "W = 1 step called " << what; }
};

struct StepOut {
  std::vector<float> out;  // [rows, H, 512] assembled from all ranks
  std::vector<float> lse;  // [rows, H]
};

// Runs the given scenarios one after the other as DCP steps on W rank threads, every rank
// reusing one DcpWorkspace sized for `max_rows` rows and `decode_bytes` of split workspace.
std::vector<StepOut> run_steps(const std::vector<testing::Scenario>& steps, Combine combine,
                               const testing::PlanChoice& choice, DType out_dtype,
                               std::int64_t max_rows, std::size_t decode_bytes,
                               DType payload = DType::f32,
                               std::vector<testing::CallObserver*> observers = {}) {
  const auto& spec0 = steps[0].spec;
  const int W = spec0.world, H = spec0.heads, Hl = H / W;
  std::vector<StepOut> results(steps.size());
  for (std::size_t s = 0; s < steps.size(); ++s) {
    results[s].out.assign(std::size_t(steps[s].batch.rows()) * H * kLatentDim, NAN);
    results[s].lse.assign(std::size_t(steps[s].batch.rows()) * H, NAN);
  }
  InProcessGroup group(W);
  const auto errors = testing::rank_failures(W, [&](int r) {
    auto be = make_cpu_backend(1);
    InProcessCommunicator in_process(group, r);
    NoCollectives none;
    Communicator& comm = W == 1 ? static_cast<Communicator&>(none) : in_process;
    DcpWorkspace ws(*be, W, max_rows, Hl, DType::f32, decode_bytes);
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const auto& sc = steps[s];
      const auto& spec = sc.spec;
      const Sharding sh{W, r, spec.interleave};
      HostKvCache cache = testing::rank_cache(sc, r);
      const Plan plan = make_plan(
          sc.batch, {sh, H, spec.block_size, sc.num_blocks, choice.model, choice.kv_chunk_blocks});
      const std::int64_t rows = plan.num_rows;
      std::vector<float> q_local(std::size_t(rows) * Hl * kHeadDim);
      for (std::int64_t i = 0; i < rows; ++i) {
        std::memcpy(&q_local[std::size_t(i) * Hl * kHeadDim],
                    &sc.q[(std::size_t(i) * H + std::size_t(r) * Hl) * kHeadDim],
                    std::size_t(Hl) * kHeadDim * 4);
      }
      std::vector<std::uint8_t> out(std::size_t(rows) * Hl * kLatentDim * dtype_size(out_dtype));
      std::vector<float> lse(std::size_t(rows) * Hl);
      DcpStepArgs a;
      a.plan = &plan;
      a.q_local = TensorRef(q_local.data(), DType::f32, {rows, Hl, kHeadDim});
      a.cache = cache.ref();
      a.block_table = TensorRef(sc.batch.block_table.data(), DType::i32,
                                {sc.batch.num_requests(), sc.batch.max_blocks});
      a.out = TensorRef(out.data(), out_dtype, {rows, Hl, kLatentDim});
      a.lse = TensorRef(lse.data(), DType::f32, {rows, Hl});
      a.softmax_scale = spec.softmax_scale;
      a.combine = combine;
      a.combine_payload = payload;
      if (observers.empty()) {
        dcp_step(*be, comm, ws, a, nullptr);
      } else {
        testing::CallObserver& observer = *observers[std::size_t(r)];
        testing::ObservedBackend observed_be(*be, observer);
        testing::ObservedCommunicator observed_comm(comm, observer);
        dcp_step(observed_be, observed_comm, ws, a, nullptr);
      }
      for (std::int64_t i = 0; i < rows; ++i) {
        for (int h = 0; h < Hl; ++h) {
          const std::size_t src = std::size_t(i) * Hl + h;
          const std::size_t dst = std::size_t(i) * H + std::size_t(r) * Hl + h;
          results[s].lse[dst] = lse[src];
          for (int d = 0; d < kLatentDim; ++d) {
            float v;
            if (out_dtype == DType::f32) {
              std::memcpy(&v, &out[(src * kLatentDim + d) * 4], 4);
            } else {
              std::uint16_t h16;
              std::memcpy(&h16, &out[(src * kLatentDim + d) * 2], 2);
              v = bf16_to_float(h16);
            }
            results[s].out[dst * kLatentDim + d] = v;
          }
        }
      }
    }
  });
  for (int r = 0; r < W; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return results;
}

testing::ScenarioSpec spec_for(int W, int H, std::uint64_t seed) {
  testing::ScenarioSpec s;
  s.world = W;
  s.heads = H;
  s.block_size = 16;
  s.kv_dtype = DType::bf16;
  s.q_dtype = DType::f32;
  s.seed = seed;
  return s;
}

// (run_steps gives W = 1 a communicator that fails on any collective: the step decodes directly.)
TEST(DcpStep, SingleRankEqualsThePlainDecode) {
  const auto sc = custom_scenario(spec_for(1, 4, 1), {8, 1, 3}, {100, 40, 3}, {}, 2);
  for (Combine c : {Combine::ag_rs, Combine::a2a}) {
    for (int k : {0, 1}) {
      const testing::PlanChoice lim{.kv_chunk_blocks = k};
      const auto step = run_steps({sc}, c, lim, DType::f32, sc.batch.rows(), 1 << 22)[0];
      const auto direct = testing::decode_rank(sc, 0, lim);
      ASSERT_EQ(step.out.size(), direct.out.size());
      for (std::size_t i = 0; i < step.out.size(); ++i) {
        ASSERT_EQ(step.out[i], direct.out[i]) << to_string(c) << " " << i;
      }
      for (std::size_t i = 0; i < step.lse.size(); ++i) {
        ASSERT_EQ(step.lse[i], direct.lse[i]) << to_string(c) << " " << i;
      }
    }
  }
}

// The a2a combine with a bf16 payload: the LSE travels in fp32 (identical), O within one bf16
// rounding of the fp32-payload result, and the reference comparison passes with the tolerance
// that accounts for it. ag_rs (which sums in its collective) refuses it.
TEST(DcpStep, Bf16PayloadOfTheA2aCombine) {
  for (int W : {2, 4}) {
    auto spec = spec_for(W, 4 * W, 40 + W);  // f32 query and output: the payload is the only bf16
    const auto sc = custom_scenario(spec, {8, 1, 4, 2}, {100, 40, 5, 2}, {}, 1);
    testing::RunOptions f32_payload;
    f32_payload.combine = Combine::a2a;
    testing::RunOptions bf16_payload = f32_payload;
    bf16_payload.combine_payload = DType::bf16;
    const auto f = testing::run_dcp(sc, testing::cpu1(), f32_payload);
    const auto b = testing::run_dcp(sc, testing::cpu1(), bf16_payload);
    EXPECT_EQ(b.lse, f.lse) << "W = " << W;
    EXPECT_NE(b.out, f.out) << "W = " << W << ": the payload was not rounded";
    for (std::size_t i = 0; i < f.out.size(); ++i) {
      // |sum_r w_r (round(o_r) - o_r)| <= 2^-8 max_r |o_r| (bf16 unit roundoff), |o_r| < 8.
      ASSERT_NEAR(b.out[i], f.out[i], 8.0 / 256) << "W = " << W << " element " << i;
    }
    const auto cmp = testing::compare(sc, b, testing::run_reference(sc),
                                      testing::tolerance_for(spec, bf16_payload));
    EXPECT_TRUE(cmp.pass) << testing::describe(cmp);

    testing::RunOptions bad = bf16_payload;
    bad.combine = Combine::ag_rs;
    try {
      testing::run_dcp(sc, testing::cpu1(), bad);
      ADD_FAILURE() << "ag_rs accepted a bf16 payload";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_EQ(e.argument(), "combine_payload");
    }
  }
}

TEST(DcpStep, BothCombinesAgreeAndMatchTheReference) {
  for (int W : {2, 3, 4}) {
    auto spec = spec_for(W, 2 * W, 10 + W);
    const auto sc = custom_scenario(spec, {8, 1, 4, 2}, {100, 40, 5, 2}, {}, 1);
    const auto ag = run_steps({sc}, Combine::ag_rs, {}, DType::f32, 64, 1 << 20)[0];
    const auto a2a = run_steps({sc}, Combine::a2a, {}, DType::f32, 64, 1 << 20)[0];
    for (std::size_t i = 0; i < ag.out.size(); ++i) ASSERT_NEAR(ag.out[i], a2a.out[i], 1e-6);
    for (std::size_t i = 0; i < ag.lse.size(); ++i) {
      if (std::isinf(ag.lse[i])) {
        ASSERT_EQ(ag.lse[i], a2a.lse[i]);
      } else {
        ASSERT_NEAR(ag.lse[i], a2a.lse[i], 1e-6);
      }
    }
    const auto want = testing::run_reference(sc);
    const auto tol = testing::tolerance_for(sc.spec);
    for (const auto* got : {&ag, &a2a}) {
      const auto cmp = testing::compare(sc, {got->out, got->lse}, want, tol);
      EXPECT_TRUE(cmp.pass) << "W " << W << ": " << testing::describe(cmp);
    }
  }
}

TEST(DcpStep, WorkspaceIsReusableAcrossBatches) {
  auto spec = spec_for(2, 4, 20);
  std::vector<testing::Scenario> steps = {
      custom_scenario(spec, {8, 1}, {100, 40}),
      custom_scenario(spec, {3}, {3}, {}, 4),
      custom_scenario(spec, {2, 2, 5}, {300, 17, 60}, {Mask::causal, Mask::full, Mask::causal}),
  };
  for (Combine c : {Combine::ag_rs, Combine::a2a}) {
    const testing::PlanChoice lim{.kv_chunk_blocks = 1};
    const auto reused = run_steps(steps, c, lim, DType::f32, 16, 1 << 22);
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const auto fresh = run_steps({steps[s]}, c, lim, DType::f32, steps[s].batch.rows(), 1 << 22);
      EXPECT_EQ(std::memcmp(reused[s].out.data(), fresh[0].out.data(), fresh[0].out.size() * 4), 0)
          << "step " << s;
      EXPECT_EQ(std::memcmp(reused[s].lse.data(), fresh[0].lse.data(), fresh[0].lse.size() * 4), 0)
          << "step " << s;
      // and the testing runner (which builds its own workspace) gives the same bits
      testing::RunOptions o;
      o.combine = c;
      o.model = lim.model;
      o.kv_chunk_blocks = lim.kv_chunk_blocks;
      const auto sim_run = testing::run_dcp(steps[s], testing::cpu1(), o);
      EXPECT_TRUE(testing::agreement(sim_run, {fresh[0].out, fresh[0].lse}).bit_identical);
    }
  }
}

TEST(DcpStep, Bf16OutputIsTheRoundedFp32Output) {
  const auto sc = custom_scenario(spec_for(2, 4, 40), {8, 2}, {100, 40});
  for (Combine c : {Combine::ag_rs, Combine::a2a}) {
    const auto f32 = run_steps({sc}, c, {}, DType::f32, 10, 0)[0];
    const auto b16 = run_steps({sc}, c, {}, DType::bf16, 10, 0)[0];
    EXPECT_EQ(f32.lse, b16.lse);
    for (std::size_t i = 0; i < f32.out.size(); ++i) {
      ASSERT_EQ(b16.out[i], bf16_to_float(float_to_bf16(f32.out[i]))) << i;
    }
  }
}

// The step with the decode reading the gathered query in place and (a2a) writing the send rows
// itself matches the reference for W = 2, 4 and 8, with either payload, split requests, padding
// rows and ranks holding no key of a request included.
TEST(DcpStep, FusedLayoutsMatchTheReference) {
  testing::PlanChoice split;
  split.kv_chunk_blocks = 2;
  for (int W : {2, 4, 8}) {
    const auto sc = custom_scenario(spec_for(W, 8, 45 + W), {8, 2, 1}, {300, 40, 7}, {}, 3);
    const auto want = testing::run_reference(sc);
    for (Combine c : {Combine::ag_rs, Combine::a2a}) {
      for (DType payload : {DType::f32, DType::bf16}) {
        if (c == Combine::ag_rs && payload == DType::bf16) continue;
        const auto got = run_steps({sc}, c, split, DType::f32, 16, 1 << 22, payload)[0];
        testing::RunOptions o;
        o.combine = c;
        o.combine_payload = payload;
        const auto cmp =
            testing::compare(sc, {got.out, got.lse}, want, testing::tolerance_for(sc.spec, o));
        EXPECT_TRUE(cmp.pass) << "W " << W << " " << to_string(c) << " " << to_string(payload)
                              << ": " << testing::describe(cmp);
      }
    }
  }
}

// The kernels and collectives a step enqueues, in order, on every rank: no layout launch (unpack,
// pack) between the collectives, and no collective at W = 1.
TEST(DcpStep, EnqueuesOneDecodeAndTheCombinesCollectives) {
  struct Recorder final : testing::CallObserver {
    std::vector<std::string> calls;
    void before(const testing::Call& call, Stream s) override {
      EXPECT_EQ(s, nullptr);
      calls.push_back(testing::to_string(call.op));
    }
  };
  const std::vector<std::string> ag_rs = {
      "all_gather", "decode", "all_gather", "combine_rescale", "reduce_scatter_sum", "convert"};
  const std::vector<std::string> a2a = {"all_gather", "decode", "all_to_all_peers",
                                        "combine_merge"};
  const auto sc2 = custom_scenario(spec_for(2, 4, 51), {8, 1}, {100, 40});
  for (Combine c : {Combine::ag_rs, Combine::a2a}) {
    for (DType payload : {DType::f32, DType::bf16}) {
      if (c == Combine::ag_rs && payload == DType::bf16) continue;
      Recorder r0, r1;
      const auto observed =
          run_steps({sc2}, c, {}, DType::f32, 16, 1 << 20, payload, {&r0, &r1})[0];
      EXPECT_EQ(r0.calls, c == Combine::ag_rs ? ag_rs : a2a) << to_string(c);
      EXPECT_EQ(r1.calls, r0.calls) << to_string(c);
      const auto plain = run_steps({sc2}, c, {}, DType::f32, 16, 1 << 20, payload)[0];
      EXPECT_EQ(observed.out, plain.out);
      EXPECT_EQ(observed.lse, plain.lse);
    }
  }
  Recorder one;
  run_steps({custom_scenario(spec_for(1, 4, 52), {8, 1}, {100, 40})}, Combine::a2a, {}, DType::f32,
            16, 1 << 20, DType::f32, {&one});
  EXPECT_EQ(one.calls, std::vector<std::string>{"decode"});
}

}  // namespace
}  // namespace dcpmla
