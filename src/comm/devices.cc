#include <string>

#include "dcpmla/comm.h"
#include "dcpmla/error.h"

namespace dcpmla {

std::vector<int> first_devices(int count) {
  DCPMLA_REQUIRE(count >= 1, ErrorCode::invalid_argument, "count", ">= 1 device",
                 std::to_string(count));
  std::vector<int> devices(static_cast<std::size_t>(count));
  for (int d = 0; d < count; ++d) devices[std::size_t(d)] = d;
  return devices;
}

}  // namespace dcpmla
