// The one kernel behind every PeerCommunicator collective (peer_exchange.cu), and the device
// memory it works in (one area per rank, allocated by PeerGroup).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace dcpmla::peer {

constexpr int kMaxWorld = 8;
// Thread blocks of an exchange ("lanes", at most kMaxLanes), a function of the chunk's bytes
// (lanes_for_chunk), so every rank picks the same for a call.
// Block b owns slice b of the chunk on every rank, so its flags pair with block b of each peer.
constexpr int kMaxLanes = 128;

// One rank's area, as mapped on the rank that uses the pointers (a peer's pointers are valid on
// every rank of the group: peer access and unified addressing).
struct RankArea {
  std::uint8_t* staging = nullptr;  // [2 parities][W sources][chunk_capacity] bytes
  std::uint64_t* ready = nullptr;   // [W sources][kMaxLanes]: last call whose slice has arrived
  std::uint64_t* calls = nullptr;   // [kMaxLanes]: calls made by each block of this rank
};

// Bytes of one rank's area, and where its parts start, for `world` ranks.
struct AreaLayout {
  std::size_t staging_bytes, ready_offset, calls_offset, total_bytes;
};
AreaLayout area_layout(int world, std::size_t chunk_capacity);
RankArea area_at(void* base, int world, std::size_t chunk_capacity);

enum class ExchangeOp : int {
  gather,       // send [chunk] to every peer; recv [W, chunk]
  all_to_all,   // send [W, chunk]: chunk p to peer p; recv [W, chunk]
  scatter_sum,  // send [W, chunk] f32: chunk p to peer p; recv [chunk] = sum over sources
};

struct ExchangeParams {
  ExchangeOp op;
  int world;
  int rank;
  const std::uint8_t* send;
  std::uint8_t* recv;
  std::size_t chunk;           // bytes
  bool copy_own;               // gather / all_to_all: copy the own chunk from send into recv
  bool vector16;               // send, recv and chunk are multiples of 16 bytes
  int lanes;                   // thread blocks of this call
  std::size_t chunk_capacity;  // bytes of one staging chunk
  RankArea areas[kMaxWorld];   // every rank's area
};

// Enqueues the exchange on stream s (the rank's device must be current) as a dependent launch
// (PDL: its blocks start while the previous kernel drains, then wait for it). Throws
// Error(backend_failure) when the launch fails.
void launch_exchange(const ExchangeParams& p, cudaStream_t s);

// Lanes for a chunk of this many bytes: 32 up to 256 KB (latency: fewer blocks to flag), 64 up to
// 4 MB, 128 above (bandwidth: more stores in flight); measurements: docs/design/.
int lanes_for_chunk(std::size_t chunk_bytes);

}  // namespace dcpmla::peer
