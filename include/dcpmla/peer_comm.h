// The Communicator over direct NVLink stores between W GPUs of one host that can reach each other's
// memory (peer access), one DCP rank per GPU. Two ways in: PeerGroup (one process driving all W
// GPUs) and PeerCommunicator::join (one process per GPU, as serving engines run DCP ranks).
//
// Why: for the 2-5 MB a DCP step moves, NCCL's time per collective is almost all per-call cost
// (docs/design/experiments.md). Here every collective is one
// kernel on the caller's stream: each thread block pushes its slice of every peer's chunk into
// that peer's staging area with plain stores over NVLink, raises a flag per (peer, block) with a
// system-scope release, waits for the peers' flags on its own slice, then copies (or, for
// reduce_scatter_sum, sums) its slice out of its staging area into recv. The staging areas are
// double buffered by call parity, and no acknowledgement is needed: a producer can only be two
// calls ahead of a consumer's reading if the consumer's call has ended, because the call between
// them needs the consumer's flags, which its next kernel raises after the previous one ended. The
// call counters live in device memory, so a step captured in a CUDA graph stays correct when
// replayed. No host synchronisation, no allocation per call. Like NCCL, there is no timeout: a
// rank that stops calling leaves its peers' kernels waiting.
//
// Rules (as for NCCL): every rank calls the same collectives in the same order with the same
// counts; a communicator's calls are ordered on the device (one stream, or streams ordered by
// events). A chunk (count elements) may hold at most the group's chunk capacity.
//
// One process per GPU (join): every rank allocates its own area and maps the others' through CUDA
// IPC, handed round once over a communicator the engine already has (e.g. NCCL). Peers write into
// this rank's area (staging and flags) for as long as they make collectives, so a joined
// communicator may be destroyed only after every rank's last collective has completed on every
// rank: synchronise the stream on every rank, then a barrier over the bootstrap communicator (for
// example a small all_gather followed by a stream synchronisation), then destroy on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "dcpmla/comm.h"

namespace dcpmla {

class PeerGroup;

class PeerCommunicator final : public Communicator {
 public:
  struct Shared;  // the group's device areas, as this process maps them (opaque)

  // One rank per process: allocates this rank's area on `device` (2 * W * chunk_capacity bytes of
  // staging, chunk_capacity as for PeerGroup and equal on every rank), hands its CUDA IPC handle
  // to every rank through `bootstrap` (any Communicator of the same ranks whose collectives run
  // on `device`, e.g. the engine's NcclCommunicator; one all_gather of a record per rank, then a
  // host synchronisation) and opens the peers' areas. rank and world are bootstrap's. Blocks
  // until every rank has joined: a collective over bootstrap, called by every rank.
  //
  // Requires every rank on one host, each on its own GPU, with every rank's GPU visible in every
  // process (CUDA_VISIBLE_DEVICES lists them all; `device` indexes this process's list) and peer
  // access between them.
  //
  // Errors (Error naming the argument): before any collective, bootstrap.world() outside [1, 8]
  // ("bootstrap") and `device` not a device of this process ("device"); this rank alone throws and
  // the others wait in bootstrap's all_gather, as with NcclCommunicator::join. Everything later is
  // thrown by every rank together: unequal chunk_capacity (invalid_argument naming
  // it), two ranks in one process ("bootstrap") or on one GPU ("device"), a peer's GPU not
  // visible or not reachable ("device"), a failed allocation or IPC call. The rank where it
  // happened throws the original Error, the others the same code and argument naming that rank.
  // Faults only one rank can see (visibility, peer access, opening a mapping) are handed round by
  // a second all_gather after the mappings are opened.
  //
  // The object owns its area (freed on destruction, after cudaDeviceSynchronize on `device`) and
  // the peers' mappings (closed); see the destruction rule above.
  static std::unique_ptr<PeerCommunicator> join(Communicator& bootstrap, int device,
                                                std::size_t chunk_capacity);

  PeerCommunicator(const PeerCommunicator&) = delete;
  PeerCommunicator& operator=(const PeerCommunicator&) = delete;
  ~PeerCommunicator() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int device() const { return device_; }

  // recv [world, count] <- every rank's send [count]. In place when send == recv + rank * count.
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  // recv [count] <- sum over ranks r = 0, 1, ... of send [world, count] chunk `rank`, in that
  // order (f32). In place when recv == send + rank * count.
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count, Stream s) override;
  // recv chunk r <- rank r's send chunk `rank`, both [world, count]; no overlap.
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  // all_to_all leaving recv chunk `rank` untouched.
  void all_to_all_peers(const void* send, void* recv, std::size_t count, DType dtype,
                        Stream s) override;

 private:
  friend class PeerGroup;
  // A group's rank: the group owns `shared`.
  PeerCommunicator(const Shared& shared, int rank, int world, int device);
  // A joined rank: owns the areas join allocates or opens (filled in after construction, so a
  // failing join releases what it had made by destroying the object).
  PeerCommunicator(std::unique_ptr<Shared> owned, int rank, int world, int device);
  std::unique_ptr<Shared> owned_;
  const Shared* shared_;
  int rank_;
  int world_;
  int device_;
};

// W local GPUs with peer access between every pair; rank r runs on devices[r]. Each rank's
// collectives are issued by its own thread (or one thread, rank after rank: a collective's kernel
// waits on the device, never on the host).
class PeerGroup {
 public:
  // At most 8 distinct devices that exist, every pair with peer access (enabled here; left
  // enabled afterwards, since other code on the devices may rely on it). chunk_capacity: the most
  // bytes of one chunk (count * element size) any call will move (dcp_exchange_chunk_bytes gives
  // it for a DCP step; rounded up to a multiple of 16). Allocates 2 * W * chunk_capacity bytes of
  // staging on every device.
  // Throws Error naming "devices" or "chunk_capacity".
  PeerGroup(std::vector<int> devices, std::size_t chunk_capacity);
  PeerGroup(const PeerGroup&) = delete;
  PeerGroup& operator=(const PeerGroup&) = delete;
  // Frees the staging areas (cudaFree waits for work still using them).
  ~PeerGroup();

  int world() const { return int(devices_.size()); }
  const std::vector<int>& devices() const { return devices_; }
  std::size_t chunk_capacity() const;
  // Rank r's communicator (owned by the group).
  PeerCommunicator& communicator(int rank) const;

  // Whether the constructor accepts these devices: 1 to 8 distinct ones that exist, every pair
  // with peer access. Never throws.
  static bool supported(const std::vector<int>& devices);

 private:
  std::vector<int> devices_;
  std::unique_ptr<PeerCommunicator::Shared> shared_;
  std::vector<std::unique_ptr<PeerCommunicator>> communicators_;
};

}  // namespace dcpmla
