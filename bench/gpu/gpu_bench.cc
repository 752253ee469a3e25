// GPU benchmark of the CUDA decode backend: the two ceilings (device copy, cuBLAS bf16 GEMM)
// and every shape of interest measured in the same run, with FlashMLA's figures from PERF.md
// (same card, same method) for the ratio. Writes JSON; prints a table.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#if defined(DCPMLA_PLAN_STAMPS) || defined(DCPMLA_BLOCK_TIMES)
#include "cuda/kernels.h"
#endif
#include "dcpmla/cuda_backend.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "fill.cuh"
#include "launch_floor.cuh"
#include "run_stamp.h"

namespace dcpmla::bench {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(ErrorCode::backend_failure, what, "cudaSuccess", cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::backend_failure, what, "CUBLAS_STATUS_SUCCESS", std::to_string(int(s)));
}

// p90_us shows a shape's spread within a run (the small batch's median moved 5-40 % between
// runs of one build on some machines, 2026-12-01).
struct Stats {
  double median_us = 0, min_us = 0, p90_us = 0;
};

Stats summarize(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  return {1e3 * ms[ms.size() / 2], 1e3 * ms.front(), 1e3 * ms[ms.size() * 9 / 10]};
}

// Times `reps` calls of fn, each between its own pair of events, after `warmup` calls and then
// more until min_warmup_ms have passed (5 calls of a short shape last well under a millisecond).
// The first shape after the GEMM ceiling ran slower by median in some runs than in others: block
// size 16's (128, 8192, 16, 1) 354-392 us in A/A runs of one build, 353-354 in three runs with
// 100 ms (one H200, 2026-12-01); the whole benchmark's first shape, compute-bound, still varied.
template <class Fn>
Stats time_calls(Fn fn, int reps, int warmup, cudaStream_t s, double min_warmup_ms = 0) {
  for (int i = 0; i < warmup; ++i) fn();
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const auto warm_start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start)
             .count() < min_warmup_ms) {
    for (int i = 0; i < warmup; ++i) fn();
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  std::vector<cudaEvent_t> ev(2 * std::size_t(reps));
  for (auto& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < reps; ++i) {
    check(cudaEventRecord(ev[2 * i], s), "cudaEventRecord");
    fn();
    check(cudaEventRecord(ev[2 * i + 1], s), "cudaEventRecord");
  }
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<float> ms(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i)
    check(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
  for (auto& e : ev) cudaEventDestroy(e);
  return summarize(ms);
}

// Per-call time of `per_graph` calls captured in one CUDA graph, replayed `replays` times.
template <class Fn>
std::optional<double> time_graph(Fn fn, int per_graph, int replays, cudaStream_t s) {
  cudaGraph_t graph;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return {};
  try {
    for (int i = 0; i < per_graph; ++i) fn();
  } catch (const std::exception&) {
    cudaStreamEndCapture(s, &graph);
    cudaGetLastError();
    return {};
  }
  if (cudaStreamEndCapture(s, &graph) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  cudaGraphExec_t exec;
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");  // warm-up
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms(static_cast<std::size_t>(replays));
  for (int r = 0; r < replays; ++r) {
    cudaEventRecord(a, s);
    check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    cudaEventRecord(b, s);
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    cudaEventElapsedTime(&ms[r], a, b);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return summarize(ms).median_us / per_graph;
}

struct Ceilings {
  double copy_tbps = 0, gemm_tflops = 0;
};

// warmup_ms: each ceiling's calls run this long before the timed ones (0: 3 calls).
Ceilings measure_ceilings(cudaStream_t s, int reps, double warmup_ms) {
  Ceilings c;
  const std::size_t bytes = std::size_t(2) << 30;
  void *a, *b;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  fill_random_bf16(a, bytes / 2, 1, s);
  const auto copy = time_calls(
      [&] { check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"); },
      reps, 3, s, warmup_ms);
  c.copy_tbps = 2.0 * bytes / (copy.median_us * 1e-6) / 1e12;
  cudaFree(a);
  cudaFree(b);

  const int n = 8192;
  void *x, *y, *z;
  const std::size_t mat = std::size_t(n) * n * 2;
  check(cudaMalloc(&x, mat), "cudaMalloc");
  check(cudaMalloc(&y, mat), "cudaMalloc");
  check(cudaMalloc(&z, mat), "cudaMalloc");
  fill_random_bf16(x, std::size_t(n) * n, 2, s);
  fill_random_bf16(y, std::size_t(n) * n, 3, s);
  cublasHandle_t h;
  check(cublasCreate(&h), "cublasCreate");
  check(cublasSetStream(h, s), "cublasSetStream");
  const float one = 1.0f, zero = 0.0f;
  const auto gemm = time_calls(
      [&] {
        check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, x, CUDA_R_16BF, n, y,
                           CUDA_R_16BF, n, &zero, z, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
      },
      std::max(20, reps / 5), 3, s, warmup_ms);
  c.gemm_tflops = 2.0 * n * double(n) * n / (gemm.median_us * 1e-6) / 1e12;
  cublasDestroy(h);
  cudaFree(x);
  cudaFree(y);
  cudaFree(z);
  return c;
}

enum class Form { native, padded, flattened };
const char* form_name(Form f) {
  return f == Form::native ? "native" : f == Form::padded ? "padded" : "flattened";
}

struct Shape {
  std::string group;
  int B;
  std::int64_t L;  // local KV length per request on the measured rank
  int H;
  std::vector<int> q;  // per-request query length (real rows)
  Form form = Form::native;
  int world = 1;           // DCP world size of the per-rank shape (the rank is 0)
  double flashmla_us = 0;  // PERF.md, same card and method; 0 = no figure
  std::string flashmla_note;
  int block_size = 64;
  DType kv = DType::bf16;
  bool sink = false;  // plant_sink_bf16's score profile instead of plain random data
  // The DCP step's own decode (ag_rs combine): the query as the all-gather leaves it
  // ([W, rows, H / W, 576]) and fp32 partial rows out, instead of a plain query and bf16 rows.
  bool step_io = false;
};

std::vector<int> ragged_q(int B, int max_q, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> q(static_cast<std::size_t>(B));
  for (auto& x : q) x = 1 + int(rng() % std::uint64_t(max_q));
  return q;
}

// The ragged_mix group's draw: 64 requests, Q from 1..8.
std::vector<int> ragged_mix() {
  return ragged_q(64, 8, 2026);
}

std::vector<Shape> shapes() {
  std::vector<Shape> v;
  auto uniform = [](int B, int Q) { return std::vector<int>(std::size_t(B), Q); };
  // FlashMLA's table in PERF.md (median us, H200, 2026-11-30).
  const struct {
    int B;
    std::int64_t L;
    int H, Q;
    double us;
  } table[] = {{64, 4096, 128, 1, 117.4},  {64, 4096, 128, 2, 213.5},  {64, 4096, 128, 4, 415.7},
               {64, 4096, 128, 8, 877.3},  {128, 8192, 16, 1, 284.7},  {32, 32768, 64, 1, 312.6},
               {32, 32768, 64, 8, 1800.5}, {4, 131072, 128, 4, 795.7}, {132, 4096, 128, 1, 230.2},
               {1, 65536, 128, 1, 56.5}};
  for (const auto& t : table) {
    v.push_back(
        {"flashmla_table", t.B, t.L, t.H, uniform(t.B, t.Q), Form::native, 1, t.us, "uniform"});
  }
  // Ragged speculative mixes: 64 requests, Q drawn from 1..8 (the same draw for every mix).
  const auto mix = ragged_mix();
  const struct {
    std::int64_t L;
    int H;
    double best_us;
    const char* best;
    double padded_us;
  } mixes[] = {{4096, 128, 546, "flattened", 817},
               {32768, 16, 878, "one call per distinct Q", 892},
               {4096, 16, 0, "", 0},
               {32768, 128, 0, "", 0}};
  for (const auto& m : mixes) {
    v.push_back({"ragged_mix", 64, m.L, m.H, mix, Form::native, 1, m.best_us, m.best});
    v.push_back({"ragged_mix", 64, m.L, m.H, mix, Form::padded, 1, m.padded_us, "padded to Q = 8"});
  }
  // Native vs flattened at Q = 8.
  for (const auto& [H, native_us, flat_us] :
       {std::tuple{16, 225.5, 1093.0}, std::tuple{128, 1781.0, 1963.0}}) {
    v.push_back({"native_vs_flattened", 16, 32768, H, uniform(16, 8), Form::native, 1, native_us,
                 "uniform"});
    v.push_back({"native_vs_flattened", 16, 32768, H, uniform(16, 8), Form::flattened, 1, flat_us,
                 "flattened"});
  }
  // Kimi K3 at TP8 / DCP8: 96 gathered heads per rank, rank-local causal bounds.
  v.push_back({"kimi_k3_dcp8", 32, 32768, 96, uniform(32, 1), Form::native, 8, 425,
               "64-row tiles, H = 96"});
  v.push_back({"kimi_k3_dcp8", 32, 32768, 96, ragged_q(32, 8, 7), Form::native, 8, 0, ""});
  v.push_back({"kimi_k3_dcp8", 32, 32768, 12, uniform(32, 1), Form::native, 8, 283, "H = 12"});
  // The DCP step's decode on rank 0 (gathered query, fp32 partial rows, as dcp_step hands them to
  // the ag_rs combine): DeepSeek-V3 at TP 8 / DCP 8 (128 heads gathered in groups of 16) at Q 1
  // and 8, and the Kimi K3 rank.
  for (const auto& [B, L, H, Q] :
       {std::tuple{64, 4096, 128, 1}, std::tuple{64, 4096, 128, 8}, std::tuple{32, 32768, 96, 1}}) {
    Shape sh{"dcp_step_io", B, L, H, uniform(B, Q), Form::native, 8, 0, ""};
    sh.step_io = true;
    v.push_back(sh);
  }
  // (64, 4096, 128, 8) with 8 requests: 38 MB of KV, which fits in L2, in one wave of 128
  // thread blocks; its time per tile against the 64-request shape's shows what DRAM costs.
  v.push_back({"l2_resident", 8, 4096, 128, uniform(8, 8), Form::native, 1, 0, "KV fits in L2"});
  // Cache formats: block sizes 16 and 32 (no cliff expected: tokens are gathered one by one) and
  // the fp8 e4m3 cache (half the bytes), on a memory-bound and a compute-bound shape.
  for (const auto& [B, L, H, Q] : {std::tuple{128, 8192, 16, 1}, std::tuple{64, 4096, 128, 2}}) {
    for (int bs : {16, 32}) {
      v.push_back({"cache_formats", B, L, H, uniform(B, Q), Form::native, 1, 0, "", bs});
    }
    v.push_back(
        {"cache_formats", B, L, H, uniform(B, Q), Form::native, 1, 0, "", 64, DType::fp8_e4m3});
  }
  // More fp8 shapes: full tiles at Q 8, one long request, a Kimi K3 DCP 8 rank.
  for (const auto& [B, L, H, Q] :
       {std::tuple{64, 4096, 128, 8}, std::tuple{1, 65536, 128, 1}, std::tuple{32, 32768, 96, 1}}) {
    v.push_back(
        {"cache_formats", B, L, H, uniform(B, Q), Form::native, 1, 0, "", 64, DType::fp8_e4m3});
  }
  // And the ragged_mix group's draw of 64 requests, Q 1..8, at L 32K, H 16.
  v.push_back({"cache_formats", 64, 32768, 16, mix, Form::native, 1, 0, "", 64, DType::fp8_e4m3});
  // Random data raises a row's running max on many early tiles; real scores find it at once in
  // a sink token. Two shapes of the FlashMLA table again with a sink in every request's first
  // token (FlashMLA's figures were taken on random data).
  for (const auto& [B, L, H, Q] : {std::tuple{64, 4096, 128, 2}, std::tuple{1, 65536, 128, 1}}) {
    v.push_back({"sink_scores", B, L, H, uniform(B, Q), Form::native, 1, 0, "sink token", 64,
                 DType::bf16, true});
  }
  // DCP scaling on one GPU (issue 5's W = 4 / 8 where no 4- or 8-GPU machine is lent): rank 0's
  // decode at W = 1, 2, 4, 8 for the multi-GPU targets' global contexts (128K x 8, 32K x 32),
  // H 128 and Kimi K3's 96, Q 1 and ragged 1..8. Its time against W = 1 is the attention part of
  // the step-time ratio; the collectives need the GPUs.
  for (const auto& [T, B] : {std::pair<std::int64_t, int>{131072, 8}, {32768, 32}}) {
    for (int H : {128, 96}) {
      for (bool ragged : {false, true}) {
        for (int W : {1, 2, 4, 8}) {
          v.push_back({"dcp_scaling", B, T / W, H, ragged ? ragged_q(B, 8, 5) : uniform(B, 1),
                       Form::native, W, 0, ""});
        }
      }
    }
  }
  return v;
}

// Rank 0's decode time at W over W = 1's, per dcp_scaling shape (B, global context, H, Q).
nlohmann::json dcp_scaling_ratios(const nlohmann::json& results) {
  nlohmann::json ratios = nlohmann::json::array();
  for (const auto& base : results) {
    if (base["group"] != "dcp_scaling" || base["world"] != 1) continue;
    for (const auto& r : results) {
      if (r["group"] != "dcp_scaling" || r["world"] == 1 || r["B"] != base["B"] ||
          r["H"] != base["H"] || r["q"] != base["q"] ||
          r["L_local"].get<std::int64_t>() * r["world"].get<int>() != base["L_local"]) {
        continue;
      }
      ratios.push_back(
          {{"B", base["B"]},
           {"context", base["L_local"]},
           {"H", base["H"]},
           {"q_max", *std::max_element(base["q"].begin(), base["q"].end())},
           {"world", r["world"]},
           {"median_us", r["median_us"]},
           {"median_us_world_1", base["median_us"]},
           {"attention_ratio", r["median_us"].get<double>() / base["median_us"].get<double>()}});
    }
  }
  return ratios;
}

struct Problem {
  Batch batch;  // as run (padded / flattened forms applied)
  Plan plan;
  double kv_bytes;  // each request's local KV read once
  double useful_flops;
  std::int64_t rows;
};

// kv_chunk_blocks > 0 overrides the planner's split (KV blocks per work item), for experiments.
// ordered_blocks: each request's pages in order in the cache (FlashMLA's own benchmark lays its
// block table out so) instead of a random permutation.
// The GPU planner's kernel time (Schedule::plan_on_device) for B ragged requests (Q 1..8, T up to
// 32K) on rank 3 of a W = 8 group, H 128, block size 64: one launch per call, timed as the decode
// is. First the floor: an empty kernel with the planner's launch shape (256 threads, 200 KiB of
// shared memory) timed the same way. Each is also timed as 20 calls captured in one CUDA graph
// (graph_us, per call): an engine's captured step launches it so, and the events and the launch
// from the host, which the single call's time includes, are then off it.
nlohmann::json time_device_planning(Backend& backend, int sms, int reps,
                                    const std::vector<int>& planning_requests, cudaStream_t s) {
  nlohmann::json out = nlohmann::json::array();
  constexpr int kPerGraph = 20;
  auto graph_us = [&](auto&& call) -> nlohmann::json {
    const auto us = time_graph(call, kPerGraph, std::max(reps, 5), s);
    return us ? nlohmann::json(*us) : nlohmann::json(nullptr);
  };
  auto empty = [&] { check(launch_empty(256, 200 * 1024, s), "empty kernel launch"); };
  const Stats floor = time_calls(empty, reps, 5, s);
  const nlohmann::json floor_graph = graph_us(empty);
  fmt::print(
      "device_planning empty launch: {:.2f} us median, {:.2f} us min, {} us a call in a "
      "graph\n",
      floor.median_us, floor.min_us, floor_graph.dump());
  out.push_back({{"group", "device_planning"},
                 {"B", 0},
                 {"name", "empty kernel, 256 threads, 200 KiB shared memory"},
                 {"median_us", floor.median_us},
                 {"min_us", floor.min_us},
                 {"p90_us", floor.p90_us},
                 {"graph_us", floor_graph}});
  std::mt19937_64 rng(28);
  for (const int B : planning_requests) {
    Batch batch;
    batch.query_start_loc = {0};
    for (int b = 0; b < B; ++b) {
      const int q = std::uniform_int_distribution<int>(1, 8)(rng);
      batch.query_start_loc.push_back(batch.query_start_loc.back() + q);
      batch.total_len.push_back(std::uniform_int_distribution<std::int64_t>(q, 32768)(rng));
    }
    const PlanConfig config{{8, 3, 1}, 128, 64, 1 << 20, DeviceModel{sms, 64, 256}, 0};
    const ScheduleCapacity cap =
        capacity_for_limits(config, B, batch.real_tokens(), (32768 / 8 + 63) / 64);
    Schedule schedule(backend, config, cap);
    std::vector<std::int32_t> lens(batch.total_len.begin(), batch.total_len.end());
    DeviceBuffer qsl(backend, batch.query_start_loc.size() * 4), seq(backend, lens.size() * 4);
    backend.upload(qsl.data(), batch.query_start_loc.data(), qsl.bytes(), s);
    backend.upload(seq.data(), lens.data(), seq.bytes(), s);
    const DeviceBatchRef dev{qsl.tensor(DType::i32, {B + 1}), seq.tensor(DType::i32, {B}),
                             batch.real_tokens()};
    auto call = [&] { schedule.plan_on_device(dev, s); };
    const Stats st = time_calls(call, reps, 5, s);
    const nlohmann::json in_graph = graph_us(call);
    const bool ok = schedule.status(s).ok();
    nlohmann::json stamps = nlohmann::json::array();
#ifdef DCPMLA_PLAN_STAMPS
    // One more call: each step's kind and its cycles since the step before.
    call();
    const std::vector<cuda::PlanStamp> steps = cuda::read_plan_stamps(s);
    std::string line;
    for (std::size_t i = 1; i < steps.size(); ++i) {
      const auto cycles = std::int64_t(steps[i].clock - steps[i - 1].clock);
      stamps.push_back({std::string(1, steps[i].kind), cycles});
      line += fmt::format(" {}{}", steps[i].kind, cycles);
    }
    if (!steps.empty()) {
      fmt::print("device_planning B {} steps (cycles, {} in all):{}\n", B,
                 steps.back().clock - steps.front().clock, line);
    }
#endif
    fmt::print(
        "device_planning B {:>5} W 8 H 128: {:.2f} us median, {:.2f} us min, {} us a call "
        "in a graph{}\n",
        B, st.median_us, st.min_us, in_graph.dump(), ok ? "" : "  FAULT");
    out.push_back({{"group", "device_planning"},
                   {"B", B},
                   {"world", 8},
                   {"H", 128},
                   {"rows", batch.real_tokens()},
                   {"median_us", st.median_us},
                   {"min_us", st.min_us},
                   {"p90_us", st.p90_us},
                   {"graph_us", in_graph},
                   {"ok", ok}});
    if (!stamps.empty()) out.back()["step_cycles"] = stamps;
  }
  return out;
}

Problem make_problem(const Shape& sh, std::int64_t num_blocks_out[1], int block_size, int sms,
                     std::mt19937_64& rng, int kv_chunk_blocks, bool ordered_blocks) {
  const Sharding sharding{sh.world, 0, 1};
  Batch batch;
  batch.query_start_loc.push_back(0);
  double flops = 0;
  for (int b = 0; b < sh.B; ++b) {
    const int real_q = sh.q[b];
    const int q = sh.form == Form::padded ? *std::max_element(sh.q.begin(), sh.q.end()) : real_q;
    batch.query_start_loc.push_back(batch.query_start_loc.back() + q);
    batch.total_len.push_back(sh.L * sh.world);  // local length L on rank 0
    flops += double(sh.L) * real_q * sh.H * 2176.0;
  }
  const std::int64_t blocks = (sh.L + block_size - 1) / block_size;
  batch.max_blocks = std::int32_t(blocks);
  std::vector<std::int32_t> ids(std::size_t(sh.B * blocks));
  std::iota(ids.begin(), ids.end(), 0);
  if (!ordered_blocks) std::shuffle(ids.begin(), ids.end(), rng);
  batch.block_table = ids;
  num_blocks_out[0] = std::int64_t(ids.size());
  if (sh.form == Form::flattened) batch = flatten(batch);
  PlanConfig cfg{sharding,
                 sh.H,
                 block_size,
                 num_blocks_out[0],
                 DeviceModel{sms, 64, 256},
                 std::max(kv_chunk_blocks, 0)};
  Problem p{batch, make_plan(batch, cfg), double(sh.B) * sh.L * kHeadDim * dtype_size(sh.kv), flops,
            batch.rows()};
  return p;
}

struct Measured {
  Problem problem;
  Stats stats;
  std::optional<double> graph_us;  // per call, from CUDA graph replays
  bool finite = false;             // every LSE finite after the runs (never time garbage)
  nlohmann::json block_times;      // DCPMLA_BLOCK_TIMES builds: summarize_block_times
};

#ifdef DCPMLA_BLOCK_TIMES
// One decode launch's blocks (cuda::read_block_times), in us from the first block's start: the
// launch's span; per block its start, its start-up (to its first S; of it, the query's landing
// and the rest), its walk (first S to its last tile, and SM cycles a tile over it) and its end
// (last tile to thread 0's stores; of it, the wait for the other warpgroups and the stores), each
// as min / median / max over the wide blocks; the blocks per SM; and the block that ended last.
nlohmann::json summarize_block_times(const std::vector<cuda::BlockTimes>& blocks) {
  std::vector<cuda::BlockTimes> wide;
  std::uint64_t t0 = ~std::uint64_t(0);
  std::vector<int> per_sm(1024, 0);
  std::size_t started = 0;
  for (const auto& b : blocks) {
    if (b.start_ns == 0) continue;  // past the plan's items
    ++started;
    t0 = std::min(t0, b.start_ns);
    ++per_sm[std::size_t(b.sm % per_sm.size())];
    if (b.q_loaded_ns != 0 && b.first_s_ns != 0 && b.walked_ns != 0 && b.rows_ready_ns != 0 &&
        b.end_ns != 0 && b.tiles > 0) {
      wide.push_back(b);
    }
  }
  if (wide.empty()) return nlohmann::json::object();
  auto us = [](std::uint64_t a, std::uint64_t b) { return (double(b) - double(a)) * 1e-3; };
  auto spread = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return nlohmann::json{{"min", v.front()}, {"median", v[v.size() / 2]}, {"max", v.back()}};
  };
  std::vector<double> start, startup, query, first_s, walk, cycles, end, lag, stores;
  const cuda::BlockTimes* last = &wide.front();
  for (const auto& b : wide) {
    start.push_back(us(t0, b.start_ns));
    startup.push_back(us(b.start_ns, b.first_s_ns));
    query.push_back(us(b.start_ns, b.q_loaded_ns));
    first_s.push_back(us(b.q_loaded_ns, b.first_s_ns));
    walk.push_back(us(b.first_s_ns, b.walked_ns));
    cycles.push_back(double(b.walked_clock - b.first_s_clock) / double(b.tiles));
    end.push_back(us(b.walked_ns, b.end_ns));
    lag.push_back(us(b.walked_ns, b.rows_ready_ns));
    stores.push_back(us(b.rows_ready_ns, b.end_ns));
    if (b.end_ns > last->end_ns) last = &b;
  }
  return {{"blocks", started},
          {"wide_blocks", wide.size()},
          {"span_us", us(t0, last->end_ns)},
          {"most_blocks_per_sm", *std::max_element(per_sm.begin(), per_sm.end())},
          {"start_us", spread(start)},
          {"startup_us", spread(startup)},
          {"query_us", spread(query)},
          {"query_to_first_s_us", spread(first_s)},
          {"walk_us", spread(walk)},
          {"walk_cycles_per_tile", spread(cycles)},
          {"end_us", spread(end)},
          {"warpgroups_done_us", spread(lag)},
          {"stores_us", spread(stores)},
          {"last_block",
           {{"sm", last->sm},
            {"tiles", last->tiles},
            {"start_us", us(t0, last->start_ns)},
            {"startup_us", us(last->start_ns, last->first_s_ns)},
            {"walk_us", us(last->first_s_ns, last->walked_ns)},
            {"end_us", us(last->walked_ns, last->end_ns)}}}};
}
#endif

// Times the decode of `sh`: `reps` calls, each between its own pair of events, after at least
// max(100, steady_ms) ms of warm-up, then graph replays. With sets > 1 the calls rotate over that
// many input sets (each its own cache and queries, one plan and block table), so that data
// smaller than the L2 is not read from it.
Measured measure_shape(Backend& backend, const Shape& sh, int sets, int sms, std::mt19937_64& rng,
                       int kv_chunk_blocks, bool ordered_blocks, int reps, double steady_ms,
                       cudaStream_t s) {
  std::int64_t num_blocks = 0;
  Problem p =
      make_problem(sh, &num_blocks, sh.block_size, sms, rng, kv_chunk_blocks, ordered_blocks);
  const std::int64_t rows = p.rows;
  const DType out_dtype = sh.step_io ? DType::f32 : DType::bf16;
  DeviceBuffer out(backend, std::size_t(rows) * sh.H * kLatentDim * dtype_size(out_dtype));
  DeviceBuffer lse(backend, std::size_t(rows) * sh.H * 4);
  DeviceBuffer bt(backend, p.batch.block_table.size() * 4);
  DeviceBuffer ws(backend, std::max<std::size_t>(decode_workspace_bytes(p.plan), 16));
  backend.upload(bt.data(), p.batch.block_table.data(), bt.bytes(), s);
  std::vector<DeviceBuffer> caches, queries, sink_rows;  // sink rows live until the plant is done
  // The engine's path: the plan written into a schedule, which the decode (and its graph) reads.
  Schedule schedule(backend, p.plan.config, capacity_of(p.plan));
  schedule.update(p.plan, s);
  std::vector<DecodeArgs> args(static_cast<std::size_t>(sets));
  for (int k = 0; k < sets; ++k) {
    DeviceBuffer& cache = caches.emplace_back(
        backend, std::size_t(num_blocks) * sh.block_size * kHeadDim * dtype_size(sh.kv));
    DeviceBuffer& q = queries.emplace_back(backend, std::size_t(rows) * sh.H * kHeadDim * 2);
    const auto seed = std::uint32_t(11 + 2 * k);
    if (sh.kv == DType::fp8_e4m3) {
      fill_random_fp8(cache.data(), cache.bytes(), seed, s);
    } else {
      fill_random_bf16(cache.data(), cache.bytes() / 2, seed, s);
    }
    fill_random_bf16(q.data(), q.bytes() / 2, seed + 1, s);
    if (sh.sink) {
      DeviceBuffer& sr = sink_rows.emplace_back(backend, std::size_t(p.batch.num_requests()) * 8);
      std::vector<std::int64_t> rows_host;  // each request's first token
      for (int b = 0; b < p.batch.num_requests(); ++b) {
        rows_host.push_back(std::int64_t(p.batch.block_table[std::size_t(b) * p.batch.max_blocks]) *
                            sh.block_size);
      }
      backend.upload(sr.data(), rows_host.data(), sr.bytes(), s);
      plant_sink_bf16(q.data(), q.bytes() / 2, cache.data(), static_cast<std::int64_t*>(sr.data()),
                      rows_host.size(), 0.15f, s);
    }
    DecodeArgs& a = args[std::size_t(k)];
    a.schedule = &schedule;
    a.q = sh.step_io ? q.tensor(DType::bf16, {sh.world, rows, sh.H / sh.world, kHeadDim})
                     : q.tensor(DType::bf16, {rows, sh.H, kHeadDim});
    a.cache = {cache.data(), sh.kv, num_blocks, sh.block_size, 1.0f};
    a.block_table = bt.tensor(DType::i32, {p.batch.num_requests(), p.batch.max_blocks});
    a.out = out.tensor(out_dtype, {rows, sh.H, kLatentDim});
    a.lse = lse.tensor(DType::f32, {rows, sh.H});
    a.softmax_scale = 0.1352338f;
    a.workspace = ws.tensor(DType::fp8_e4m3, {std::int64_t(ws.bytes())});
  }
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::size_t next = 0;
  auto call = [&] { backend.decode(args[next++ % args.size()], s); };
  const Stats st = time_calls(call, reps, 5, s, std::max(100.0, steady_ms));
  const auto graph = time_graph(call, 10, 3, s);
  std::vector<float> lse_host(std::size_t(rows) * sh.H);
  check(cudaMemcpy(lse_host.data(), lse.data(), lse_host.size() * 4, cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  const bool finite =
      std::all_of(lse_host.begin(), lse_host.end(), [](float x) { return std::isfinite(x); });
  nlohmann::json block_times;
#ifdef DCPMLA_BLOCK_TIMES
  // One more call, alone on the stream.
  call();
  block_times = summarize_block_times(cuda::read_block_times(s));
#endif
  return {std::move(p), st, graph, finite, std::move(block_times)};
}

// --serve: one shape a line of stdin, {"B", "L", "H", "q": [Q per request] or Q, "world" (1),
// "sets" (1)} (bf16, block size 64, rank 0 of the DCP world), one JSON result a line of stdout.
// The first line out names the device, the ceilings and the ragged_mix group's draw of Q, so that
// a driver can alternate these calls with another benchmark's on the same shapes in one run.
int serve(Backend& backend, const cudaDeviceProp& prop, const Ceilings& ceil, int reps,
          double steady_ms, cudaStream_t s) {
  const nlohmann::json hello{
      {"device", prop.name},
      {"sms", prop.multiProcessorCount},
      {"reps", reps},
      {"warmup_ms", std::max(100.0, steady_ms)},
      {"ceilings", {{"copy_tbps", ceil.copy_tbps}, {"gemm_bf16_tflops", ceil.gemm_tflops}}},
      {"ragged_mix_q", ragged_mix()}};
  std::cout << hello.dump() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::json reply;
    try {
      const auto req = nlohmann::json::parse(line);
      Shape sh;
      sh.group = "serve";
      sh.B = req.at("B").get<int>();
      sh.L = req.at("L").get<std::int64_t>();
      sh.H = req.at("H").get<int>();
      sh.world = req.value("world", 1);
      const auto& q = req.at("q");
      sh.q = q.is_array() ? q.get<std::vector<int>>()
                          : std::vector<int>(std::size_t(sh.B), q.get<int>());
      if (int(sh.q.size()) != sh.B) throw std::runtime_error("q needs B entries");
      const int sets = req.value("sets", 1);
      if (sets < 1) throw std::runtime_error("sets must be >= 1");
      std::mt19937_64 rng(1);
      const Measured m = measure_shape(backend, sh, sets, prop.multiProcessorCount, rng, 0, false,
                                       reps, steady_ms, s);
      const double t = m.stats.median_us * 1e-6;
      reply = {{"median_us", m.stats.median_us},
               {"min_us", m.stats.min_us},
               {"p90_us", m.stats.p90_us},
               {"graph_us", m.graph_us ? nlohmann::json(*m.graph_us) : nlohmann::json()},
               {"rows", m.problem.rows},
               {"sets", sets},
               {"work_items", m.problem.plan.work.size()},
               {"kv_tbps", m.problem.kv_bytes / t / 1e12},
               {"useful_tflops", m.problem.useful_flops / t / 1e12},
               {"output_finite", m.finite}};
    } catch (const std::exception& e) {
      reply = {{"error", e.what()}};
    }
    std::cout << reply.dump() << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace dcpmla::bench

int main(int argc, char** argv) {
  using namespace dcpmla;
  using namespace dcpmla::bench;
  CLI::App app{"dcpmla GPU decode benchmark"};
  std::string out_path = "gpu_bench.json", commit = "unknown", date = utc_now();
  std::vector<std::string> filters;
  int reps = 100;
  int index = -1, kv_chunk_blocks = 0;
  app.add_option("--out", out_path, "JSON output file");
  app.add_option("--filter", filters,
                 "only shapes whose group contains one of these (comma-separated or repeated)")
      ->delimiter(',');
  app.add_option("--index", index, "only the index-th shape (from 0) that passes the filters");
  app.add_option("--reps", reps, "timed calls per shape (>= 100 for reported numbers)");
  std::vector<int> planning_requests{1, 256, 512, 1024};
  app.add_option("--planning-requests", planning_requests,
                 "batch sizes of the device_planning group")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--kv-chunk-blocks", kv_chunk_blocks,
                 "KV blocks per work item instead of the planner's split (experiments)")
      ->check(CLI::NonNegativeNumber);
  bool ordered_blocks = false;
  app.add_flag("--ordered-blocks", ordered_blocks,
               "each request's pages in order in the cache, not permuted (experiments)");
  std::vector<int> custom;
  app.add_option("--shape", custom,
                 "run only this uniform shape B,L,H,Q (bf16, W = 1; group 'custom'), experiments")
      ->expected(4)
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 30));
  double steady_ms = 0;
  app.add_option("--steady-ms", steady_ms,
                 "run every ceiling and shape this long before its timed calls (default: 100 ms "
                 "for a shape, 3 calls for a ceiling), so that they are timed in the GPU's "
                 "steady power state (the H200's power cap lowers the clock within ~0.1 s)")
      ->check(CLI::NonNegativeNumber);
  bool serve_mode = false;
  app.add_flag("--serve", serve_mode,
               "time the shapes read from stdin, one JSON object a line, and answer each with one "
               "JSON line on stdout (see serve() in the source); for drivers that alternate this "
               "benchmark with another one");
  app.add_option("--commit", commit, "commit recorded with the results");
  app.add_option("--date", date, "date recorded with the results (default: now, UTC)");
  CLI11_PARSE(app, argc, argv);
  auto selected = [&](const std::string& group) {
    return filters.empty() || std::any_of(filters.begin(), filters.end(), [&](const auto& f) {
             return group.find(f) != std::string::npos;
           });
  };
  try {
    if (!cuda_available()) {
      fmt::print(stderr, "no CUDA device\n");
      return 2;
    }
    cudaDeviceProp prop;
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    cudaStream_t s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    const Ceilings ceil = measure_ceilings(s, reps, steady_ms);
    fmt::print(serve_mode ? stderr : stdout,
               "device {} ({} SMs), copy ceiling {:.2f} TB/s, bf16 GEMM ceiling {:.0f} TFLOP/s\n",
               prop.name, prop.multiProcessorCount, ceil.copy_tbps, ceil.gemm_tflops);
    if (serve_mode) {
      auto backend = make_cuda_backend(0);
      const int rc = serve(*backend, prop, ceil, reps, steady_ms, s);
      cudaStreamDestroy(s);
      return rc;
    }

    nlohmann::json results = nlohmann::json::array();
    // Rewritten after every shape, so a run cut short keeps what it measured.
    auto write = [&] {
      nlohmann::json doc{
          {"device", prop.name},
          {"sms", prop.multiProcessorCount},
          {"commit", commit},
          {"date", date},
          {"reps", reps},
          {"warmup_ms", {{"shapes", std::max(100.0, steady_ms)}, {"ceilings", steady_ms}}},
          {"kv_chunk_blocks",
           kv_chunk_blocks == 0 ? nlohmann::json("planner") : nlohmann::json(kv_chunk_blocks)},
          {"block_size", "64 unless a result says otherwise"},
          {"block_table", ordered_blocks ? "ordered" : "permuted"},
          {"kv_dtype", "bf16 unless a result says otherwise"},
          {"ceilings", {{"copy_tbps", ceil.copy_tbps}, {"gemm_bf16_tflops", ceil.gemm_tflops}}},
          {"flashmla_source", "shared/PERF.md (FlashMLA built from source, same H200, 2026-11-30)"},
          {"results", results},
          {"dcp_scaling_ratios", dcp_scaling_ratios(results)}};
      std::ofstream(out_path) << doc.dump(2) << "\n";
    };
    auto backend = make_cuda_backend(0);
    std::mt19937_64 rng(1);
    fmt::print(
        "{:<20} {:>4} {:>7} {:>4} {:>5} {:<10} {:>3} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} "
        "{:>9}\n",
        "group", "B", "L", "H", "rows", "form", "W", "med_us", "min_us", "graph_us", "TB/s",
        "%copy", "TF", "%gemm", "FlashMLA");
    int passed = -1;
    std::vector<Shape> list = shapes();
    if (!custom.empty()) {
      const int B = custom[0], H = custom[2], Q = custom[3];
      list = {
          {"custom", B, custom[1], H, std::vector<int>(std::size_t(B), Q), Form::native, 1, 0, ""}};
    }
    for (const Shape& sh : list) {
      if (!selected(sh.group)) continue;
      if (++passed != index && index >= 0) continue;
      const Measured m = measure_shape(*backend, sh, 1, prop.multiProcessorCount, rng,
                                       kv_chunk_blocks, ordered_blocks, reps, steady_ms, s);
      const Problem& p = m.problem;
      const Stats& st = m.stats;
      const auto& graph = m.graph_us;
      const bool finite = m.finite;
      const std::int64_t rows = p.rows;
      const double t = st.median_us * 1e-6;
      const double tbps = p.kv_bytes / t / 1e12, tflops = p.useful_flops / t / 1e12;
      fmt::print(
          "{:<20} {:>4} {:>7} {:>4} {:>5} {:<10} {:>3} {:>9.1f} {:>9.1f} {:>9} {:>7.2f} {:>6.1f}% "
          "{:>7.0f} {:>6.1f}% {:>9}{}\n",
          sh.group, sh.B, sh.L, sh.H, rows,
          fmt::format("{}{}{}{}", form_name(sh.form),
                      sh.block_size != 64 ? fmt::format("/bs{}", sh.block_size) : "",
                      sh.kv == DType::fp8_e4m3 ? "/fp8" : "", sh.sink ? "/sink" : ""),
          sh.world, st.median_us, st.min_us, graph ? fmt::format("{:.1f}", *graph) : "n/a", tbps,
          100 * tbps / ceil.copy_tbps, tflops, 100 * tflops / ceil.gemm_tflops,
          sh.flashmla_us > 0 ? fmt::format("{:.1f}", sh.flashmla_us) : "-",
          finite ? "" : "  NON-FINITE OUTPUT");
      results.push_back(
          {{"group", sh.group},
           {"B", sh.B},
           {"L_local", sh.L},
           {"H", sh.H},
           {"q", sh.q},
           {"rows", rows},
           {"form", form_name(sh.form)},
           {"world", sh.world},
           {"block_size", sh.block_size},
           {"kv_dtype", to_string(sh.kv)},
           {"scores", sh.sink ? "sink" : "random"},
           {"query", sh.step_io ? "gathered" : "plain"},
           {"out_dtype", sh.step_io ? "f32" : "bf16"},
           {"median_us", st.median_us},
           {"min_us", st.min_us},
           {"p90_us", st.p90_us},
           {"graph_us", graph ? nlohmann::json(*graph) : nlohmann::json()},
           {"kv_tbps", tbps},
           {"frac_copy", tbps / ceil.copy_tbps},
           {"useful_tflops", tflops},
           {"frac_gemm", tflops / ceil.gemm_tflops},
           {"work_items", p.plan.work.size()},
           {"flashmla_us", sh.flashmla_us},
           {"flashmla_strategy", sh.flashmla_note},
           {"speedup_vs_flashmla", sh.flashmla_us > 0 ? sh.flashmla_us / st.median_us : 0.0},
           {"output_finite", finite}});
      if (!m.block_times.empty()) {  // null or {} outside DCPMLA_BLOCK_TIMES builds
        const auto& bt = m.block_times;
        auto mm = [&](const char* k) {
          return fmt::format("{:.1f}/{:.1f}/{:.1f}", bt[k]["min"].get<double>(),
                             bt[k]["median"].get<double>(), bt[k]["max"].get<double>());
        };
        const auto& last = bt["last_block"];
        fmt::print(
            "  blocks {} span {:.1f} us; min/median/max: start {} startup {} (query {}, then "
            "first S {}) walk {} us, {} cycles a tile, end {} (warpgroups done {}, then stores "
            "{}) us; last block: sm {} tiles {} start {:.1f} startup {:.1f} walk {:.1f} end "
            "{:.1f} us\n",
            bt["blocks"].get<std::size_t>(), bt["span_us"].get<double>(), mm("start_us"),
            mm("startup_us"), mm("query_us"), mm("query_to_first_s_us"), mm("walk_us"),
            mm("walk_cycles_per_tile"), mm("end_us"), mm("warpgroups_done_us"), mm("stores_us"),
            last["sm"].get<std::uint64_t>(), last["tiles"].get<std::uint64_t>(),
            last["start_us"].get<double>(), last["startup_us"].get<double>(),
            last["walk_us"].get<double>(), last["end_us"].get<double>());
        results.back()["block_times"] = bt;
      }
      write();
    }
    if (selected("device_planning")) {
      nlohmann::json planning =
          time_device_planning(*backend, prop.multiProcessorCount, reps, planning_requests, s);
      for (auto& r : planning) results.push_back(r);
      write();
    }
    for (const auto& r : dcp_scaling_ratios(results)) {
      fmt::print(
          "dcp_scaling B {} context {} H {} Q {}: W = {} rank 0 {:.1f} us / W = 1 {:.1f} us = "
          "{:.3f}\n",
          r["B"].get<int>(), r["context"].get<std::int64_t>(), r["H"].get<int>(),
          r["q_max"].get<int>() == 1 ? "1" : "1..8", r["world"].get<int>(),
          r["median_us"].get<double>(), r["median_us_world_1"].get<double>(),
          r["attention_ratio"].get<double>());
    }
    cudaStreamDestroy(s);
  } catch (const std::exception& e) {
    fmt::print(stderr, "dcpmla_gpu_bench: {}\n", e.what());
    return 2;
  }
  return 0;
}
