// SPEC section 5 end to end, for any backend: a NaN or infinity in a query element or in a key
// that a row reads makes exactly that row's affected heads O = NaN, LSE = NaN through the split
// merge and both DCP combines; every other (row, head) keeps the bits of the clean run, and NaN
// in unused pages never reaches anything.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dcpmla/testing/runner.h"
#include "dcpmla/testing/scenario.h"
#include "testing/test_support.h"

namespace dcpmla::testing {

// Requests Q 4, 1, 3 at T 200, 150, 90 and two padding rows: row j of request 0 sees global
// positions < 197 + j.
inline Scenario non_finite_scenario(ScenarioSpec spec) {
  spec.heads = 8;
  spec.block_size = 16;
  spec.padding_rows = 2;
  return make_fixed_scenario(spec, std::vector<int>{4, 1, 3},
                             std::vector<std::int64_t>{200, 150, 90});
}

// Where a corrupted value sits.
struct Corruption {
  std::string what;
  bool in_query = false;
  int request = 0;  // key: request and global position
  std::int64_t position = 0;
  std::int64_t row = 0;  // query: row and head
  int head = 0;
  int dim = 0;
  float value = std::numeric_limits<float>::quiet_NaN();
};

inline std::vector<Corruption> corruptions() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  return {
      {"NaN key read by every row of its request, early split", false, 0, 5, 0, 0, 3, nan},
      {"NaN key in the middle of a request", false, 0, 101, 0, 0, 200, nan},
      {"NaN key seen by the last three of four rows", false, 0, 197, 0, 0, 7, nan},
      {"NaN rope element of a key", false, 2, 40, 0, 0, 570, nan},
      {"-inf latent element of a key", false, 1, 77, 0, 0, 11, -inf},
      {"+inf rope element of a key", false, 2, 89, 0, 0, 530, inf},
      {"NaN query element", true, 0, 0, 2, 5, 100, nan},
      {"+inf query element", true, 0, 0, 4, 0, 575, inf},
      {"-inf query element", true, 0, 0, 7, 3, 0, -inf},
  };
}

// Corrupts a copy of the scenario as `c` says (quantisation keeps NaN, and infinities in f32 and
// bf16; fp8 e4m3 has no infinity, so those cases are skipped for fp8 caches by the caller).
inline Scenario corrupted(const Scenario& sc, const Corruption& c) {
  Scenario out = sc;
  const int H = sc.spec.heads;
  if (c.in_query) {
    out.q[(std::size_t(c.row) * H + c.head) * kHeadDim + c.dim] = c.value;
  } else {
    out.kv[c.request][std::size_t(c.position) * kHeadDim + c.dim] = c.value;
  }
  return out;
}

// Whether (row, head) reads the corrupted value.
inline bool reads(const Scenario& sc, const Corruption& c, std::int64_t row, int head) {
  if (c.in_query) return row == c.row && head == c.head;
  const Batch& b = sc.batch;
  const int begin = b.query_start_loc[c.request], q = b.q_len(c.request);
  if (row < begin || row >= begin + q) return false;
  // SPEC section 3 written out (not the library's row_global_bound).
  const std::int64_t T = b.total_len[c.request], j = row - begin;
  const std::int64_t bound = b.mask_of(c.request) == Mask::full ? T : T - q + 1 + j;
  return c.position < bound;
}

// `clean` and `dirty` are runs of the clean and the corrupted scenario with the same options.
// strict_o: every (row, head) that does not read the value keeps O's bits too. A kernel that
// multiplies a whole KV tile by P, masked keys included, may turn 0 * NaN into NaN in the O (never
// the LSE) of an earlier draft row of the same request whose bound the corrupted key is past.
inline void expect_only_readers_poisoned(const Scenario& sc, const Corruption& c,
                                         const RunResult& clean, const RunResult& dirty,
                                         bool strict_o) {
  const int H = sc.spec.heads;
  ASSERT_EQ(clean.lse.size(), dirty.lse.size());
  int poisoned = 0;
  for (std::int64_t row = 0; row < sc.batch.rows(); ++row) {
    for (int h = 0; h < H; ++h) {
      const std::size_t k = std::size_t(row) * H + h;
      const float* o = &dirty.out[k * kLatentDim];
      if (reads(sc, c, row, h)) {
        ++poisoned;
        ASSERT_TRUE(std::isnan(dirty.lse[k]))
            << c.what << ": LSE of (row " << row << ", head " << h << ") is " << dirty.lse[k];
        for (int d = 0; d < kLatentDim; ++d) {
          ASSERT_TRUE(std::isnan(o[d])) << c.what << ": O of (row " << row << ", head " << h
                                        << ") dim " << d << " is " << o[d];
        }
        continue;
      }
      ASSERT_EQ(std::memcmp(&dirty.lse[k], &clean.lse[k], sizeof(float)), 0)
          << c.what << ": LSE of (row " << row << ", head " << h << ") changed";
      const bool same_request_draft = !c.in_query && row >= sc.batch.query_start_loc[c.request] &&
                                      row < sc.batch.query_start_loc[c.request + 1];
      if (!strict_o && same_request_draft) continue;
      ASSERT_EQ(std::memcmp(o, &clean.out[k * kLatentDim], kLatentDim * sizeof(float)), 0)
          << c.what << ": O of (row " << row << ", head " << h << ") changed";
    }
  }
  EXPECT_GT(poisoned, 0) << c.what;
}

// Runs every corruption through `make_backend` with the options, against the clean run.
inline void check_non_finite(const Scenario& sc, const BackendFactory& make_backend,
                             const RunOptions& options, bool strict_o) {
  const RunResult clean = run_dcp(sc, make_backend, options);
  for (const Corruption& c : corruptions()) {
    if (sc.spec.kv_dtype == DType::fp8_e4m3 && !c.in_query && std::isinf(c.value)) continue;
    SCOPED_TRACE(c.what);
    const Scenario dirty_scenario = corrupted(sc, c);
    const RunResult dirty = run_dcp(dirty_scenario, make_backend, options);
    expect_only_readers_poisoned(sc, c, clean, dirty, strict_o);
  }
}

}  // namespace dcpmla::testing
