// Host-side argument checks of the NCCL collectives: they run before NCCL sees anything, so they
// need no GPU.
#include "comm/collective_args.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "dcpmla/error.h"

namespace dcpmla::collective {
namespace {

// Runs check() and returns the Error it throws (fails the test when it throws nothing).
Error error_of(const CollectiveArgs& a) {
  try {
    check(a);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << a.op << ": expected an Error";
  return Error(ErrorCode::invalid_argument, "", "", "");
}

TEST(CollectiveArgs, AcceptsDisjointBuffers) {
  std::vector<float> send(2 * 10), recv(2 * 10);
  EXPECT_NO_THROW(check(all_gather_args(send.data(), recv.data(), 10, DType::f32, 2, 1)));
  EXPECT_NO_THROW(check(reduce_scatter_args(send.data(), recv.data(), 10, 2, 0)));
  EXPECT_NO_THROW(check(all_to_all_args(send.data(), recv.data(), 10, DType::f32, 2, 1)));
}

TEST(CollectiveArgs, NullBuffersAreFineOnlyWithCountZero) {
  std::vector<std::uint16_t> buf(64);
  EXPECT_NO_THROW(check(all_gather_args(nullptr, nullptr, 0, DType::bf16, 4, 3)));
  EXPECT_NO_THROW(check(reduce_scatter_args(nullptr, nullptr, 0, 4, 0)));
  EXPECT_NO_THROW(check(all_to_all_args(nullptr, nullptr, 0, DType::fp8_e4m3, 4, 2)));

  Error e = error_of(all_gather_args(nullptr, buf.data(), 8, DType::bf16, 2, 0));
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(e.argument(), "all_gather: send");
  EXPECT_EQ(e.actual(), "null");
  EXPECT_EQ(e.expected(), "a device buffer of 1 x 8 elements");

  e = error_of(reduce_scatter_args(reinterpret_cast<const float*>(buf.data()), nullptr, 4, 2, 0));
  EXPECT_EQ(e.argument(), "reduce_scatter_sum: recv");
  EXPECT_EQ(e.expected(), "a device buffer of 1 x 4 elements");

  e = error_of(all_to_all_args(buf.data(), nullptr, 3, DType::bf16, 4, 0));
  EXPECT_EQ(e.argument(), "all_to_all: recv");
  EXPECT_EQ(e.expected(), "a device buffer of 4 x 3 elements");
}

TEST(CollectiveArgs, CountsWhoseBytesOverflowAreRejected) {
  std::vector<float> send(4), recv(4);
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 4;
  // count * 4 bytes fits, but not count * 4 bytes * 2 chunks.
  Error e = error_of(all_gather_args(send.data(), recv.data(), huge, DType::f32, 2, 0));
  EXPECT_EQ(e.argument(), "all_gather: count");
  EXPECT_EQ(e.actual(), std::to_string(huge));
  e = error_of(all_to_all_args(send.data(), recv.data(),
                               std::numeric_limits<std::size_t>::max() / 2 + 1, DType::fp8_e4m3, 2,
                               0));
  EXPECT_EQ(e.argument(), "all_to_all: count");
  e = error_of(reduce_scatter_args(send.data(), recv.data(), huge / 3, 8, 0));
  EXPECT_EQ(e.argument(), "reduce_scatter_sum: count");
}

TEST(CollectiveArgs, BuffersThatWrapAroundTheAddressSpaceAreRejected) {
  const auto* top = reinterpret_cast<const void*>(std::numeric_limits<std::uintptr_t>::max() - 7);
  std::vector<float> recv(64);
  const Error e = error_of(all_gather_args(top, recv.data(), 4, DType::f32, 2, 0));
  EXPECT_EQ(e.argument(), "all_gather: send");
}

TEST(CollectiveArgs, OnlyNcclsInPlaceFormsMayOverlap) {
  std::vector<float> buf(3 * 8);
  float* b = buf.data();
  // all_gather in place: rank r's send is its own chunk of recv.
  EXPECT_NO_THROW(check(all_gather_args(b + 2 * 8, b, 8, DType::f32, 3, 2)));
  Error e = error_of(all_gather_args(b + 1 * 8, b, 8, DType::f32, 3, 2));
  EXPECT_EQ(e.argument(), "all_gather: recv");
  EXPECT_EQ(e.expected(), "disjoint buffers, or send == recv + rank * count (in place)");
  // reduce_scatter in place: recv is rank r's own chunk of send.
  EXPECT_NO_THROW(check(reduce_scatter_args(b, b + 8, 8, 3, 1)));
  e = error_of(reduce_scatter_args(b, b + 4, 8, 3, 1));
  EXPECT_EQ(e.argument(), "reduce_scatter_sum: recv");
  // all_to_all never: the sends of one group would read what the receives overwrite.
  e = error_of(all_to_all_args(b, b, 4, DType::f32, 2, 0));
  EXPECT_EQ(e.argument(), "all_to_all: recv");
  EXPECT_EQ(e.expected(), "send and recv must not overlap");
  e = error_of(all_to_all_args(b, b + 7, 4, DType::f32, 2, 0));
  EXPECT_EQ(e.argument(), "all_to_all: recv");
  // Adjacent is not overlapping.
  EXPECT_NO_THROW(check(all_to_all_args(b, b + 8, 4, DType::f32, 2, 0)));
}

TEST(CollectiveArgs, RankOutsideTheWorldIsRejected) {
  std::vector<float> send(8), recv(16);
  const Error e = error_of(all_gather_args(send.data(), recv.data(), 8, DType::f32, 2, 2));
  EXPECT_EQ(e.argument(), "all_gather: rank");
  EXPECT_EQ(e.expected(), "in [0, world = 2)");
}

}  // namespace
}  // namespace dcpmla::collective
