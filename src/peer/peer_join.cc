// PeerCommunicator::join: one rank per process, the areas handed round as CUDA IPC handles over a
// bootstrap communicator; and the destructor, which releases what join made.
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "dcpmla/error.h"
#include "dcpmla/peer_comm.h"
#include "gpu/device_scope.h"
#include "peer_shared.h"

namespace dcpmla {
namespace {

// A rank's failure as it travels to the others (texts truncated).
struct Failure {
  std::int32_t failed;  // 0: none
  std::int32_t code;    // ErrorCode
  char argument[64];
  char expected[192];
  char actual[192];
};

// What a rank tells every other one, gathered as bytes through the bootstrap communicator.
struct Record {
  cudaIpcMemHandle_t area;
  std::uint64_t chunk_capacity;  // as passed to join
  std::int64_t pid;
  std::uint64_t process_token;  // tells processes apart where pids repeat (PID namespaces)
  char pci_bus_id[32];
  Failure failure;
};
static_assert(std::is_trivially_copyable_v<Record>);

template <std::size_t N>
void copy_text(char (&to)[N], const std::string& from) {
  const std::size_t n = std::min(from.size(), N - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

// Runs fn; what it throws is returned (to be rethrown on this rank) and described in `out` for the
// other ranks, so that every rank reaches the next all_gather whatever happened here.
template <class Fn>
std::exception_ptr attempt(Fn fn, Failure& out) {
  auto describe = [&](ErrorCode code, const std::string& argument, const std::string& expected,
                      const std::string& actual) {
    out.failed = 1;
    out.code = std::int32_t(code);
    copy_text(out.argument, argument);
    copy_text(out.expected, expected);
    copy_text(out.actual, actual);
  };
  try {
    fn();
    return nullptr;
  } catch (const Error& e) {
    describe(e.code(), e.argument(), e.expected(), e.actual());
  } catch (const std::exception& e) {
    describe(ErrorCode::backend_failure, "PeerCommunicator::join", "no exception", e.what());
  }
  return std::current_exception();
}

// Every rank's record, in rank order: one all_gather of raw bytes over bootstrap, on a stream of
// its own, then a host synchronisation. fp8_e4m3 is the one-byte type (NCCL moves it as uint8).
std::vector<Record> all_gather_records(Communicator& bootstrap, int device, const Record& mine) {
  const std::size_t W = std::size_t(bootstrap.world());
  gpu::DeviceScope on(device);
  struct Scratch {
    void* bytes = nullptr;  // [W records received][this rank's record]
    cudaStream_t stream = nullptr;
    ~Scratch() {
      if (stream != nullptr) {
        cudaStreamSynchronize(stream);
        cudaStreamDestroy(stream);
      }
      cudaFree(bytes);
    }
  } scratch;
  DCPMLA_CUDA_CHECK(cudaMalloc(&scratch.bytes, (W + 1) * sizeof(Record)));
  DCPMLA_CUDA_CHECK(cudaStreamCreateWithFlags(&scratch.stream, cudaStreamNonBlocking));
  auto* recv = static_cast<std::uint8_t*>(scratch.bytes);
  auto* send = recv + W * sizeof(Record);
  DCPMLA_CUDA_CHECK(
      cudaMemcpyAsync(send, &mine, sizeof(Record), cudaMemcpyHostToDevice, scratch.stream));
  bootstrap.all_gather(send, recv, sizeof(Record), DType::fp8_e4m3, scratch.stream);
  std::vector<Record> all(W);
  DCPMLA_CUDA_CHECK(cudaMemcpyAsync(all.data(), recv, W * sizeof(Record), cudaMemcpyDeviceToHost,
                                    scratch.stream));
  DCPMLA_CUDA_CHECK(cudaStreamSynchronize(scratch.stream));
  return all;
}

// Every rank throws when any rank failed: its own exception where it failed, else the first
// failing rank's, with that rank named.
void throw_if_any_failed(const std::vector<Record>& all, const std::exception_ptr& mine) {
  if (mine) std::rethrow_exception(mine);
  for (std::size_t r = 0; r < all.size(); ++r) {
    const Failure& f = all[r].failure;
    if (f.failed) {
      throw Error(ErrorCode(f.code), f.argument, f.expected,
                  fmt::format("{} (on rank {})", f.actual, r));
    }
  }
}

// What every rank decides alike from the gathered records.
void check_agreement(const std::vector<Record>& all) {
  const Record& first = all.front();
  for (std::size_t r = 1; r < all.size(); ++r) {
    DCPMLA_REQUIRE(all[r].chunk_capacity == first.chunk_capacity, ErrorCode::invalid_argument,
                   "chunk_capacity",
                   fmt::format("the same on every rank ({} bytes on rank 0)", first.chunk_capacity),
                   fmt::format("{} bytes on rank {}", all[r].chunk_capacity, r));
  }
  for (std::size_t r = 0; r < all.size(); ++r) {
    for (std::size_t q = r + 1; q < all.size(); ++q) {
      DCPMLA_REQUIRE(all[r].pid != all[q].pid || all[r].process_token != all[q].process_token,
                     ErrorCode::unsupported, "bootstrap",
                     "one process per rank (use PeerGroup for ranks of one process)",
                     fmt::format("ranks {} and {} in one process (pid {})", r, q, all[r].pid));
      DCPMLA_REQUIRE(
          std::strcmp(all[r].pci_bus_id, all[q].pci_bus_id) != 0, ErrorCode::unsupported, "device",
          "one GPU per rank",
          fmt::format("ranks {} and {} on the GPU at PCI bus id {}", r, q, all[r].pci_bus_id));
    }
  }
}

// Maps every peer's area into this process, on `device` (current).
void open_peers(const std::vector<Record>& all, int rank, int device,
                PeerCommunicator::Shared& shared) {
  const int W = int(all.size());
  for (int q = 0; q < W; ++q) {
    if (q == rank) continue;
    const Record& peer = all[std::size_t(q)];
    int peer_device = -1;
    const cudaError_t found = cudaDeviceGetByPCIBusId(&peer_device, peer.pci_bus_id);
    if (found != cudaSuccess) {
      cudaGetLastError();
      throw Error(ErrorCode::unsupported, "device",
                  "every rank's GPU visible in every rank's process (CUDA_VISIBLE_DEVICES)",
                  fmt::format("rank {}'s GPU (PCI bus id {}) not visible to rank {}: {}", q,
                              peer.pci_bus_id, rank, cudaGetErrorString(found)));
    }
    int can = 0;
    DCPMLA_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer_device));
    DCPMLA_REQUIRE(
        can != 0, ErrorCode::unsupported, "device",
        "peer access to every rank's GPU (NVLink or PCIe P2P)",
        fmt::format("device {} (rank {}) cannot access device {} (rank {}, PCI bus id {})", device,
                    rank, peer_device, q, peer.pci_bus_id));
    void* base = nullptr;
    DCPMLA_CUDA_CHECK(cudaIpcOpenMemHandle(&base, peer.area, cudaIpcMemLazyEnablePeerAccess));
    shared.areas[q] = peer::area_at(base, W, shared.chunk_capacity);
  }
}

std::uint64_t process_token() {
  static const std::uint64_t token = [] {
    std::random_device random;
    return (std::uint64_t(random()) << 32) ^ random();
  }();
  return token;
}

}  // namespace

std::unique_ptr<PeerCommunicator> PeerCommunicator::join(Communicator& bootstrap, int device,
                                                         std::size_t chunk_capacity) {
  const int W = bootstrap.world();
  const int rank = bootstrap.rank();
  DCPMLA_REQUIRE(W >= 1 && W <= peer::kMaxWorld, ErrorCode::invalid_argument, "bootstrap",
                 fmt::format("a communicator of 1 to {} ranks", peer::kMaxWorld),
                 fmt::format("{} ranks", W));
  DCPMLA_REQUIRE(rank >= 0 && rank < W, ErrorCode::out_of_range, "bootstrap",
                 fmt::format("a rank in [0, world = {})", W), fmt::format("rank {}", rank));
  int count = 0;
  DCPMLA_CUDA_CHECK(cudaGetDeviceCount(&count));
  DCPMLA_REQUIRE(device >= 0 && device < count, ErrorCode::out_of_range, "device",
                 fmt::format("a CUDA device index in [0, {})", count), std::to_string(device));
  gpu::DeviceScope on(device);

  // Released by its destructor if anything below throws.
  std::unique_ptr<PeerCommunicator> comm(
      new PeerCommunicator(std::make_unique<Shared>(), rank, W, device));
  Shared& shared = *comm->owned_;

  // Round 1: this rank's area, and what the ranks must agree on.
  Record mine{};
  std::exception_ptr failed = attempt(
      [&] {
        DCPMLA_REQUIRE(chunk_capacity >= 1 && chunk_capacity <= (std::size_t(1) << 40),
                       ErrorCode::invalid_argument, "chunk_capacity", "1 byte to 1 TiB",
                       std::to_string(chunk_capacity));
        mine.chunk_capacity = chunk_capacity;
        mine.pid = std::int64_t(::getpid());
        mine.process_token = process_token();
        DCPMLA_CUDA_CHECK(cudaDeviceGetPCIBusId(mine.pci_bus_id, sizeof mine.pci_bus_id, device));
        shared.chunk_capacity = (chunk_capacity + 15) / 16 * 16;
        const peer::AreaLayout layout = peer::area_layout(W, shared.chunk_capacity);
        void* base = nullptr;
        DCPMLA_CUDA_CHECK(cudaMalloc(&base, layout.total_bytes));
        shared.areas[rank] = peer::area_at(base, W, shared.chunk_capacity);
        // Flags and call counters start at 0 (no call made), before any peer can see the area.
        DCPMLA_CUDA_CHECK(cudaMemset(static_cast<std::uint8_t*>(base) + layout.ready_offset, 0,
                                     layout.total_bytes - layout.ready_offset));
        DCPMLA_CUDA_CHECK(cudaDeviceSynchronize());
        DCPMLA_CUDA_CHECK(cudaIpcGetMemHandle(&mine.area, base));
      },
      mine.failure);
  const std::vector<Record> all = all_gather_records(bootstrap, device, mine);
  throw_if_any_failed(all, failed);
  check_agreement(all);

  // Round 2: the peers' areas. What only this rank can find wrong here (a peer's GPU not visible
  // or not reachable, a mapping refused) goes round, so that no rank returns with a group that
  // another rank has left.
  Record opened{};
  failed = attempt([&] { open_peers(all, rank, device, shared); }, opened.failure);
  throw_if_any_failed(all_gather_records(bootstrap, device, opened), failed);
  return comm;
}

PeerCommunicator::~PeerCommunicator() {
  if (!owned_) return;
  // Errors are ignored (a destructor), and cleared so that later checks on this thread do not
  // see them. Each area starts with its staging bytes (area_at), so staging is the base that
  // cudaMalloc or cudaIpcOpenMemHandle returned.
  int current = -1;
  cudaGetDevice(&current);
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (int q = 0; q < world_; ++q) {
    void* base = owned_->areas[q].staging;
    if (base == nullptr) continue;
    if (q == rank_) {
      cudaFree(base);
    } else {
      cudaIpcCloseMemHandle(base);
    }
  }
  cudaGetLastError();
  if (current >= 0) cudaSetDevice(current);
}

}  // namespace dcpmla
