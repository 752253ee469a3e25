// What every PeerCommunicator of a group shares: the ranks' device areas, as this process maps
// them (a group's own allocations; for a joined rank, its allocation and the peers' IPC mappings).
#pragma once

#include <cstddef>

#include "dcpmla/peer_comm.h"
#include "peer_exchange.h"

namespace dcpmla {

struct PeerCommunicator::Shared {
  std::size_t chunk_capacity = 0;  // bytes, a multiple of 16
  peer::RankArea areas[peer::kMaxWorld];
};

}  // namespace dcpmla
