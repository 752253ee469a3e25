// The Communicator over NCCL: one DCP rank per GPU.
//
// Collectives are enqueued on the caller's stream (Stream = cudaStream_t; nullptr is the legacy
// default stream of the communicator's device) and never synchronise the host, so a DCP step that
// uses them can be captured in a CUDA graph (each rank capturing its own stream). Arguments are
// checked on the host before NCCL sees them; a count of 0 is a no-op on every rank. NCCL failures
// become Error(backend_failure, <call>, "ncclSuccess", <NCCL's message and last error>).
//
// Three ways in:
//  (a) NcclCommunicator::wrap(comm): a communicator the host application already owns; dcpmla
//      never destroys it.
//  (b) NcclCommunicator::join(id, world, rank, device): one process (or thread) per GPU. Rank 0
//      makes the id (new_nccl_unique_id) and hands it to the others through a file
//      (write_nccl_unique_id / read_nccl_unique_id) or an environment variable holding its hex
//      form (nccl_unique_id_from_env). The communicator is owned and destroyed with the object.
//  (c) NcclLocalGroup(devices): one process driving all local GPUs (ncclCommInitAll); rank r's
//      communicator goes to rank r's thread.
#pragma once

#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dcpmla/comm.h"

namespace dcpmla {

class NcclCommunicator final : public Communicator {
 public:
  // (a) Non-owning: reads rank, size and device from comm. Throws Error(invalid_argument) on null.
  static std::unique_ptr<NcclCommunicator> wrap(ncclComm_t comm);
  // (b) Owning: joins the group of `world` ranks named by id as `rank`, on `device`. Blocks until
  // every rank has joined. Arguments are checked before NCCL or CUDA is called.
  static std::unique_ptr<NcclCommunicator> join(const ncclUniqueId& id, int world, int rank,
                                                int device);

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  // Owning: finalizes and destroys the NCCL communicator (errors are ignored: a destructor).
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int device() const { return device_; }
  ncclComm_t handle() const { return comm_; }
  bool owns_handle() const { return owned_; }

  // recv [world, count] <- every rank's send [count] (ncclAllGather). In place when
  // send == recv + rank * count elements.
  void all_gather(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  // recv [count] <- sum over ranks of send [world, count] chunk `rank` (ncclReduceScatter, f32).
  // In place when recv == send + rank * count.
  void reduce_scatter_sum(const float* send, float* recv, std::size_t count, Stream s) override;
  // recv chunk r <- rank r's send chunk `rank`, both [world, count] (one ncclSend and ncclRecv per
  // peer in one group). send and recv must not overlap.
  void all_to_all(const void* send, void* recv, std::size_t count, DType dtype, Stream s) override;
  // all_to_all without the rank's own chunk (no send to itself): recv chunk `rank` is untouched.
  void all_to_all_peers(const void* send, void* recv, std::size_t count, DType dtype,
                        Stream s) override;

 private:
  NcclCommunicator(ncclComm_t comm, bool owned);
  void send_recv_chunks(const void* send, void* recv, std::size_t count, DType dtype, Stream s,
                        bool own_chunk);
  ncclComm_t comm_;
  bool owned_;
  int rank_ = 0;
  int world_ = 0;
  int device_ = 0;
};

// (c) One process, one rank per local GPU: rank r runs on devices[r]. Every rank's collectives are
// issued by its own thread (or by one thread inside ncclGroupStart / ncclGroupEnd).
class NcclLocalGroup {
 public:
  // Devices must be distinct CUDA device indices that exist. Throws Error naming "devices".
  explicit NcclLocalGroup(std::vector<int> devices);
  NcclLocalGroup(const NcclLocalGroup&) = delete;
  NcclLocalGroup& operator=(const NcclLocalGroup&) = delete;
  // Finalizes every communicator in one NCCL group, then destroys them: finalizing them one by one
  // from one thread could wait on ranks that have not been finalized yet.
  ~NcclLocalGroup();

  int world() const { return int(devices_.size()); }
  const std::vector<int>& devices() const { return devices_; }
  // Rank r's communicator (owned by the group).
  NcclCommunicator& communicator(int rank) const;

 private:
  std::vector<int> devices_;
  std::vector<ncclComm_t> handles_;
  std::vector<std::unique_ptr<NcclCommunicator>> communicators_;  // non-owning views
};

// A fresh unique id (ncclGetUniqueId): rank 0 makes one per group and hands it to every rank.
ncclUniqueId new_nccl_unique_id();
// The id as 2 * NCCL_UNIQUE_ID_BYTES lower-case hex digits, and back. from_hex throws Error naming
// `argument` unless given exactly that many hex digits.
std::string nccl_unique_id_to_hex(const ncclUniqueId& id);
ncclUniqueId nccl_unique_id_from_hex(std::string_view hex, const std::string& argument);
// Writes the hex form to `path` atomically (a temporary file renamed into place), so a reader
// polling for the file never sees half an id.
void write_nccl_unique_id(const std::string& path, const ncclUniqueId& id);
// Waits up to `timeout` for `path` to appear, then reads the id. Throws Error naming the path.
ncclUniqueId read_nccl_unique_id(const std::string& path, std::chrono::milliseconds timeout);
// The id held (as hex) by an environment variable. Throws Error naming the variable.
ncclUniqueId nccl_unique_id_from_env(const std::string& variable);

}  // namespace dcpmla
