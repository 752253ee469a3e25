// `dcpmla demo`: a realistic ragged speculative batch across W DCP ranks (simulated as threads,
// or one per GPU over NCCL), verified against the double-precision reference, plus the
// flattened-vs-native agreement and the negative control. Across GPUs the result is also checked
// against the same step simulated on one GPU.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <thread>

#include "cli.h"
#include "commands.h"
#include "dcpmla/cpu_backend.h"
#include "dcpmla/dcp.h"
#include "dcpmla/error.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"
#include "placement.h"

namespace dcpmla::tool {
namespace {

struct DemoOptions {
  testing::ScenarioSpec spec;
  std::string dtype = "bf16";
  std::string combine = "ag_rs";
  std::string backend = "cpu";
  int gpus = 0;
  std::string comm = "nccl";
  int threads = 0;
};

// Upper bounds of what a demo allocates (the global latents, W rank caches, the query and a few
// outputs) and of the reference's work, checked before anything is allocated.
void check_demo_size(const testing::ScenarioSpec& spec) {
  const double W = spec.world, B = spec.requests, T = double(spec.max_context);
  const double rows = B * (spec.max_drafts + 1.0) + spec.padding_rows, H = spec.heads;
  const double blocks_per_rank = B * (std::ceil(T / W / spec.block_size) + 1) + spec.extra_blocks;
  const double bytes = B * T * kHeadDim * 4.0 +
                       W * blocks_per_rank * spec.block_size * kHeadDim * 4.0 +
                       rows * H * (kHeadDim + 8.0 * kLatentDim) * 4.0;
  const double work = rows * H * T * (kHeadDim + kLatentDim);
  check_run_size("a demo",
                 {{"--max-context", T, 4096},
                  {"--requests", B, 8},
                  {"--heads", H, 16},
                  {"--block-size", double(spec.block_size), 64},
                  {"--max-drafts", spec.max_drafts + 1.0, 8},
                  {"--dcp", W, 2}},
                 bytes, work, 2e12);
}

// The scenario's checks name its fields; a demo's user typed the options that set them.
testing::Scenario scenario_of(const testing::ScenarioSpec& spec) {
  static const std::map<std::string, std::string> kOption = {{"world", "--dcp"},
                                                             {"interleave", "--interleave"},
                                                             {"heads", "--heads"},
                                                             {"requests", "--requests"},
                                                             {"max_drafts", "--max-drafts"},
                                                             {"block_size", "--block-size"},
                                                             {"max_context", "--max-context"}};
  try {
    return testing::make_scenario(spec);
  } catch (const Error& e) {
    const auto option = kOption.find(e.argument());
    if (option == kOption.end()) throw;
    throw Error(e.code(), option->second, e.expected(), e.actual());
  }
}

int run_demo(DemoOptions o) {
  auto& spec = o.spec;
  spec.kv_dtype = parse_dtype(o.dtype, "--dtype");
  // The query (and output) is fp32 next to an fp32 cache and bf16 otherwise.
  spec.q_dtype = spec.kv_dtype == DType::f32 ? DType::f32 : DType::bf16;
  const Combine combine = parse_combine(o.combine, "--combine");
  check_demo_size(spec);
  const testing::Scenario sc = scenario_of(spec);

  const int per_rank = std::max(
      1, (o.threads > 0 ? o.threads : int(std::thread::hardware_concurrency())) / spec.world);
  const Placement ranks =
      place_ranks(o.backend, spec.world, o.gpus, per_rank, o.comm,
                  dcp_exchange_chunk_bytes(spec.world, sc.batch.rows(),
                                           std::max(1, spec.heads / spec.world), spec.q_dtype));
  testing::RunOptions run;
  run.combine = combine;

  fmt::print(
      "dcpmla demo ({}): W={} I={} H={} requests={} max drafts={} block size={} kv {} "
      "q/out {} combine {} seed {}\n",
      ranks.description, spec.world, spec.interleave, spec.heads, spec.requests, spec.max_drafts,
      spec.block_size, to_string(spec.kv_dtype), to_string(spec.q_dtype), to_string(combine),
      spec.seed);
  fmt::print(
      "batch: {} tokens in {} requests ({}), {} cache blocks per rank, unused pages NaN, "
      "block ids permuted\n",
      sc.batch.real_tokens(), sc.batch.num_requests(),
      sc.batch.real_tokens() == std::int64_t(sc.batch.num_requests()) *
                                    [&] {
                                      int m = 0;
                                      for (int b = 0; b < sc.batch.num_requests(); ++b)
                                        m = std::max(m, sc.batch.q_len(b));
                                      return m;
                                    }()
          ? "uniform"
          : "ragged",
      sc.num_blocks);

  const auto got = ranks.run(sc, run);
  const auto want = testing::run_reference(sc);
  const auto tol = testing::tolerance_for(spec);
  const auto cmp = testing::compare(sc, got, want, tol);

  fmt::print("\n{:>4} {:>3} {:>6} {:>12} {:>12} {:>6}\n", "req", "Q", "T", "max|dO|", "max|dLSE|",
             "result");
  for (std::size_t b = 0; b < cmp.requests.size(); ++b) {
    const auto& r = cmp.requests[b];
    fmt::print("{:>4} {:>3} {:>6} {:>12.3e} {:>12.3e} {:>6}{}\n", b, r.q_len, r.total_len,
               r.max_out_error, r.max_lse_error, r.pass ? "pass" : "FAIL",
               r.empty_rows_exact ? "" : "  (empty rows not exactly O=0, LSE=-inf)");
  }
  fmt::print("tolerance: |dO| <= {:.1e}, |dLSE| <= {:.1e}\n\n", tol.out, tol.lse);

  // Across GPUs: the same step with every rank simulated on GPU 0 (same plans, same kernels; the
  // collectives move the same bytes) must agree within the tolerance.
  bool across_ok = true;
  if (ranks.multi_gpu) {
    const auto one_gpu = testing::agreement(got, simulated_on_gpu0().run(sc, run));
    across_ok = one_gpu.max_out_diff <= tol.out && one_gpu.max_lse_diff <= tol.lse;
    fmt::print("{} GPUs vs one-GPU simulation: max|dO| = {:.3e}, max|dLSE| = {:.3e}, {} -> {}\n",
               spec.world, one_gpu.max_out_diff, one_gpu.max_lse_diff,
               one_gpu.bit_identical ? "bit-identical" : "not bit-identical",
               across_ok ? "pass" : "FAIL");
  }

  // Flattened single-token rows with the same KV chunking must agree with the native form.
  testing::RunOptions same_split = run;
  same_split.kv_chunk_blocks = std::max(1, 256 / spec.block_size);
  testing::RunOptions flat = same_split;
  flat.flatten = true;
  const auto agree = testing::agreement(ranks.run(sc, same_split), ranks.run(sc, flat));
  const bool flat_ok = agree.bit_identical;
  fmt::print(
      "flattened vs native (same KV split): max|dO| = {:.3e}, max|dLSE| = {:.3e}, {} -> {}\n",
      agree.max_out_diff, agree.max_lse_diff,
      agree.bit_identical ? "bit-identical" : "NOT bit-identical", flat_ok ? "pass" : "FAIL");

  testing::RunOptions future = run;
  future.see_future = true;
  const auto bad = testing::compare(sc, ranks.run(sc, future), want, tol);
  // The control only means something when some request has drafts to see.
  const bool control_ok = !bad.pass || spec.max_drafts == 0;
  fmt::print("negative control (every row bounded at T): max|dO| = {:.3e} -> {} ({})\n",
             bad.max_out_error, bad.pass ? "matched the reference" : "differs as it must",
             control_ok ? "pass" : "FAIL");

  const bool ok = cmp.pass && across_ok && flat_ok && control_ok;
  fmt::print("\n{}\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

Runner add_demo(CLI::App& app) {
  auto o = std::make_shared<DemoOptions>();
  app.add_option("--dcp", o->spec.world, "DCP world size W (ranks)")->check(integer_in(1, 1024));
  app.add_option("--interleave", o->spec.interleave, "KV interleave I (divides the block size)")
      ->check(positive_int());
  app.add_option("--heads", o->spec.heads, "query heads after the all-gather (multiple of W)")
      ->check(positive_int());
  app.add_option("--requests", o->spec.requests, "requests in the batch")->check(positive_int());
  app.add_option("--max-drafts", o->spec.max_drafts, "drafts per request are drawn from 0..K")
      ->check(non_negative_int());
  app.add_option("--block-size", o->spec.block_size, "tokens per cache block")
      ->check(positive_int());
  app.add_option("--max-context", o->spec.max_context, "longest global length T")
      ->check(positive_int());
  app.add_option("--dtype", o->dtype, "KV cache dtype: fp32, bf16 or fp8");
  app.add_option("--combine", o->combine, "DCP combine: ag_rs or a2a");
  app.add_option("--seed", o->spec.seed, "random seed")
      ->check(integer_in(0, std::numeric_limits<std::int64_t>::max()));
  app.add_option("--threads", o->threads, "CPU threads in total (0 = all)")
      ->check(non_negative_int());
  app.add_option("--backend", o->backend, "cpu or cuda");
  app.add_option("--gpus", o->gpus,
                 "with --backend cuda: 0 (every rank simulated on GPU 0), or W to run rank r on "
                 "GPU r")
      ->check(non_negative_int());
  app.add_option("--comm", o->comm,
                 "collectives of a run on W GPUs: nccl, or peer (direct NVLink stores between "
                 "the GPUs)");
  return [o] { return run_demo(*o); };
}

}  // namespace dcpmla::tool
