// The decode kernel selection (host only, no GPU needed): which kernel each configuration runs,
// the narrow form for tiles of at most 16 pairs, and why unsupported configurations are refused.
#include "cuda/kernel_selection.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "dcpmla/error.h"

namespace dcpmla::cuda {
namespace {

DecodeKernelChoice pick(DType q, DType cache, int block_size = 64, int tile_pairs = 64) {
  return select_decode_kernel({q, cache, 16, block_size, tile_pairs});
}

TEST(KernelSelection, Bf16QueryRunsTheTensorCoreKernels) {
  EXPECT_EQ(pick(DType::bf16, DType::bf16).kernel, DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(pick(DType::bf16, DType::bf16, 16).kernel, DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(pick(DType::bf16, DType::bf16, 128).kernel, DecodeKernel::sm90_bf16_bulk);
  // Pages that neither hold whole 64-row boxes nor fit evenly in one: the threads' copies.
  EXPECT_EQ(pick(DType::bf16, DType::bf16, 1).kernel, DecodeKernel::sm90_bf16);
  EXPECT_EQ(pick(DType::bf16, DType::bf16, 48).kernel, DecodeKernel::sm90_bf16);
  EXPECT_EQ(pick(DType::bf16, DType::fp8_e4m3).kernel, DecodeKernel::sm90_fp8);
  EXPECT_EQ(pick(DType::bf16, DType::fp8_e4m3, 16).kernel, DecodeKernel::sm90_fp8);
}

TEST(KernelSelection, F32QueryOrCacheRunsTheFmaKernel) {
  for (DType cache : {DType::f32, DType::bf16, DType::fp8_e4m3}) {
    const DecodeKernelChoice c = pick(DType::f32, cache);
    EXPECT_EQ(c.kernel, DecodeKernel::fma) << to_string(cache);
    EXPECT_EQ(c.narrow_pairs, 0);
    EXPECT_TRUE(c.why_not.empty());
  }
  EXPECT_EQ(pick(DType::bf16, DType::f32).kernel, DecodeKernel::fma);
}

TEST(KernelSelection, TilesOfAtMost16PairsRunTheNarrowForm) {
  EXPECT_EQ(pick(DType::bf16, DType::bf16, 64, 1).narrow_pairs, 16);
  EXPECT_EQ(pick(DType::bf16, DType::fp8_e4m3, 64, 16).narrow_pairs, 16);
  EXPECT_EQ(pick(DType::bf16, DType::bf16, 64, 17).narrow_pairs, 0);
  EXPECT_EQ(pick(DType::bf16, DType::bf16, 64, 32).narrow_pairs, 0);
  EXPECT_EQ(pick(DType::bf16, DType::bf16, 64, 64).narrow_pairs, 0);
}

DecodeKernel with_rounds(DType cache, int heads, int block_size) {
  return select_decode_kernel({DType::bf16, cache, heads, block_size, 64, Rounds::all}).kernel;
}

TEST(KernelSelection, RoundsTakePagesOf64RowBoxes) {
  EXPECT_EQ(with_rounds(DType::bf16, 128, 64), DecodeKernel::sm90_bf16_rounds);
  EXPECT_EQ(with_rounds(DType::bf16, 32, 128), DecodeKernel::sm90_bf16_rounds);
  EXPECT_EQ(with_rounds(DType::bf16, 96, 256), DecodeKernel::sm90_bf16_rounds);
  EXPECT_EQ(with_rounds(DType::fp8_e4m3, 128, 64), DecodeKernel::sm90_fp8_rounds);
  EXPECT_EQ(with_rounds(DType::fp8_e4m3, 96, 128), DecodeKernel::sm90_fp8_rounds);
  // Every head count: bf16 tiles of at most 16 pairs run the narrow form inside the round
  // decode, fp8 ones run wide.
  EXPECT_EQ(with_rounds(DType::bf16, 16, 64), DecodeKernel::sm90_bf16_rounds);
  EXPECT_EQ(with_rounds(DType::bf16, 80, 64), DecodeKernel::sm90_bf16_rounds);
  EXPECT_EQ(with_rounds(DType::fp8_e4m3, 16, 64), DecodeKernel::sm90_fp8_rounds);
  EXPECT_EQ(with_rounds(DType::fp8_e4m3, 70, 64), DecodeKernel::sm90_fp8_rounds);
  auto narrow = [](DType cache) {
    return select_decode_kernel({DType::bf16, cache, 16, 64, 16, Rounds::all}).narrow_pairs;
  };
  EXPECT_EQ(narrow(DType::bf16), 16);
  EXPECT_EQ(narrow(DType::fp8_e4m3), 0);
  // Pages smaller than a box: not theirs.
  EXPECT_EQ(with_rounds(DType::bf16, 128, 32), DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(with_rounds(DType::fp8_e4m3, 128, 16), DecodeKernel::sm90_fp8);
  EXPECT_EQ(with_rounds(DType::fp8_e4m3, 128, 96), DecodeKernel::sm90_fp8);
  // Off where none is asked for.
  EXPECT_EQ(select_decode_kernel({DType::bf16, DType::bf16, 128, 64, 64}).kernel,
            DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(select_decode_kernel({DType::bf16, DType::fp8_e4m3, 128, 64, 64}).kernel,
            DecodeKernel::sm90_fp8);
}

TEST(KernelSelection, RoundsByDefaultTakeBf16AtHeadsInMultiplesOf32OrWideRequestsAndFp8) {
  auto by_default = [](DType cache, int heads, int block_size) {
    return select_decode_kernel({DType::bf16, cache, heads, block_size, 64, Rounds::measured});
  };
  for (int heads : {32, 64, 96, 128}) {
    EXPECT_EQ(by_default(DType::bf16, heads, 64).kernel, DecodeKernel::sm90_bf16_rounds) << heads;
    EXPECT_EQ(by_default(DType::bf16, heads, 64).narrow_pairs, 0) << heads;
  }
  for (int heads : {1, 16, 70, 96, 128}) {
    EXPECT_EQ(by_default(DType::fp8_e4m3, heads, 64).kernel, DecodeKernel::sm90_fp8_rounds)
        << heads;
    EXPECT_EQ(by_default(DType::fp8_e4m3, heads, 64).narrow_pairs, 0) << heads;
  }
  // fp8 on pages smaller than a box: the other form, narrow where its tiles are.
  EXPECT_EQ(by_default(DType::fp8_e4m3, 128, 32).kernel, DecodeKernel::sm90_fp8);
  EXPECT_EQ(select_decode_kernel({DType::bf16, DType::fp8_e4m3, 16, 32, 16, Rounds::measured})
                .narrow_pairs,
            16);
  EXPECT_EQ(by_default(DType::bf16, 128, 256).kernel, DecodeKernel::sm90_bf16_rounds);
  // Head counts whose tiles can be narrow, and pages smaller than a box: the other form.
  EXPECT_EQ(by_default(DType::bf16, 16, 64).kernel, DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(by_default(DType::bf16, 16, 64).narrow_pairs, 0);
  EXPECT_EQ(by_default(DType::bf16, 80, 64).kernel, DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(by_default(DType::bf16, 128, 32).kernel, DecodeKernel::sm90_bf16_bulk);
  // Fewer than 32 heads: bf16 rounds where the mean request fills a tile (H 16 at Q >= 4).
  auto with_requests = [](int heads, std::int64_t pairs, int block_size = 64) {
    return select_decode_kernel(
        {DType::bf16, DType::bf16, heads, block_size, 64, Rounds::measured, pairs});
  };
  EXPECT_EQ(with_requests(16, 128).kernel, DecodeKernel::sm90_bf16_rounds);
  EXPECT_EQ(with_requests(16, 64).kernel, DecodeKernel::sm90_bf16_rounds);
  EXPECT_EQ(with_requests(16, 48).kernel, DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(with_requests(16, 0).kernel, DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(with_requests(16, 128, 32).kernel, DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(with_requests(80, 640).kernel, DecodeKernel::sm90_bf16_bulk);
  EXPECT_EQ(select_decode_kernel({DType::bf16, DType::bf16, 16, 64, 64, Rounds::none, 128}).kernel,
            DecodeKernel::sm90_bf16_bulk);
}

TEST(KernelSelection, RoundsByDefaultFollowTheEnvironment) {
  const char* saved = std::getenv("DCPMLA_DECODE_ROUNDS");
  const std::string before = saved ? saved : "";
  ::unsetenv("DCPMLA_DECODE_ROUNDS");
  EXPECT_EQ(rounds_by_default(), Rounds::measured);
  ::setenv("DCPMLA_DECODE_ROUNDS", "1", 1);
  EXPECT_EQ(rounds_by_default(), Rounds::all);
  ::setenv("DCPMLA_DECODE_ROUNDS", "0", 1);
  EXPECT_EQ(rounds_by_default(), Rounds::none);
  ::setenv("DCPMLA_DECODE_ROUNDS", "yes", 1);
  try {
    (void)rounds_by_default();
    ADD_FAILURE() << "DCPMLA_DECODE_ROUNDS=yes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DCPMLA_DECODE_ROUNDS"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("\"yes\""), std::string::npos) << e.what();
  }
  if (saved) {
    ::setenv("DCPMLA_DECODE_ROUNDS", before.c_str(), 1);
  } else {
    ::unsetenv("DCPMLA_DECODE_ROUNDS");
  }
}

TEST(KernelSelection, UnsupportedConfigurationsSayWhy) {
  const DecodeKernelChoice q = pick(DType::fp8_e4m3, DType::bf16);
  EXPECT_FALSE(q.supported());
  EXPECT_EQ(q.why_not, "the query is fp32 or bf16, not fp8");
  const DecodeKernelChoice cache = pick(DType::bf16, DType::i32);
  EXPECT_FALSE(cache.supported());
  EXPECT_EQ(cache.why_not, "the cache is fp32, bf16 or fp8, not int32");
  EXPECT_FALSE(select_decode_kernel({DType::bf16, DType::bf16, 0, 64, 64}).supported());
  EXPECT_FALSE(pick(DType::bf16, DType::bf16, 0).supported());
  const DecodeKernelChoice tile = pick(DType::bf16, DType::bf16, 64, 65);
  EXPECT_FALSE(tile.supported());
  EXPECT_EQ(tile.why_not, "a tile holds 1 to 64 pairs, not 65");
  EXPECT_STREQ(to_string(DecodeKernel::sm90_fp8), "sm90_fp8");
  EXPECT_STREQ(to_string(DecodeKernel::sm90_fp8_rounds), "sm90_fp8_rounds");
}

}  // namespace
}  // namespace dcpmla::cuda
