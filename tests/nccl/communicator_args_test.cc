// The ways into an NCCL communicator reject bad arguments before NCCL or CUDA is called, so these
// run without a GPU.
#include <gtest/gtest.h>

#include <cstring>

#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"

namespace dcpmla {
namespace {

template <class Fn>
Error error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an Error";
  return Error(ErrorCode::invalid_argument, "", "", "");
}

ncclUniqueId zero_id() {
  ncclUniqueId id;
  std::memset(id.internal, 0, sizeof(id.internal));
  return id;
}

TEST(NcclCommunicatorArgs, WrappingNullIsAnError) {
  const Error e = error_of([] { NcclCommunicator::wrap(nullptr); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_EQ(e.argument(), "comm");
  EXPECT_EQ(e.actual(), "null");
}

TEST(NcclCommunicatorArgs, JoinChecksWorldRankAndDeviceFirst) {
  Error e = error_of([] { NcclCommunicator::join(zero_id(), 0, 0, 0); });
  EXPECT_EQ(e.argument(), "world");
  EXPECT_EQ(e.actual(), "0");
  e = error_of([] { NcclCommunicator::join(zero_id(), 2, 2, 0); });
  EXPECT_EQ(e.code(), ErrorCode::out_of_range);
  EXPECT_EQ(e.argument(), "rank");
  EXPECT_EQ(e.expected(), "in [0, world = 2)");
  e = error_of([] { NcclCommunicator::join(zero_id(), 2, -1, 0); });
  EXPECT_EQ(e.argument(), "rank");
  e = error_of([] { NcclCommunicator::join(zero_id(), 2, 0, -3); });
  EXPECT_EQ(e.argument(), "device");
  EXPECT_EQ(e.actual(), "-3");
}

TEST(NcclLocalGroupArgs, DevicesMustBeGivenDistinctAndNonNegative) {
  Error e = error_of([] { NcclLocalGroup group({}); });
  EXPECT_EQ(e.argument(), "devices");
  EXPECT_EQ(e.actual(), "none");
  e = error_of([] { NcclLocalGroup group({0, 1, 0}); });
  EXPECT_EQ(e.argument(), "devices");
  EXPECT_EQ(e.actual(), "[0, 1, 0]");
  EXPECT_EQ(e.expected(), "distinct devices (NCCL runs one rank per device)");
  e = error_of([] { NcclLocalGroup group({1, -1}); });
  EXPECT_EQ(e.code(), ErrorCode::out_of_range);
  EXPECT_EQ(e.argument(), "devices");
}

TEST(NcclLocalGroupArgs, FirstDevices) {
  EXPECT_EQ(first_devices(3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(error_of([] { first_devices(0); }).argument(), "count");
}

}  // namespace
}  // namespace dcpmla
