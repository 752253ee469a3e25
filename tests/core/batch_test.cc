// Batch helpers: row bounds, flatten() and step_slot_mapping().
#include "dcpmla/batch.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dcpmla/error.h"
#include "dcpmla/sharding.h"

namespace dcpmla {
namespace {

// (3, 1) with T = [31, 35], two padding rows, request 0 with a full mask.
Batch sample_batch() {
  Batch b;
  b.query_start_loc = {0, 3, 4};
  b.total_len = {31, 35};
  b.mask = {Mask::full, Mask::causal};
  b.max_blocks = 3;
  b.block_table = {5, 2, -1, 7, 1, 0};
  b.num_tokens = 6;
  return b;
}

TEST(Batch, Accessors) {
  const Batch b = sample_batch();
  EXPECT_EQ(b.num_requests(), 2);
  EXPECT_EQ(b.real_tokens(), 4);
  EXPECT_EQ(b.rows(), 6);
  EXPECT_EQ(b.q_len(0), 3);
  EXPECT_EQ(b.q_len(1), 1);
  EXPECT_EQ(b.mask_of(0), Mask::full);
  EXPECT_EQ(b.block_row(1)[0], 7);
  EXPECT_EQ(b.block_row(1).size(), 3u);
  Batch nopad = b;
  nopad.num_tokens = -1;
  nopad.mask.clear();
  EXPECT_EQ(nopad.rows(), 4);
  EXPECT_EQ(nopad.mask_of(0), Mask::causal);
}

TEST(Batch, RowGlobalBound) {
  // Q = 3, T = 10: bounds 8, 9, 10
  EXPECT_EQ(row_global_bound(10, 3, 0, Mask::causal), 8);
  EXPECT_EQ(row_global_bound(10, 3, 1, Mask::causal), 9);
  EXPECT_EQ(row_global_bound(10, 3, 2, Mask::causal), 10);
  EXPECT_EQ(row_global_bound(10, 3, 0, Mask::full), 10);
  EXPECT_EQ(row_global_bound(1, 1, 0, Mask::causal), 1);
}

TEST(Batch, FlattenSpecRaggedExample) {
  const Batch b = sample_batch();
  const Batch f = flatten(b);
  EXPECT_EQ(f.query_start_loc, (std::vector<std::int32_t>{0, 1, 2, 3, 4}));
  // request 0 is full: every row bounded at 31; request 1 at 35
  EXPECT_EQ(f.total_len, (std::vector<std::int64_t>{31, 31, 31, 35}));
  EXPECT_EQ(f.num_tokens, 6);  // padding kept
  EXPECT_EQ(f.max_blocks, 3);
  EXPECT_EQ(f.block_table, (std::vector<std::int32_t>{5, 2, -1, 5, 2, -1, 5, 2, -1, 7, 1, 0}));
  for (int i = 0; i < f.num_requests(); ++i) EXPECT_EQ(f.mask_of(i), Mask::causal);

  Batch causal = b;
  causal.mask.clear();
  EXPECT_EQ(flatten(causal).total_len, (std::vector<std::int64_t>{29, 30, 31, 35}));
}

TEST(Batch, FlattenRandomBatches) {
  std::mt19937_64 rng(11);
  for (int iter = 0; iter < 200; ++iter) {
    Batch b;
    const int B = 1 + int(rng() % 6);
    b.query_start_loc = {0};
    b.max_blocks = 1 + int(rng() % 4);
    for (int r = 0; r < B; ++r) {
      const int Q = 1 + int(rng() % 8);
      b.query_start_loc.push_back(b.query_start_loc.back() + Q);
      b.total_len.push_back(Q + std::int64_t(rng() % 100));
      b.mask.push_back(rng() % 3 == 0 ? Mask::full : Mask::causal);
      for (int c = 0; c < b.max_blocks; ++c) b.block_table.push_back(int(rng() % 50));
    }
    b.num_tokens = rng() % 2 ? -1 : b.real_tokens() + std::int64_t(rng() % 4);
    const Batch f = flatten(b);
    ASSERT_EQ(f.num_requests(), b.real_tokens());
    ASSERT_EQ(f.rows(), b.rows());
    for (int r = 0; r < B; ++r) {
      for (int j = 0; j < b.q_len(r); ++j) {
        const int i = b.query_start_loc[r] + j;
        ASSERT_EQ(f.q_len(i), 1);
        ASSERT_EQ(f.query_start_loc[i], i);
        ASSERT_EQ(f.total_len[i], row_global_bound(b.total_len[r], b.q_len(r), j, b.mask_of(r)));
        ASSERT_EQ(f.mask_of(i), Mask::causal);
        for (int c = 0; c < b.max_blocks; ++c) ASSERT_EQ(f.block_row(i)[c], b.block_row(r)[c]);
      }
    }
  }
}

TEST(Batch, StepSlotMappingMatchesSharding) {
  std::mt19937_64 rng(5);
  for (int iter = 0; iter < 200; ++iter) {
    const int W = 1 + int(rng() % 8);
    const int I = 1 << int(rng() % 3);
    const int bs = I * (1 + int(rng() % 4));
    Batch b;
    const int B = 1 + int(rng() % 5);
    b.query_start_loc = {0};
    std::int64_t maxT = 0;
    for (int r = 0; r < B; ++r) {
      const int Q = 1 + int(rng() % 8);
      b.query_start_loc.push_back(b.query_start_loc.back() + Q);
      b.total_len.push_back(Q + std::int64_t(rng() % 200));
      maxT = std::max(maxT, b.total_len.back());
    }
    const Sharding r0{W, 0, I};
    b.max_blocks = std::int32_t((r0.local_len(maxT) + bs - 1) / bs);
    for (int i = 0; i < B * b.max_blocks; ++i) b.block_table.push_back(int(rng() % 1000));
    const int pad = int(rng() % 3);
    b.num_tokens = pad ? b.real_tokens() + pad : -1;
    std::vector<int> writers(std::size_t(b.real_tokens()), 0);
    for (int rank = 0; rank < W; ++rank) {
      const Sharding sh{W, rank, I};
      const auto slots = step_slot_mapping(b, sh, bs);
      ASSERT_EQ(std::int64_t(slots.size()), b.rows());
      for (int r = 0; r < B; ++r) {
        const int Q = b.q_len(r);
        for (int j = 0; j < Q; ++j) {
          const int i = b.query_start_loc[r] + j;
          const std::int64_t p = b.total_len[r] - Q + j;
          ASSERT_EQ(slots[i], sh.slot(p, b.block_row(r), bs));
          if (sh.owner(p) == rank) {
            ASSERT_GE(slots[i], 0);
            ++writers[i];
          } else {
            ASSERT_EQ(slots[i], -1);
          }
        }
      }
      for (std::int64_t i = b.real_tokens(); i < b.rows(); ++i) ASSERT_EQ(slots[i], -1);
    }
    // every new token is written by exactly one rank
    for (int w : writers) ASSERT_EQ(w, 1);
  }
}

// error.h: "Typed errors for every rejected input". flatten() and step_slot_mapping() take a
// Batch and index it by its own description (the testing runner flattens before make_plan
// validates), so a malformed batch must raise an Error instead of reading past its arrays.
TEST(Batch, FlattenRejectsMalformedBatch) {
  Batch b = sample_batch();
  b.mask = {Mask::full};  // 1 entry for 2 requests
  EXPECT_THROW(flatten(b), Error);
}

TEST(Batch, StepSlotMappingRejectsMalformedBatch) {
  Batch b = sample_batch();
  b.block_table.resize(3);  // 3 entries for 2 requests x 3 columns
  EXPECT_THROW(step_slot_mapping(b, Sharding{1, 0, 1}, 16), Error);
}

// batch.h: validate_layout checks query_start_loc, total_len, mask, num_tokens and block_table
// sizes, naming the first bad argument.
TEST(Batch, ValidateLayout) {
  EXPECT_NO_THROW(validate_layout(sample_batch()));
  Batch empty;
  empty.query_start_loc = {0};
  EXPECT_NO_THROW(validate_layout(empty));
  struct Case {
    const char* arg;
    ErrorCode code;
    void (*edit)(Batch&);
  };
  const Case cases[] = {
      {"query_start_loc", ErrorCode::shape_mismatch,
       [](Batch& b) {
         b.query_start_loc = {0, 3};
       }},
      {"query_start_loc[0]", ErrorCode::inconsistent,
       [](Batch& b) {
         b.query_start_loc = {1, 3, 4};
       }},
      {"query_start_loc[2]", ErrorCode::inconsistent,
       [](Batch& b) {
         b.query_start_loc = {0, 3, 3};
       }},
      {"mask", ErrorCode::shape_mismatch, [](Batch& b) { b.mask = {Mask::full}; }},
      {"num_tokens", ErrorCode::inconsistent, [](Batch& b) { b.num_tokens = 3; }},
      {"total_len[0]", ErrorCode::inconsistent,
       [](Batch& b) {
         b.total_len = {2, 35};
       }},
      {"max_blocks", ErrorCode::invalid_argument, [](Batch& b) { b.max_blocks = -1; }},
      {"block_table", ErrorCode::shape_mismatch, [](Batch& b) { b.block_table.pop_back(); }},
      {"block_table", ErrorCode::shape_mismatch, [](Batch& b) { b.block_table.push_back(0); }},
  };
  for (const auto& c : cases) {
    Batch b = sample_batch();
    c.edit(b);
    try {
      validate_layout(b);
      ADD_FAILURE() << "accepted a malformed layout; expected an error naming " << c.arg;
    } catch (const Error& e) {
      EXPECT_EQ(e.argument(), c.arg) << e.what();
      EXPECT_EQ(e.code(), c.code) << e.what();
    }
  }
}

TEST(Batch, StepSlotMappingSpecVector) {
  // one request whose last query token is global position 1000: T = 1001, Q = 1
  Batch b;
  b.query_start_loc = {0, 1};
  b.total_len = {1001};
  b.max_blocks = 3;
  b.block_table = {7, 3, 9};
  EXPECT_EQ(step_slot_mapping(b, Sharding{8, 0, 1}, 64), (std::vector<std::int64_t>{253}));
  EXPECT_EQ(step_slot_mapping(b, Sharding{8, 5, 1}, 64), (std::vector<std::int64_t>{-1}));
}

}  // namespace
}  // namespace dcpmla
