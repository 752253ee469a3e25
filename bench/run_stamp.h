// When a benchmark ran, as recorded with its results: UTC in ISO 8601, so a JSON file carries its
// own date even when the script that ran it passed none.
#pragma once

#include <ctime>
#include <string>

namespace dcpmla::bench {

inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace dcpmla::bench
