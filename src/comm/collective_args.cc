#include "collective_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "dcpmla/error.h"

namespace dcpmla::collective {
namespace {

constexpr std::size_t kMaxSize = std::numeric_limits<std::size_t>::max();

std::string name(const CollectiveArgs& a, const char* what) {
  return std::string(a.op) + ": " + what;
}

// [begin, end) of a buffer as addresses; throws when it wraps around the address space.
std::uintptr_t end_of(const CollectiveArgs& a, const char* what, const void* p, std::size_t bytes) {
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  DCPMLA_REQUIRE(bytes <= std::numeric_limits<std::uintptr_t>::max() - begin,
                 ErrorCode::invalid_argument, name(a, what),
                 fmt::format("{} bytes that fit in the address space", bytes),
                 fmt::format("a buffer at {}", p));
  return begin + bytes;
}

}  // namespace

void check(const CollectiveArgs& a) {
  DCPMLA_REQUIRE(a.world >= 1 && a.rank >= 0 && a.rank < a.world, ErrorCode::invalid_argument,
                 name(a, "rank"), fmt::format("in [0, world = {})", a.world),
                 std::to_string(a.rank));
  const std::size_t chunks = std::size_t(std::max(a.send_chunks, a.recv_chunks));
  DCPMLA_REQUIRE(a.element_bytes > 0 && a.count <= kMaxSize / a.element_bytes / chunks,
                 ErrorCode::invalid_argument, name(a, "count"),
                 fmt::format("count * {} chunks * {} bytes per element to fit in size_t", chunks,
                             a.element_bytes),
                 std::to_string(a.count));
  if (a.count == 0) return;
  const std::size_t chunk = a.count * a.element_bytes;
  const std::size_t send_bytes = chunk * std::size_t(a.send_chunks);
  const std::size_t recv_bytes = chunk * std::size_t(a.recv_chunks);
  DCPMLA_REQUIRE(a.send != nullptr, ErrorCode::invalid_argument, name(a, "send"),
                 fmt::format("a device buffer of {} x {} elements", a.send_chunks, a.count),
                 "null");
  DCPMLA_REQUIRE(a.recv != nullptr, ErrorCode::invalid_argument, name(a, "recv"),
                 fmt::format("a device buffer of {} x {} elements", a.recv_chunks, a.count),
                 "null");
  const auto send_begin = reinterpret_cast<std::uintptr_t>(a.send);
  const auto recv_begin = reinterpret_cast<std::uintptr_t>(a.recv);
  const std::uintptr_t send_end = end_of(a, "send", a.send, send_bytes);
  const std::uintptr_t recv_end = end_of(a, "recv", a.recv, recv_bytes);
  if (send_begin >= recv_end || recv_begin >= send_end) return;  // disjoint

  const std::uintptr_t own = std::uintptr_t(a.rank) * chunk;
  bool in_place = false;
  const char* form = "send and recv must not overlap";
  switch (a.in_place) {
    case InPlace::never:
      break;
    case InPlace::send_is_own_recv_chunk:
      in_place = send_begin == recv_begin + own;
      form = "disjoint buffers, or send == recv + rank * count (in place)";
      break;
    case InPlace::recv_is_own_send_chunk:
      in_place = recv_begin == send_begin + own;
      form = "disjoint buffers, or recv == send + rank * count (in place)";
      break;
  }
  DCPMLA_REQUIRE(in_place, ErrorCode::invalid_argument, name(a, "recv"), form,
                 fmt::format("recv [{}, +{} bytes) overlapping send [{}, +{} bytes)", a.recv,
                             recv_bytes, a.send, send_bytes));
}

CollectiveArgs all_gather_args(const void* send, const void* recv, std::size_t count, DType dtype,
                               int world, int rank) {
  return {"all_gather", send, recv, count, dtype_size(dtype),
          world,        rank, 1,    world, InPlace::send_is_own_recv_chunk};
}

CollectiveArgs reduce_scatter_args(const float* send, const float* recv, std::size_t count,
                                   int world, int rank) {
  return {"reduce_scatter_sum",           send, recv, count, sizeof(float), world, rank, world, 1,
          InPlace::recv_is_own_send_chunk};
}

CollectiveArgs all_to_all_args(const void* send, const void* recv, std::size_t count, DType dtype,
                               int world, int rank) {
  return {"all_to_all", send, recv,  count, dtype_size(dtype),
          world,        rank, world, world, InPlace::never};
}

}  // namespace dcpmla::collective
