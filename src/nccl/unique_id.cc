#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "dcpmla/error.h"
#include "dcpmla/nccl_comm.h"
#include "nccl_check.h"

namespace dcpmla {
namespace {

constexpr std::size_t kHexDigits = 2 * NCCL_UNIQUE_ID_BYTES;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string trimmed(std::string s) {
  const auto space = " \t\r\n";
  s.erase(s.find_last_not_of(space) + 1);
  s.erase(0, s.find_first_not_of(space));
  return s;
}

}  // namespace

ncclUniqueId new_nccl_unique_id() {
  ncclUniqueId id;
  DCPMLA_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
  return id;
}

std::string nccl_unique_id_to_hex(const ncclUniqueId& id) {
  std::string hex;
  hex.reserve(kHexDigits);
  for (std::size_t i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    hex += fmt::format("{:02x}", static_cast<unsigned char>(id.internal[i]));
  }
  return hex;
}

ncclUniqueId nccl_unique_id_from_hex(std::string_view hex, const std::string& argument) {
  const auto expected = fmt::format("{} hex digits (an NCCL unique id)", kHexDigits);
  DCPMLA_REQUIRE(hex.size() == kHexDigits, ErrorCode::invalid_argument, argument, expected,
                 fmt::format("{} characters", hex.size()));
  ncclUniqueId id;
  for (std::size_t i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) {
    const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    DCPMLA_REQUIRE(hi >= 0 && lo >= 0, ErrorCode::invalid_argument, argument, expected,
                   fmt::format("'{}' at position {}", hex.substr(2 * i, 2), 2 * i));
    id.internal[i] = static_cast<char>(hi * 16 + lo);
  }
  return id;
}

void write_nccl_unique_id(const std::string& path, const ncclUniqueId& id) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << nccl_unique_id_to_hex(id) << '\n';
    out.close();
    DCPMLA_REQUIRE(bool(out), ErrorCode::backend_failure, path,
                   "a writable file for the NCCL unique id", "cannot write " + temporary);
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  DCPMLA_REQUIRE(!ec, ErrorCode::backend_failure, path, "a writable file for the NCCL unique id",
                 "cannot rename " + temporary + ": " + ec.message());
}

ncclUniqueId read_nccl_unique_id(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!std::filesystem::exists(path)) {
    DCPMLA_REQUIRE(std::chrono::steady_clock::now() < deadline, ErrorCode::backend_failure, path,
                   fmt::format("a file with the NCCL unique id within {} ms", timeout.count()),
                   "no such file");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nccl_unique_id_from_hex(trimmed(text.str()), path);
}

ncclUniqueId nccl_unique_id_from_env(const std::string& variable) {
  const char* value = std::getenv(variable.c_str());
  DCPMLA_REQUIRE(
      value != nullptr, ErrorCode::invalid_argument, variable,
      fmt::format("an environment variable holding {} hex digits (an NCCL unique id)", kHexDigits),
      "unset");
  return nccl_unique_id_from_hex(trimmed(value), variable);
}

}  // namespace dcpmla
