// What every PeerCommunicator of a group shares: the ranks' device areas, as this process maps
// them (a group's own allocations; for a joined rank, its allocation and the peers' IPC mappings).
#pragma once

#include <cstddef>

#include "dcpmla/peer_comm.h"
#include "peer_exchange.h"

namespace dcpmla {

struct PeerCommunicator::Shared {
  std::size_t chunk_capacity = 0;  // bytes, a multiple of 16
  int lanes = 0;                   // 0: per call, lanes_for_chunk; else DCPMLA_PEER_LANES
  peer::RankArea areas[peer::kMaxWorld];
};

namespace peer {
// The lanes of a new group or joined rank from DCPMLA_PEER_LANES (0 when unset: chosen per call).
// Throws Error naming the variable when it is set but not a number in [1, kMaxLanes].
int lanes_or_throw();
}  // namespace peer

}  // namespace dcpmla
