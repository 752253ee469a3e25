// What every PeerCommunicator of a group shares: the ranks' device areas.
#pragma once

#include <cstddef>

#include "dcpmla/peer_comm.h"
#include "peer_exchange.h"

namespace dcpmla {

struct PeerCommunicator::Shared {
  std::size_t chunk_capacity = 0;  // bytes, a multiple of 16
  int lanes = peer::kDefaultLanes;
  peer::RankArea areas[peer::kMaxWorld];
};

}  // namespace dcpmla
