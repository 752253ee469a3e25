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

TEST(PlanRules, ClampVisibleKeepsTheItemsRange) {
  EXPECT_EQ(clamp_visible(50, 64, 128), 64);    // the row sees nothing of the split
  EXPECT_EQ(clamp_visible(100, 64, 128), 100);  // part of it
  EXPECT_EQ(clamp_visible(500, 64, 128), 128);  // all of it
}

}  // namespace
}  // namespace dcpmla::rules
