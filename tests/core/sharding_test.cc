// Sharding (SPEC section 2) against a brute-force simulation of dealing positions to ranks.
#include "dcpmla/sharding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "dcpmla/error.h"

namespace dcpmla {
namespace {

// Deals positions 0..L-1 to ranks the slow way: I consecutive positions to rank 0, the next I
// to rank 1, ..., wrapping after rank W-1. Each rank appends its positions in order.
struct Dealt {
  std::vector<int> owner;                 // [L]
  std::vector<std::int64_t> local_index;  // [L] position in its owner's list
  std::vector<std::int64_t> count;        // [W] positions per rank
};

Dealt deal(int W, int I, std::int64_t L) {
  Dealt d{std::vector<int>(std::size_t(L)), std::vector<std::int64_t>(std::size_t(L)),
          std::vector<std::int64_t>(std::size_t(W), 0)};
  int cur = 0, in_run = 0;
  for (std::int64_t p = 0; p < L; ++p) {
    d.owner[p] = cur;
    d.local_index[p] = d.count[cur]++;
    if (++in_run == I) {
      in_run = 0;
      cur = (cur + 1) % W;
    }
  }
  return d;
}

class ShardingBruteForce : public ::testing::TestWithParam<int> {};

TEST_P(ShardingBruteForce, OwnerLocalIndexAndLocalLenMatchDealing) {
  const int I = GetParam();
  for (int W = 1; W <= 16; ++W) {
    const std::int64_t max_len = 3 * std::int64_t(W) * I + 7;
    const Dealt d = deal(W, I, max_len);
    for (int r = 0; r < W; ++r) {
      const Sharding sh{W, r, I};
      ASSERT_NO_THROW(sh.validate(I * 4));
      // owner and local_index of every position
      std::int64_t expect_next = 0;
      for (std::int64_t p = 0; p < max_len; ++p) {
        ASSERT_EQ(sh.owner(p), d.owner[p]) << "W=" << W << " I=" << I << " p=" << p;
        if (d.owner[p] != r) continue;
        // dense and order-preserving: this rank's positions get 0, 1, 2, ... in order
        ASSERT_EQ(sh.local_index(p), expect_next) << "W=" << W << " I=" << I << " p=" << p;
        ASSERT_EQ(sh.local_index(p), d.local_index[p]);
        ++expect_next;
      }
      // local_len(L) is the number of positions < L owned by r, for every L
      std::int64_t owned = 0;
      for (std::int64_t L = 0; L <= max_len; ++L) {
        ASSERT_EQ(sh.local_len(L), owned) << "W=" << W << " I=" << I << " r=" << r << " L=" << L;
        ASSERT_EQ(sh.local_len_of(r, L), owned);
        if (L < max_len && d.owner[L] == r) ++owned;
        if (I == 1) {
          // closed form max(0, ceil((L - r) / W))
          const std::int64_t closed = std::max<std::int64_t>(0, (L - r + W - 1) / W);
          ASSERT_EQ(sh.local_len(L), L - r <= 0 ? 0 : closed) << "W=" << W << " r=" << r;
        }
      }
    }
    // sum over ranks equals L
    for (std::int64_t L = 0; L <= max_len; ++L) {
      std::int64_t sum = 0;
      const Sharding sh{W, 0, I};
      for (int r = 0; r < W; ++r) sum += sh.local_len_of(r, L);
      ASSERT_EQ(sum, L) << "W=" << W << " I=" << I;
    }
  }
}

TEST_P(ShardingBruteForce, LargeLengthsSumAndAgreeWithDealing) {
  const int I = GetParam();
  std::mt19937_64 rng(42 + I);
  for (int W = 1; W <= 16; ++W) {
    const std::int64_t L = 1 + std::int64_t(rng() % 20000);
    const Dealt d = deal(W, I, L);
    std::int64_t sum = 0;
    for (int r = 0; r < W; ++r) {
      const Sharding sh{W, r, I};
      EXPECT_EQ(sh.local_len(L), d.count[r]) << "W=" << W << " I=" << I << " L=" << L;
      sum += sh.local_len(L);
    }
    EXPECT_EQ(sum, L);
  }
}

TEST_P(ShardingBruteForce, SlotMappingMatchesPagedAppend) {
  const int I = GetParam();
  std::mt19937_64 rng(7 * I);
  for (int W = 1; W <= 16; ++W) {
    for (int bs : {I, 2 * I, 64 * I}) {
      if (bs % I != 0) continue;
      const std::int64_t L = 1 + std::int64_t(rng() % (std::int64_t(4) * W * bs + 50));
      const Dealt d = deal(W, I, L);
      const std::int64_t blocks = (d.count[0] + bs - 1) / bs + 1;
      // one shared block-table row, a random permutation of 2 * blocks ids
      std::vector<std::int32_t> ids(std::size_t(2 * blocks));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      const std::vector<std::int32_t> row(ids.begin(), ids.begin() + blocks);
      for (int r = 0; r < W; ++r) {
        const Sharding sh{W, r, I};
        ASSERT_NO_THROW(sh.validate(bs));
        std::set<std::int64_t> used;
        for (std::int64_t p = 0; p < L; ++p) {
          const std::int64_t got = sh.slot(p, row, bs);
          if (d.owner[p] != r) {
            ASSERT_EQ(got, -1) << "non-owner W=" << W << " r=" << r << " p=" << p;
            continue;
          }
          // the k-th token this rank stores lands in page row[k / bs] at offset k % bs
          const std::int64_t k = d.local_index[p];
          const std::int64_t want = std::int64_t(row[k / bs]) * bs + k % bs;
          ASSERT_EQ(got, want) << "W=" << W << " I=" << I << " bs=" << bs << " r=" << r
                               << " p=" << p;
          ASSERT_TRUE(used.insert(got).second) << "two positions share slot " << got;
        }
        EXPECT_EQ(std::int64_t(used.size()), sh.local_len(L));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Interleave, ShardingBruteForce, ::testing::Values(1, 2, 4, 16, 64));

TEST(Sharding, SpecVectorsLocalLen) {
  const Sharding w4{4, 0, 1};
  std::vector<std::int64_t> got;
  for (int r = 0; r < 4; ++r) got.push_back(w4.local_len_of(r, 10));
  EXPECT_EQ(got, (std::vector<std::int64_t>{3, 3, 2, 2}));
  const Sharding w2{2, 0, 4};
  EXPECT_EQ(w2.local_len_of(0, 10), 6);
  EXPECT_EQ(w2.local_len_of(1, 10), 4);
}

TEST(Sharding, SpecVectorSlot) {
  const std::vector<std::int32_t> bt{7, 3, 9};
  for (int r = 0; r < 8; ++r) {
    const Sharding sh{8, r, 1};
    EXPECT_EQ(sh.owner(1000), 0);
    EXPECT_EQ(sh.slot(1000, bt, 64), r == 0 ? 253 : -1) << "rank " << r;
  }
}

TEST(Sharding, SlotPastTheBlockTableRowThrows) {
  const std::vector<std::int32_t> bt{7};
  const Sharding sh{2, 0, 1};
  EXPECT_EQ(sh.slot(126, bt, 64), 7 * 64 + 63);
  try {
    sh.slot(128, bt, 64);  // local index 64 needs a second block
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shape_mismatch);
    EXPECT_EQ(e.argument(), "block_table row");
  }
}

// sharding.h: slot() returns "-1 when another rank owns p". For a position this rank owns, a
// missing (-1) block-table entry must not turn into -1 ("skip this write", silently dropping the
// token's KV) or into another negative slot.
TEST(Sharding, SlotOfAnOwnedPositionIsNeverNegative) {
  const std::vector<std::int32_t> bt = {4, -1};
  for (int bs : {1, 16}) {
    const Sharding sh{1, 0, 1};
    for (std::int64_t p = 0; p < 2 * bs; ++p) {
      try {
        const std::int64_t s = sh.slot(p, bt, bs);
        EXPECT_GE(s, 0) << "block size " << bs << " position " << p
                        << " is owned by this rank but got slot " << s;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::out_of_range) << e.what();
      }
    }
  }
}

void expect_validate_error(const Sharding& sh, int block_size, ErrorCode code,
                           const std::string& arg) {
  try {
    sh.validate(block_size);
    ADD_FAILURE() << "expected an Error for world=" << sh.world << " rank=" << sh.rank
                  << " interleave=" << sh.interleave << " block_size=" << block_size;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_NE(std::string(e.what()).find(arg), std::string::npos) << e.what();
  }
}

TEST(Sharding, ValidateRejectsInconsistentSettings) {
  expect_validate_error({0, 0, 1}, 64, ErrorCode::invalid_argument, "world");
  expect_validate_error({-3, 0, 1}, 64, ErrorCode::invalid_argument, "world");
  expect_validate_error({4, 4, 1}, 64, ErrorCode::out_of_range, "rank");
  expect_validate_error({4, -1, 1}, 64, ErrorCode::out_of_range, "rank");
  expect_validate_error({4, 0, 0}, 64, ErrorCode::invalid_argument, "interleave");
  expect_validate_error({4, 0, -2}, 64, ErrorCode::invalid_argument, "interleave");
  expect_validate_error({4, 0, 1}, 0, ErrorCode::invalid_argument, "block_size");
  expect_validate_error({4, 0, 3}, 64, ErrorCode::invalid_argument, "interleave");
  expect_validate_error({4, 0, 128}, 64, ErrorCode::invalid_argument, "interleave");
  EXPECT_NO_THROW((Sharding{4, 3, 64}.validate(64)));
  EXPECT_NO_THROW((Sharding{1, 0, 1}.validate(1)));
}

}  // namespace
}  // namespace dcpmla
