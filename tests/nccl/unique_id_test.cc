// NCCL unique ids through hex text, files and environment variables. Host-only: the ids are made
// up, so no network or GPU is touched.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"

namespace dcpmla {
namespace {

ncclUniqueId made_up_id(int seed) {
  ncclUniqueId id;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) id.internal[i] = char((i * 37 + seed) & 0xff);
  return id;
}

bool same(const ncclUniqueId& a, const ncclUniqueId& b) {
  return std::memcmp(a.internal, b.internal, NCCL_UNIQUE_ID_BYTES) == 0;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "-" + std::to_string(::getpid()) + ".id"))
      .string();
}

TEST(NcclUniqueId, HexRoundTripsEveryByte) {
  const ncclUniqueId id = made_up_id(3);
  const std::string hex = nccl_unique_id_to_hex(id);
  EXPECT_EQ(hex.size(), std::size_t(2 * NCCL_UNIQUE_ID_BYTES));
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_TRUE(same(nccl_unique_id_from_hex(hex, "id"), id));
  std::string upper = hex;
  for (auto& c : upper) c = char(std::toupper(c));
  EXPECT_TRUE(same(nccl_unique_id_from_hex(upper, "id"), id));
}

TEST(NcclUniqueId, MalformedHexNamesTheArgument) {
  const std::string hex = nccl_unique_id_to_hex(made_up_id(1));
  try {
    nccl_unique_id_from_hex(hex.substr(1), "--nccl-id");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "--nccl-id");
    EXPECT_EQ(e.actual(), std::to_string(hex.size() - 1) + " characters");
  }
  std::string bad = hex;
  bad[10] = 'g';
  try {
    nccl_unique_id_from_hex(bad, "--nccl-id");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "--nccl-id");
    EXPECT_NE(e.actual().find("position 10"), std::string::npos) << e.actual();
  }
}

TEST(NcclUniqueId, FileRoundTripAndAReaderThatWaits) {
  const std::string path = temp_path("dcpmla-nccl-test");
  std::filesystem::remove(path);
  const ncclUniqueId id = made_up_id(9);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    write_nccl_unique_id(path, id);
  });
  const ncclUniqueId got = read_nccl_unique_id(path, std::chrono::seconds(20));
  writer.join();
  EXPECT_TRUE(same(got, id));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
}

TEST(NcclUniqueId, MissingFileTimesOutNamingThePath) {
  const std::string path = temp_path("dcpmla-nccl-missing");
  std::filesystem::remove(path);
  try {
    read_nccl_unique_id(path, std::chrono::milliseconds(50));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::backend_failure);
    EXPECT_EQ(e.argument(), path);
    EXPECT_EQ(e.actual(), "no such file");
  }
}

TEST(NcclUniqueId, CorruptFileNamesThePath) {
  const std::string path = temp_path("dcpmla-nccl-corrupt");
  std::ofstream(path) << "not an id\n";
  try {
    read_nccl_unique_id(path, std::chrono::milliseconds(50));
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), path);
  }
  std::filesystem::remove(path);
}

TEST(NcclUniqueId, EnvironmentVariable) {
  const ncclUniqueId id = made_up_id(5);
  // Surrounding white space (a shell's trailing newline) is ignored.
  const std::string padded = fmt::format(" {}\n", nccl_unique_id_to_hex(id));
  ::setenv("DCPMLA_TEST_NCCL_ID", padded.c_str(), 1);
  EXPECT_TRUE(same(nccl_unique_id_from_env("DCPMLA_TEST_NCCL_ID"), id));
  ::setenv("DCPMLA_TEST_NCCL_ID", "12ab", 1);
  try {
    nccl_unique_id_from_env("DCPMLA_TEST_NCCL_ID");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "DCPMLA_TEST_NCCL_ID");
  }
  ::unsetenv("DCPMLA_TEST_NCCL_ID");
  try {
    nccl_unique_id_from_env("DCPMLA_TEST_NCCL_ID");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.argument(), "DCPMLA_TEST_NCCL_ID");
    EXPECT_EQ(e.actual(), "unset");
  }
}

}  // namespace
}  // namespace dcpmla
