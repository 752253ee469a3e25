// Helpers of the GPU test suites: the backend under test, device buffers, a one-rank decode run
// on any backend, and random DCP cases.
//
// The backend under test is the CUDA backend; with DCPMLA_GPU_TESTS_ON_CPU=1 the same suites run
// against the CPU backend instead, which checks the tests themselves on a machine without a GPU.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dcpmla/cpu_backend.h"
#include "dcpmla/cuda_backend.h"
#include "dcpmla/numeric.h"
#include "dcpmla/plan.h"
#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"
#include "testing/test_support.h"

namespace dcpmla::gpu_testing {

inline bool on_cpu() {
  const char* v = std::getenv("DCPMLA_GPU_TESTS_ON_CPU");
  return v != nullptr && std::string(v) == "1";
}
inline bool usable() {
  return on_cpu() || cuda_available();
}
inline std::unique_ptr<Backend> make_backend() {
  return on_cpu() ? make_cpu_backend(1) : make_cuda_backend();
}
inline testing::BackendFactory factory() {
  return [](int) { return make_backend(); };
}
inline testing::BackendFactory cpu_factory() {
  return [](int) { return make_cpu_backend(1); };
}

// Sets DCPMLA_DECODE_ROUNDS while it lives and then puts back what was there, so that a run of
// the suite with the variable set keeps it for the tests after this one.
class RoundsChoice {
 public:
  RoundsChoice() {
    if (const char* v = std::getenv(kName)) saved_ = v;
  }
  ~RoundsChoice() {
    if (saved_) {
      ::setenv(kName, saved_->c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }
  RoundsChoice(const RoundsChoice&) = delete;
  RoundsChoice& operator=(const RoundsChoice&) = delete;
  void pick(bool rounds) { ::setenv(kName, rounds ? "1" : "0", 1); }

 private:
  static constexpr const char* kName = "DCPMLA_DECODE_ROUNDS";
  std::optional<std::string> saved_;
};

template <class T>
DeviceBuffer to_device(Backend& be, const std::vector<T>& v) {
  DeviceBuffer b(be, v.size() * sizeof(T));
  if (!v.empty()) be.upload(b.data(), v.data(), v.size() * sizeof(T), nullptr);
  return b;
}
template <class T>
std::vector<T> to_host(Backend& be, const void* src, std::size_t n) {
  std::vector<T> v(n);
  if (n) be.download(v.data(), src, n * sizeof(T), nullptr);
  be.synchronize(nullptr);
  return v;
}

// f32 values -> bytes of dtype t (f32 or bf16; the values are taken as they are).
inline std::vector<std::uint8_t> encode(const std::vector<float>& x, DType t) {
  std::vector<std::uint8_t> out(x.size() * dtype_size(t));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (t == DType::bf16) {
      const std::uint16_t h = float_to_bf16(x[i]);
      std::memcpy(&out[i * 2], &h, 2);
    } else {
      std::memcpy(&out[i * 4], &x[i], 4);
    }
  }
  return out;
}
inline std::vector<float> decode_values(const std::vector<std::uint8_t>& b, DType t) {
  std::vector<float> out(b.size() / dtype_size(t));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (t == DType::bf16) {
      std::uint16_t h;
      std::memcpy(&h, &b[i * 2], 2);
      out[i] = bf16_to_float(h);
    } else {
      std::memcpy(&out[i], &b[i * 4], 4);
    }
  }
  return out;
}

// Device models for plans the CUDA kernels run (tile_pairs 64, the kernels' tile): the H200's
// (what a GPU-less machine plans for) and one that never splits a request's KV.
inline constexpr DeviceModel kH200Model{132, 64, 256};
inline constexpr DeviceModel kNoSplitModel{0, 64, 256};

// How a test's plans split KV: a device model (empty: the backend's) and a forced chunk (> 0: every
// request's KV in chunks of this many blocks). The default never splits.
struct Split {
  std::optional<DeviceModel> model = kNoSplitModel;
  int kv_chunk_blocks = 0;
};
inline PlanConfig plan_config(const Backend& be, const testing::Scenario& sc, int rank,
                              const Split& split) {
  const auto& spec = sc.spec;
  PlanConfig c;
  c.sharding = {spec.world, rank, spec.interleave};
  c.num_heads = spec.heads;
  c.block_size = spec.block_size;
  c.num_blocks = sc.num_blocks;
  c.model = split.model ? *split.model : be.device_model();
  c.kv_chunk_blocks = split.kv_chunk_blocks;
  return c;
}

struct DecodeRun {
  Plan plan;
  std::vector<float> out;          // [rows, H, 512]
  std::vector<float> lse;          // [rows, H]
  std::vector<std::uint8_t> send;  // DecodeForm::send_world only: [W, rows, H / W, packed_row]
};

// The other forms of a decode's input and output. send_world > 0: the a2a send rows
// (DecodeArgs::send), written by the decode itself (in_decode) or by an f32 decode and then
// combine_pack. q_world > 0: the query passed in its gathered form [q_world, rows, H / q_world,
// 576].
struct DecodeForm {
  int send_world = 0;
  DType payload = DType::bf16;
  bool in_decode = true;
  int q_world = 0;
};

// One rank's Backend::decode over all H heads (no collectives). The rank cache is written on the
// host (CPU write_kv through the slot mapping, unused pages NaN when poisoned) and its bytes are
// uploaded as they are, so every backend reads identical cache contents.
inline DecodeRun run_decode(Backend& be, const testing::Scenario& sc, int rank, const Split& split,
                            DType out_dtype, bool poison = true, const Batch* run_batch = nullptr,
                            const DecodeForm& form = {}) {
  const auto& spec = sc.spec;
  const Batch& batch = sc.batch;
  const Batch& rb = run_batch ? *run_batch : batch;
  HostKvCache host_cache = testing::rank_cache(sc, rank, poison);
  KvCacheRef cache = host_cache.ref();
  DeviceBuffer cache_buf(be, cache.bytes());
  be.upload(cache_buf.data(), cache.data, cache.bytes(), nullptr);
  cache.data = cache_buf.data();

  DecodeRun r;
  r.plan = make_plan(rb, plan_config(be, sc, rank, split));
  const std::int64_t rows = rb.rows();
  const int H = spec.heads;
  const auto q_host = encode(sc.q, spec.q_dtype);
  const DeviceBuffer q = to_device(
      be, form.q_world > 0 ? testing::gather_layout(q_host, rows, H, form.q_world) : q_host);
  const DeviceBuffer bt = to_device(be, rb.block_table);
  DeviceBuffer out(be, std::size_t(rows) * H * kLatentDim * dtype_size(out_dtype));
  DeviceBuffer lse(be, std::size_t(rows) * H * sizeof(float));
  DeviceBuffer ws(be, decode_workspace_bytes(r.plan));
  DecodeArgs args;
  args.plan = &r.plan;
  args.q = form.q_world > 0
               ? q.tensor(spec.q_dtype, {form.q_world, rows, H / form.q_world, kHeadDim})
               : q.tensor(spec.q_dtype, {rows, H, kHeadDim});
  args.cache = cache;
  args.block_table = bt.tensor(DType::i32, {rb.num_requests(), rb.max_blocks});
  args.out = out.tensor(out_dtype, {rows, H, kLatentDim});
  args.lse = lse.tensor(DType::f32, {rows, H});
  args.softmax_scale = spec.softmax_scale;
  args.workspace = ws.tensor(DType::fp8_e4m3, {std::int64_t(ws.bytes())});
  if (form.send_world > 0) {
    const std::int64_t W = form.send_world, row = packed_row(form.payload);
    const std::vector<std::uint8_t> garbage(
        std::size_t(W * rows * (H / W) * row) * dtype_size(form.payload), 0xee);
    const DeviceBuffer rows_buf = to_device(be, garbage);
    const TensorRef send_rows = rows_buf.tensor(form.payload, {W, rows, H / W, row});
    if (form.in_decode) {
      args.out = {};
      args.lse = {};
      args.send_world = form.send_world;
      args.send = send_rows;
      be.decode(args, nullptr);
    } else {
      be.decode(args, nullptr);
      be.combine_pack({form.send_world, args.out, args.lse, send_rows}, nullptr);
    }
    r.send = to_host<std::uint8_t>(be, rows_buf.data(), rows_buf.bytes());
    return r;
  }
  be.decode(args, nullptr);
  r.out = decode_values(to_host<std::uint8_t>(be, out.data(), out.bytes()), out_dtype);
  r.lse = to_host<float>(be, lse.data(), std::size_t(rows) * H);
  return r;
}

// A random DCP case: most small, some large. Head counts, block sizes, interleaves, dtypes,
// masks, padding, short requests, combine and split policy all vary.
struct Case {
  testing::ScenarioSpec spec;
  testing::RunOptions options;
};

inline Case random_case(std::mt19937_64& rng, bool large, std::uint64_t seed) {
  Case c;
  auto& s = c.spec;
  auto pick = [&](std::initializer_list<int> v) { return *(v.begin() + rng() % v.size()); };
  s.world = pick({1, 2, 4, 8});
  do {
    s.heads = pick({1, 16, 64, 96, 128});
  } while (s.heads % s.world != 0);
  s.block_size = pick({1, 16, 32, 64});
  do {
    s.interleave = pick({1, 2, 4});
  } while (s.block_size % s.interleave != 0);
  const int kv = int(rng() % 3);
  s.kv_dtype = kv == 0 ? DType::f32 : kv == 1 ? DType::bf16 : DType::fp8_e4m3;
  s.q_dtype = rng() % 2 ? DType::bf16 : DType::f32;
  // The reference is a naive double-precision loop: keep rows x context x heads modest.
  const bool many_heads = s.heads >= 64;
  if (large) {
    s.requests = many_heads ? 3 : 8;
    s.max_drafts = pick({3, 7, 15});
    s.max_context = many_heads ? 1024 : 4096;
  } else {
    s.requests = 1 + int(rng() % (many_heads ? 3 : 6));
    s.max_drafts = pick({0, 1, 3, 7, 15});
    s.max_context = s.max_drafts + 1 + std::int64_t(rng() % (many_heads ? 160 : 600));
  }
  s.short_request = rng() % 2 == 0;
  s.full_mask_fraction = rng() % 3 == 0 ? 0.3 : 0.0;
  s.padding_rows = rng() % 3 == 0 ? 1 + int(rng() % 5) : 0;
  s.seed = seed;
  auto& o = c.options;
  o.combine = rng() % 2 ? Combine::ag_rs : Combine::a2a;
  switch (rng() % 4) {
    case 0:
      o.model = kNoSplitModel;  // no split: the requests' tiles only
      break;
    case 1:
      o.model = kNoSplitModel;
      o.kv_chunk_blocks = pick({1, 2, 3});
      break;
    case 2:
      o.model = DeviceModel{pick({4, 32, 256}), 64, 256};
      break;
    default:
      // Many workers and short chunks (1 or 2 blocks): the most splits.
      o.model = DeviceModel{1000, 64, pick({1, 2}) * s.block_size};
      break;
  }
  // Half the a2a cases ship the bf16 payload (from the seed: the draws above stay as they were).
  if (o.combine == Combine::a2a && (seed & 1)) o.combine_payload = DType::bf16;
  return c;
}

}  // namespace dcpmla::gpu_testing

// Every GPU test starts with this: skipped, not failed, without a usable CUDA device.
#define DCPMLA_REQUIRE_GPU()              \
  if (!::dcpmla::gpu_testing::usable()) { \
    GTEST_SKIP() << "no CUDA device";     \
  }                                       \
  static_assert(true, "")
