// The planner's integer rules (src/core/plan_rules.h) against plain arithmetic.
#include "core/plan_rules.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace dcpmla::rules {
namespace {

constexpr std::int64_t kMax = std::int64_t(1) << 31;

std::int64_t reference_ceil(std::int64_t a, std::int64_t d) {
  return (a + d - 1) / d;
}

// Divisors and dividends where a rounding error would show first: around powers of two and at
// the ends of the range [1, 2^31).
std::vector<std::int64_t> edge_values() {
  std::vector<std::int64_t> v{1, 2, 3, 5, 7, 63, 64, 65, 127, 1000003, kMax - 2, kMax - 1};
  for (int l = 1; l < 31; ++l) {
    for (std::int64_t delta : {-1, 0, 1}) v.push_back((std::int64_t(1) << l) + delta);
  }
  return v;
}

TEST(PlanRules, CeilDividerMatchesDivisionAtTheEdges) {
  const auto values = edge_values();
  for (const std::int64_t d : values) {
    const CeilDivider divider(d);
    for (const std::int64_t a : values) {
      ASSERT_EQ(divider.ceil(a), reference_ceil(a, d)) << a << " / " << d;
    }
    ASSERT_EQ(divider.ceil(kMax), reference_ceil(kMax, d)) << "2^31 / " << d;
    ASSERT_EQ(divider.ceil(0), 0) << "0 / " << d;
    for (const std::int64_t x : values) {
      if (x < kMax) {
        ASSERT_EQ(divider.floor(x), x / d) << "floor " << x << " / " << d;
      }
    }
  }
}

TEST(PlanRules, CeilDividerMatchesDivisionOnRandomOperands) {
  std::mt19937_64 rng(31);
  for (int i = 0; i < 20000; ++i) {
    // Divisors of every magnitude: a random bit length, then a random value of that length.
    const int bits = int(rng() % 31) + 1;
    const std::int64_t d =
        std::max<std::int64_t>(1, std::int64_t(rng() % (std::uint64_t(1) << bits)));
    const CeilDivider divider(d);
    for (int j = 0; j < 16; ++j) {
      const std::int64_t a = std::int64_t(rng() % std::uint64_t(kMax)) + 1;
      ASSERT_EQ(divider.ceil(a), reference_ceil(a, d)) << a << " / " << d;
      ASSERT_EQ(divider.ceil(a), ceil_div(a, d));
      ASSERT_EQ(divider.floor(a - 1), (a - 1) / d) << "floor " << a - 1 << " / " << d;
    }
  }
}

// The GPU makes CeilDivider's multiplier from a double quotient: the same as the host's integer
// division for every divisor's shift, at the edges of each bit length and on random divisors.
TEST(PlanRules, DoubleQuotientMatchesDivision) {
  auto check = [](std::int64_t d) {
    const int l = d > 1 ? 64 - count_leading_zeros(std::uint64_t(d - 1)) : 0;
    const int s = 31 + l;
    ASSERT_EQ(floor_pow2_over_by_double(s, d), (std::uint64_t(1) << s) / std::uint64_t(d))
        << "2^" << s << " / " << d;
    ASSERT_LT(floor_pow2_over_by_double(s, d) + 1, std::uint64_t(1) << 32) << d;
  };
  for (int bits = 0; bits < 31; ++bits) {
    const std::int64_t p = std::int64_t(1) << bits;
    for (const std::int64_t d : {p - 1, p, p + 1, 3 * p / 2, 2 * p - 1}) {
      if (d >= 1 && d < (std::int64_t(1) << 31)) check(d);
    }
  }
  std::mt19937_64 rng(37);
  for (int i = 0; i < 200000; ++i) {
    check(std::int64_t(rng() % ((std::uint64_t(1) << 31) - 1)) + 1);
  }
}

// The GPU planner's multiplier form of a rank's share of a length: the same as local_len for
// every length below 2^31, on powers of two and other W x I alike.
TEST(PlanRules, LocalLenByMultiplierMatchesLocalLen) {
  std::mt19937_64 rng(41);
  for (const int world : {1, 2, 3, 5, 8, 12, 64}) {
    for (const int interleave : {1, 2, 4, 7, 16, 64}) {
      ASSERT_TRUE(LocalLen::fits(world, interleave));
      for (int rank = 0; rank < world; ++rank) {
        const LocalLen by_multiplier(world, rank, interleave);
        for (const std::int64_t L :
             {std::int64_t(0), std::int64_t(1), std::int64_t(interleave),
              std::int64_t(world) * interleave - 1, (std::int64_t(1) << 31) - 1}) {
          ASSERT_EQ(by_multiplier(L), local_len(L, world, rank, interleave))
              << L << " " << world << " " << rank << " " << interleave;
        }
        for (int i = 0; i < 2000; ++i) {
          const auto L = std::int64_t(rng() % (std::uint64_t(1) << 31));
          ASSERT_EQ(by_multiplier(L), local_len(L, world, rank, interleave))
              << L << " " << world << " " << rank << " " << interleave;
        }
      }
    }
  }
  EXPECT_FALSE(LocalLen::fits(1 << 16, 1 << 15));
}

TEST(PlanRules, ClampVisibleKeepsTheItemsRange) {
  EXPECT_EQ(clamp_visible(50, 64, 128), 64);    // the row sees nothing of the split
  EXPECT_EQ(clamp_visible(100, 64, 128), 100);  // part of it
  EXPECT_EQ(clamp_visible(500, 64, 128), 128);  // all of it
}

TEST(PlanRules, TwoTilesAreEqualHalvesUnlessTheSecondIsNarrow) {
  auto step = [](std::int32_t pairs) {
    return tile_step(pairs, tiles_per_split(pairs, 1, 64), 64);
  };
  EXPECT_EQ(step(40), 64);   // one tile
  EXPECT_EQ(step(96), 48);   // Kimi K3's DCP 8 rank at Q 1: 48 + 48, not 64 + 32
  EXPECT_EQ(step(97), 49);   // odd: 49 + 48
  EXPECT_EQ(step(81), 41);   // a second tile of 17 pairs would be wide
  EXPECT_EQ(step(80), 64);   // 64 + 16: the 16-pair tile runs narrow
  EXPECT_EQ(step(128), 64);  // two full tiles
  EXPECT_EQ(step(129), 64);  // three tiles: full ones and a tail
  EXPECT_EQ(step(200), 64);
  EXPECT_EQ(tile_step(96, 1, 0), 96);  // no tiles: one item holds every pair
  // The largest int32 count of pairs in two tiles halves without overflow.
  constexpr std::int32_t kMaxPairs = 0x7fffffff;
  EXPECT_EQ(tile_step(kMaxPairs, 2, (1 << 30) + 1), (1 << 30));
  // Every pair lies in one of the tiles, none of which is over tile_pairs.
  for (std::int32_t pairs = 1; pairs <= 300; ++pairs) {
    const std::int64_t tiles = tiles_per_split(pairs, 1, 64);
    const std::int32_t s = tile_step(pairs, tiles, 64);
    EXPECT_LE(s, 64);
    EXPECT_EQ(ceil_div(pairs, s), tiles) << pairs;
  }
}

}  // namespace
}  // namespace dcpmla::rules
