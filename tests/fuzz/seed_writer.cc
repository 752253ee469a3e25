// Writes the seed corpus of the three fuzz targets (tests/fuzz/corpus/<target>/):
//   dcpmla_fuzz_seeds OUT_DIR
// The committed corpus was made with it; inputs the fuzzers found are committed beside these
// seeds under names starting with "regression-" and are not written here.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "case_archive.h"
#include "npy.h"

namespace {

namespace fs = std::filesystem;
namespace npy = dcpmla::tool::npy;
using Bytes = std::vector<std::uint8_t>;

void save(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

Bytes bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}

// Deterministic data for arrays: small values of either sign.
std::vector<float> floats(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(int(seed >> 24) - 128) / 64.0f;
  }
  return v;
}

template <class T>
Bytes npy_of(npy::Dtype dtype, std::vector<std::int64_t> shape, const std::vector<T>& data) {
  return npy::serialize(dtype, shape, data.data());
}

// A .npy file with a hand-written header (padded to 64 bytes like numpy) and the given payload.
Bytes npy_raw(std::string header, const Bytes& payload, int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64) header.push_back(' ');
  header.push_back('\n');
  Bytes f = bytes_of("\x93NUMPY");
  f.push_back(std::uint8_t(major));
  f.push_back(0);
  for (std::size_t i = 0; i < prefix - 8; ++i) f.push_back(std::uint8_t(header.size() >> (8 * i)));
  f.insert(f.end(), header.begin(), header.end());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

void write_npy_seeds(const fs::path& dir) {
  save(dir / "f4-2x3.npy", npy_of(npy::Dtype::f4, {2, 3}, floats(6, 1)));
  save(dir / "i4-5.npy", npy_of(npy::Dtype::i4, {5}, std::vector<std::int32_t>{0, 1, -1, 7, 9}));
  save(dir / "i8-3.npy", npy_of(npy::Dtype::i8, {3}, std::vector<std::int64_t>{0, 3, 1 << 20}));
  save(dir / "u2-2x2x2.npy",
       npy_of(npy::Dtype::u2, {2, 2, 2}, std::vector<std::uint16_t>(8, 0x3f80)));
  save(dir / "u1-4x1.npy",
       npy_of(npy::Dtype::u1, {4, 1}, std::vector<std::uint8_t>{0, 0x7f, 0x38, 1}));
  save(dir / "f4-scalar.npy", npy_of(npy::Dtype::f4, {}, std::vector<float>{2.5f}));
  save(dir / "f4-empty.npy", npy_of(npy::Dtype::f4, {0, 576}, std::vector<float>{}));
  const Bytes four(4, 0);
  save(dir / "v2-header.npy",
       npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", four, 2));
  save(dir / "double-quotes.npy",
       npy_raw("{\"shape\": (1, 1), \"descr\": \"<i4\", \"fortran_order\": False}", four));
  save(dir / "long-suffix.npy",
       npy_raw("{'descr':'<u1','fortran_order':False,'shape':(4L,)}", four));
  save(dir / "fortran.npy",
       npy_raw("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", four));
  save(dir / "big-endian.npy",
       npy_raw("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", four));
  save(dir / "float64.npy",
       npy_raw("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", Bytes(8, 0)));
  save(dir / "structured.npy",
       npy_raw("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", four));
  save(dir / "unknown-key.npy",
       npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 'y'}", four));
  save(dir / "huge-shape.npy",
       npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
               four));
  save(dir / "zero-extent.npy",
       npy_raw("{'descr': '<i8', 'fortran_order': False, 'shape': (3, 0, 1000000), }", Bytes{}));
  Bytes truncated = npy_of(npy::Dtype::i4, {3}, std::vector<std::int32_t>{1, 2, 3});
  truncated.resize(truncated.size() - 2);
  save(dir / "truncated-data.npy", truncated);
  Bytes short_header = npy_of(npy::Dtype::f4, {2}, floats(2, 3));
  short_header.resize(40);
  save(dir / "truncated-header.npy", short_header);
  Bytes v3 = npy_of(npy::Dtype::f4, {1}, floats(1, 4));
  v3[6] = 3;
  save(dir / "version3.npy", v3);
  save(dir / "magic-only.npy", bytes_of("\x93NUMPY"));
  save(dir / "not-npy.npy", bytes_of("PK\x03\x04"));
}

// ------------------------------------------------------------------ case directories

struct CaseFiles {
  std::vector<dcpmla::fuzz::CaseEntry> entries;
  void add(const std::string& name, Bytes content) {
    entries.push_back({dcpmla::fuzz::case_file_tag(name), std::move(content)});
  }
  void add_dir(const std::string& name) {
    entries.push_back(
        {std::uint8_t(dcpmla::fuzz::case_file_tag(name) | dcpmla::fuzz::kDirectoryTag), {}});
  }
  Bytes pack() const { return dcpmla::fuzz::pack_case(entries); }
};

Bytes i32s(std::vector<std::int32_t> v) {
  return npy_of(npy::Dtype::i4, {std::int64_t(v.size())}, v);
}

Bytes query(std::int64_t rows, int heads, std::uint32_t seed) {
  return npy_of(npy::Dtype::f4, {rows, heads, 576}, floats(std::size_t(rows) * heads * 576, seed));
}

// Form (a): W = 1, one request, Q = 1, T = 3.
CaseFiles case_latents_single() {
  CaseFiles c;
  c.add("config.json", bytes_of(R"({"world": 1, "heads": 1, "softmax_scale": 0.1352338,
 "block_size": 4, "kv_dtype": "fp32"})"));
  c.add("query_start_loc.npy", i32s({0, 1}));
  c.add("seq_lens.npy", i32s({3}));
  c.add("query.npy", query(1, 1, 1));
  c.add("kv.npy", npy_of(npy::Dtype::f4, {3, 576}, floats(3 * 576, 2)));
  return c;
}

// Form (a): W = 2, I = 2, bf16 everywhere, two requests (Q 2 and 1), mixed masks, one padding row.
CaseFiles case_latents_ragged() {
  CaseFiles c;
  c.add("config.json", bytes_of(R"({"world": 2, "interleave": 2, "heads": 2,
 "softmax_scale": 0.5, "block_size": 4, "kv_dtype": "bf16", "q_dtype": "bf16",
 "mask": ["causal", "full"], "num_tokens": 4, "_note": "one padding row"})"));
  c.add("query_start_loc.npy", npy_of(npy::Dtype::i8, {3}, std::vector<std::int64_t>{0, 2, 3}));
  c.add("seq_lens.npy", npy_of(npy::Dtype::i8, {2}, std::vector<std::int64_t>{5, 2}));
  c.add("query.npy", query(4, 2, 3));
  c.add("kv.npy", npy_of(npy::Dtype::f4, {7, 576}, floats(7 * 576, 4)));
  return c;
}

// Form (b): W = 2, fp32 rank caches of 2 blocks of 2 tokens, T = 3.
CaseFiles case_paged_fp32() {
  CaseFiles c;
  c.add("config.json", bytes_of(R"({"world": 2, "heads": 2, "softmax_scale": 0.25,
 "block_size": 2, "kv_dtype": "fp32", "mask": "causal"})"));
  c.add("query_start_loc.npy", i32s({0, 1}));
  c.add("seq_lens.npy", i32s({3}));
  c.add("query.npy", query(1, 2, 5));
  c.add("block_table.npy", npy_of(npy::Dtype::i4, {1, 2}, std::vector<std::int32_t>{1, -1}));
  c.add("cache_rank0.npy", npy_of(npy::Dtype::f4, {2, 2, 576}, floats(2 * 2 * 576, 6)));
  c.add("cache_rank1.npy", npy_of(npy::Dtype::f4, {2, 2, 576}, floats(2 * 2 * 576, 7)));
  return c;
}

// Form (b): W = 2, fp8 caches with k_scale, q_scale, two requests with Q = 2, full masks.
CaseFiles case_paged_fp8() {
  CaseFiles c;
  c.add("config.json", bytes_of(R"({"world": 2, "interleave": 1, "heads": 4,
 "softmax_scale": 0.1, "block_size": 1, "kv_dtype": "fp8", "k_scale": 0.5, "q_scale": 2,
 "mask": "full"})"));
  c.add("query_start_loc.npy", i32s({0, 2, 4}));
  c.add("seq_lens.npy", i32s({2, 3}));
  c.add("query.npy", query(4, 4, 8));
  c.add("block_table.npy", npy_of(npy::Dtype::i8, {2, 2}, std::vector<std::int64_t>{0, 1, 2, 3}));
  std::vector<std::uint8_t> fp8(4 * 576);
  for (std::size_t i = 0; i < fp8.size(); ++i) fp8[i] = std::uint8_t((i * 37) & 0x7e);
  c.add("cache_rank0.npy", npy_of(npy::Dtype::u1, {4, 1, 576}, fp8));
  c.add("cache_rank1.npy", npy_of(npy::Dtype::u1, {4, 1, 576}, fp8));
  return c;
}

// Form (b): W = 1, bf16 cache.
CaseFiles case_paged_bf16() {
  CaseFiles c;
  c.add("config.json", bytes_of(R"({"world": 1, "heads": 1, "softmax_scale": 1e-3,
 "block_size": 2, "kv_dtype": "bf16"})"));
  c.add("query_start_loc.npy", i32s({0, 1}));
  c.add("seq_lens.npy", i32s({4}));
  c.add("query.npy", query(1, 1, 9));
  c.add("block_table.npy", npy_of(npy::Dtype::i4, {1, 2}, std::vector<std::int32_t>{1, 0}));
  c.add("cache_rank0.npy",
        npy_of(npy::Dtype::u2, {2, 2, 576}, std::vector<std::uint16_t>(2 * 2 * 576, 0x3c00)));
  return c;
}

// Only padding: B = 0 and one padding row.
CaseFiles case_padding_only() {
  CaseFiles c;
  c.add("config.json", bytes_of(R"({"world": 1, "heads": 1, "softmax_scale": 0.5,
 "block_size": 16, "kv_dtype": "fp32", "num_tokens": 1})"));
  c.add("query_start_loc.npy", i32s({0}));
  c.add("seq_lens.npy", i32s({}));
  c.add("query.npy", query(1, 1, 10));
  c.add("kv.npy", npy_of(npy::Dtype::f4, {0, 576}, std::vector<float>{}));
  return c;
}

void write_case_seeds(const fs::path& dir) {
  save(dir / "latents-single", case_latents_single().pack());
  save(dir / "latents-ragged", case_latents_ragged().pack());
  save(dir / "paged-fp32", case_paged_fp32().pack());
  save(dir / "paged-fp8", case_paged_fp8().pack());
  save(dir / "paged-bf16", case_paged_bf16().pack());
  save(dir / "padding-only", case_padding_only().pack());
  // Refused cases, so that the fuzzer starts next to each kind of refusal.
  auto extra_rank = case_paged_fp32();
  extra_rank.add("cache_rank2.npy", npy_of(npy::Dtype::f4, {1, 2, 576}, floats(2 * 576, 11)));
  save(dir / "extra-rank-cache", extra_rank.pack());
  auto kv_dir = case_latents_single();
  kv_dir.entries.pop_back();
  kv_dir.add_dir("kv.npy");
  save(dir / "kv-is-a-directory", kv_dir.pack());
  auto both = case_paged_bf16();
  both.add("kv.npy", npy_of(npy::Dtype::f4, {4, 576}, floats(4 * 576, 12)));
  save(dir / "both-kv-forms", both.pack());
  auto nested = case_latents_single();
  nested.entries[0].content =
      bytes_of(R"({"world": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]], "heads": 1})");
  save(dir / "nested-config", nested.pack());
  auto typo = case_latents_single();
  typo.entries[0].content = bytes_of(R"({"world": 1, "heads": 1, "softmax-scale": 0.1,
 "block_size": 4, "kv_dtype": "fp32"})");
  save(dir / "unknown-field", typo.pack());
  auto big_block = case_latents_single();
  big_block.entries[0].content = bytes_of(R"({"world": 1, "heads": 1, "softmax_scale": 0.1,
 "block_size": 67108864, "kv_dtype": "fp32", "num_tokens": 1})");
  save(dir / "large-block-size", big_block.pack());
}

// ------------------------------------------------------------------ planner descriptions

// Bytes in the order plan_target.cc decodes them; small_int(lo, hi) takes v - lo as its selector.
struct PlanSeed {
  Bytes b;
  PlanSeed& sel(int v) {
    b.push_back(std::uint8_t(v));
    return *this;
  }
  PlanSeed& length(std::int64_t v) {   // selector 160 = a full 32-bit value follows
    if (v == -1) return sel(240 + 1);  // the edge value -1
    if (v < 160) return sel(int(v));
    sel(160);
    for (int i = 0; i < 4; ++i) b.push_back(std::uint8_t(std::uint64_t(v) >> (8 * i)));
    return *this;
  }
};

struct Request {
  int q;
  std::int64_t context;
  bool full = false;
};

// The device model and split settings of a plan description.
struct PlanSplit {
  int kv_chunk = 0;
  int workers = 0;
  int tile_pairs = 0;
  int min_split_tokens = 64;         // 1..240 (one selector byte)
  std::int64_t max_work_items = -1;  // -1 and -1: no limits written
  std::int64_t max_partial_rows = -1;
};

// world, rank, interleave, block_size / interleave, heads; requests; padding rows; split.
Bytes plan_seed(int W, int rank, int I, int k, int H, const std::vector<Request>& requests,
                int padding, const PlanSplit& split, int layout = 0, int slack = 0) {
  PlanSeed s;
  s.sel(W - 1).sel(rank).sel(I - 1).sel(k - 1).sel(H - 1).sel(int(requests.size())).sel(layout);
  if (layout & 0x01) s.sel(1);  // query_start_loc[0] = 1
  for (const auto& r : requests) s.sel(r.q - 1).sel(0).length(r.context).sel(r.full ? 200 : 0);
  if (padding < 0) {
    s.sel(0);
  } else {
    s.sel(1).sel(padding);
  }
  s.sel(slack).sel(0);  // consecutive block ids
  if (layout & 0x20) {
    s.sel(0).sel(0).sel(0).sel(0).sel(240 + 7);  // entry 0 becomes int64 max, wrapped to -1
  }
  s.sel(0);  // num_blocks: exactly the table
  s.sel(split.kv_chunk).sel(split.workers).sel(split.tile_pairs).sel(split.min_split_tokens - 1);
  if (split.max_work_items == -1 && split.max_partial_rows == -1) {
    s.sel(0);
  } else {
    s.sel(128).length(split.max_work_items).length(split.max_partial_rows);
  }
  return s.b;
}

void write_plan_seeds(const fs::path& dir) {
  save(dir / "single-token", plan_seed(1, 0, 1, 1, 1, {{1, 0}}, -1, {}));
  save(dir / "ragged-padded",
       plan_seed(2, 1, 1, 4, 16, {{1, 10}, {2, 100, true}, {4, 1000}}, 3, {.kv_chunk = 2}));
  save(dir / "interleaved",
       plan_seed(4, 3, 2, 4, 8, {{3, 37}, {1, 5}}, -1, {.workers = 16, .min_split_tokens = 8}));
  save(dir / "wide", plan_seed(8, 5, 4, 16, 128,
                               {{1, 100000},
                                {8, 3},
                                {2, 4000, true},
                                {1, 1},
                                {5, 70000},
                                {1, 0},
                                {7, 900},
                                {1, 64},
                                {2, 128},
                                {3, 129},
                                {1, 511},
                                {4, 12345}},
                               0, {.workers = 64, .tile_pairs = 64, .min_split_tokens = 128}));
  save(dir / "world3", plan_seed(3, 2, 1, 3, 6, {{2, 7}, {1, 8}, {1, 9}, {6, 300}}, 2,
                                 {.kv_chunk = 1, .tile_pairs = 5}));
  save(dir / "world6-full",
       plan_seed(6, 4, 2, 3, 12, {{2, 50, true}, {2, 51, true}, {1, 0, true}, {3, 2}, {1, 600}}, -1,
                 {.workers = 7, .tile_pairs = 16, .min_split_tokens = 18}));
  save(dir / "empty-batch", plan_seed(2, 0, 1, 1, 4, {}, 5, {.workers = 8}));
  // Limits that refuse the model's split, and limits that allow it.
  save(dir / "capacity-limits", plan_seed(1, 0, 1, 4, 4, {{1, 4000}, {2, 90}, {1, 3}}, -1,
                                          {.workers = 32,
                                           .tile_pairs = 8,
                                           .min_split_tokens = 16,
                                           .max_work_items = 6,
                                           .max_partial_rows = 40}));
  save(dir / "capacity-roomy", plan_seed(1, 0, 1, 4, 4, {{1, 4000}, {2, 90}, {1, 3}}, -1,
                                         {.workers = 32,
                                          .tile_pairs = 8,
                                          .min_split_tokens = 16,
                                          .max_work_items = 1000,
                                          .max_partial_rows = 1000}));
  // The last-wave cut: 3 waves of 4 workers, the longest requests in the last one.
  save(dir / "last-wave", plan_seed(1, 0, 1, 16, 1,
                                    {{1, 200},
                                     {1, 200},
                                     {1, 200},
                                     {1, 200},
                                     {1, 200},
                                     {1, 200},
                                     {1, 200},
                                     {1, 200},
                                     {1, 2000}},
                                    -1, {.workers = 4, .min_split_tokens = 16}));
  save(dir / "uniform", plan_seed(4, 1, 1, 16, 32, {{4, 200}, {4, 300}, {4, 10}}, -1,
                                  {.workers = 32, .tile_pairs = 64, .min_split_tokens = 32}));
  // A long request (T = 2^31 - 1) in blocks of 2^16 tokens.
  {
    PlanSeed s;
    s.sel(7).sel(2).sel(0).sel(240 + 8).sel(15).sel(1).sel(0);
    s.sel(0).sel(224).sel(240 + 2).sel(0);  // Q = 1, T = the raw length 2^31 - 1
    s.sel(0).sel(0).sel(0).sel(0).sel(0).sel(64).sel(0).sel(0);
    save(dir / "longest-request", s.b);
  }
  // Refused descriptions.
  save(dir / "bad-block-id", plan_seed(2, 0, 1, 4, 4, {{1, 30}, {2, 6}}, -1, {}, 0x20));
  save(dir / "wrong-mask-count", plan_seed(2, 0, 1, 4, 4, {{1, 30}}, -1, {}, 0x10));
  save(dir / "nonzero-first-start", plan_seed(1, 0, 1, 1, 4, {{1, 3}, {1, 3}}, -1, {}, 0x01));
  save(dir / "too-few-columns", plan_seed(1, 0, 1, 1, 1, {{1, 3}}, -1, {}, 0x04));
  save(dir / "negative-workers", plan_seed(1, 0, 1, 1, 1, {{1, 3}}, -1, {.workers = 240 + 1}));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR (writes OUT_DIR/npy, OUT_DIR/case, OUT_DIR/plan)\n",
                 argv[0]);
    return 2;
  }
  const fs::path out(argv[1]);
  write_npy_seeds(out / "npy");
  write_case_seeds(out / "case");
  write_plan_seeds(out / "plan");
  return 0;
}
