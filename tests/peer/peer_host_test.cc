// PeerGroup's argument checks. The device list is checked before any CUDA call, so those run
// without a GPU; the checks after cudaGetDeviceCount run where a device exists. supported()
// never throws. PeerCommunicator::join's checks before its first collective likewise (with an
// in-process bootstrap that is never called).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dcpmla/comm.h"
#include "dcpmla/error.h"
#include "dcpmla/peer_comm.h"
#include "peer_test_support.h"

namespace dcpmla {
namespace {

constexpr std::size_t kCapacity = std::size_t(1) << 20;

void expect_error(const std::function<void()>& fn, ErrorCode code, const std::string& argument) {
  try {
    fn();
    ADD_FAILURE() << "expected dcpmla::Error(" << to_string(code) << ", " << argument
                  << "), nothing was thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << "expected " << to_string(code) << ": " << e.what();
    EXPECT_EQ(e.argument(), argument) << e.what();
    EXPECT_NE(std::string(e.what()).find(argument), std::string::npos)
        << "what() must name the argument: " << e.what();
    EXPECT_FALSE(e.expected().empty()) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected dcpmla::Error, got another exception: " << e.what();
  }
}

void expect_devices_rejected(const std::vector<int>& devices) {
  expect_error([&] { PeerGroup group(devices, kCapacity); }, ErrorCode::invalid_argument,
               "devices");
}

// Devices the CUDA runtime reports, or -1 where it cannot say (no driver, no device).
int runtime_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return count;
}

TEST(PeerGroupArguments, NoDevices) {
  expect_devices_rejected({});
}

TEST(PeerGroupArguments, MoreThanEightDevices) {
  expect_devices_rejected({0, 1, 2, 3, 4, 5, 6, 7, 8});
  expect_devices_rejected({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
}

TEST(PeerGroupArguments, DuplicateDevices) {
  expect_devices_rejected({0, 0});
  expect_devices_rejected({1, 0, 1});
  expect_devices_rejected({3, 2, 1, 0, 2});
}

// Only where the runtime answers: the check comes after cudaGetDeviceCount.
TEST(PeerGroupArguments, DeviceThatDoesNotExist) {
  const int count = runtime_device_count();
  if (count < 0) GTEST_SKIP() << "the CUDA runtime reports no devices";
  expect_error([&] { PeerGroup group({-1}, kCapacity); }, ErrorCode::out_of_range, "devices");
  expect_error([&] { PeerGroup group({count}, kCapacity); }, ErrorCode::out_of_range, "devices");
  expect_error(
      [&] {
        PeerGroup group({0, count + 7}, kCapacity);
      },
      ErrorCode::out_of_range, "devices");
}

// After cudaGetDeviceCount and the device range: needs device 0 (not its kernels).
TEST(PeerGroupArguments, ChunkCapacityZero) {
  if (runtime_device_count() < 1) GTEST_SKIP() << "needs a CUDA device";
  expect_error([] { PeerGroup group({0}, 0); }, ErrorCode::invalid_argument, "chunk_capacity");
}

TEST(PeerGroupSupported, NeverThrows) {
  const std::vector<std::vector<int>> cases = {
      {}, {0}, {0, 1}, {1, 0}, {0, 0}, {-1}, {0, -1}, {1000}, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
  for (const auto& devices : cases) {
    EXPECT_NO_THROW(PeerGroup::supported(devices));
  }
  EXPECT_FALSE(PeerGroup::supported({-1}));
  EXPECT_FALSE(PeerGroup::supported({0, -1}));
  EXPECT_FALSE(PeerGroup::supported({1000}));
  // What the constructor rejects before looking at the devices.
  EXPECT_FALSE(PeerGroup::supported({}));
  EXPECT_FALSE(PeerGroup::supported({0, 0}));
  EXPECT_FALSE(PeerGroup::supported({0, 1, 2, 3, 4, 5, 6, 7, 8}));
  if (runtime_device_count() <= 0) {
    EXPECT_FALSE(PeerGroup::supported({0}));
    EXPECT_FALSE(PeerGroup::supported({0, 1}));
  }
}

TEST(PeerJoinArguments, BootstrapOfMoreThanEightRanks) {
  InProcessGroup group(9);
  InProcessCommunicator bootstrap(group, 0);
  expect_error([&] { PeerCommunicator::join(bootstrap, 0, kCapacity); },
               ErrorCode::invalid_argument, "bootstrap");
}

// Only where the runtime answers: the check comes after cudaGetDeviceCount.
TEST(PeerJoinArguments, DeviceThatDoesNotExist) {
  const int count = runtime_device_count();
  if (count < 0) GTEST_SKIP() << "the CUDA runtime reports no devices";
  InProcessGroup group(1);
  InProcessCommunicator bootstrap(group, 0);
  expect_error([&] { PeerCommunicator::join(bootstrap, -1, kCapacity); }, ErrorCode::out_of_range,
               "device");
  expect_error([&] { PeerCommunicator::join(bootstrap, count, kCapacity); },
               ErrorCode::out_of_range, "device");
}

}  // namespace
}  // namespace dcpmla
