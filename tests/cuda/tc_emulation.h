// A host emulation of the sm_90a instructions the tensor-core decode kernels use (on top of
// cuda_emulation.h's threads, __syncthreads, __syncwarp and shuffles), so that their own source
// (src/cuda/decode/sm90/kernel.cuh and what it includes, compiled as plain C++ with DCPMLA_EMULATE)
// runs on the CPU, one OS thread per CUDA thread:
//
//   shared addresses   byte offsets into the block's emulated shared memory (bounds-checked)
//   named barriers     bar.sync / bar.arrive with their thread counts; a thread arriving twice
//                      in one phase, or counts that differ within a phase, abort
//   mbarriers          arrival count, transaction bytes (may go below zero), phase parity
//   bulk tensor copy   a 2-D or 4-D box of a tensor described by EmuTensorMap (in the CUtensorMap's
//                      bytes): bf16 with the 128-byte swizzle and NaN past the tensor, or uint8
//                      unswizzled with zeros; completes its bytes at once
//   cp.async           copied at once
//   wgmma              each thread computes its own accumulator fragment at issue, from the
//                      operands the descriptors address (K-major or MN-major, 128-byte swizzle),
//                      or, for an A fragment in registers (RS), from its quad's registers,
//                      into a shadow: the registers read NaN until the wait that retires the MMA
//                      (writing them meanwhile aborts);
//                      the warpgroup's MMA starts when its last thread issues it (its operand bytes
//                      kept) and completes at the first wait that retires it, which checks that
//                      the bytes did not change meanwhile
//   operand writes     a bulk copy, cp.async or st.shared into an operand of an MMA aborts unless
//                      the writing thread is ordered after that MMA's completion: by its own wait,
//                      or through a named barrier, mbarrier or __syncthreads from a thread that
//                      waited (happens-before clocks, cuda_emulation.h). This catches what the
//                      check at completion cannot: a write by a thread that never waited, run
//                      after another thread's retiring wait in the emulated interleaving (a
//                      refill issued by thread 0 before its own wait; wip/seesaw-stamps).
//
// Every wait that cannot finish (a deadlock) aborts after kDeadlockSeconds with the barrier named.
// The wgmma sums are deterministic but not the tensor cores' bits: results are compared with a
// tolerance against the CPU backend, and bit for bit only between emulated runs.
#pragma once

#include "cuda_emulation.h"
// The emulation shims must come first.
#include <cuda.h>  // CUtensorMap

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "dcpmla/numeric.h"

#undef __maxnreg__
#define __maxnreg__(n)
#undef __grid_constant__
#define __grid_constant__

namespace dcpmla_emu {

constexpr int kDeadlockSeconds = 120;  // generous: CI runs these beside other tests on 2 cores

// Where each thread waits (for the report of a deadlock): a label and an id, or nothing.
struct WaitSite {
  const char* what = nullptr;
  long id = 0;
};
inline WaitSite wait_sites[1024];

[[noreturn]] inline void emu_fail(const char* what, long a = 0, long b = 0) {
  std::fprintf(stderr, "tc emulation: %s (%ld, %ld), thread %u of block %u\n", what, a, b,
               thread_idx.x, block_idx.x);
  for (int t = 0; t < 1024; ++t) {
    if (wait_sites[t].what != nullptr) {
      std::fprintf(stderr, "  thread %d waits: %s %ld\n", t, wait_sites[t].what, wait_sites[t].id);
    }
  }
  std::abort();
}

inline std::uint32_t shared_address(const void* p) {
  const auto off = static_cast<const unsigned char*>(p) - block->shared.data();
  if (off < 0 || std::size_t(off) > block->shared.size()) emu_fail("not a shared address", off);
  return std::uint32_t(off);
}
inline unsigned char* shared_at(std::uint32_t a, std::size_t bytes) {
  if (std::size_t(a) + bytes > block->shared.size()) {
    emu_fail("shared access past the block's shared memory", a, long(bytes));
  }
  return block->shared.data() + a;
}
// The 128-byte swizzle: bits 4-6 of an address XOR bits 7-9.
inline std::uint32_t swizzle128(std::uint32_t a) {
  return a ^ (((a >> 7) & 7u) << 4);
}

// One lock for every barrier of the emulated block (named barriers and mbarriers).
struct SyncState {
  std::mutex mutex;
  std::condition_variable cv;
  struct Named {
    int arrived = 0, expected = 0;
    std::uint64_t generation = 0;
    std::map<unsigned, std::uint64_t> last;   // thread -> generation + 1 of its last arrival
    Clock joined{};                           // the arrivals' clocks, this phase
    std::map<std::uint64_t, Clock> released;  // generation -> its arrivals' clocks
  } named[16];
  struct MBarrier {
    int expected = 0, pending = 0;
    long tx = 0;
    std::uint64_t phase = 0;                  // completed phases
    Clock joined{};                           // the arrivals' clocks, this phase
    std::map<std::uint64_t, Clock> released;  // completed phase -> its arrivals' clocks
  };
  std::map<std::uint32_t, MBarrier> mbarriers;
};
inline SyncState sync_state;

template <class Pred>
void wait_or_fail(std::unique_lock<std::mutex>& lk, Pred done, const char* what, long a) {
  wait_sites[thread_idx.x] = {what, a};
  if (!sync_state.cv.wait_for(lk, std::chrono::seconds(kDeadlockSeconds), done)) {
    emu_fail(what, a);
  }
  wait_sites[thread_idx.x] = {};
}

inline void named_barrier(int id, int threads, bool wait) {
  if (id <= 0 || id >= 16 || threads <= 0 || threads % 32 != 0) {
    emu_fail("bad named barrier", id, threads);
  }
  std::unique_lock lk(sync_state.mutex);
  auto& b = sync_state.named[id];
  if (b.arrived == 0) {
    b.expected = threads;
  } else if (b.expected != threads) {
    emu_fail("named barrier: thread counts differ within a phase", id, threads);
  }
  auto& last = b.last[thread_idx.x];
  if (last == b.generation + 1) emu_fail("named barrier: a thread arrived twice in a phase", id);
  last = b.generation + 1;
  const std::uint64_t gen = b.generation;
  if (b.arrived == 0) b.joined = {};
  join_clock(b.joined, hb_clock);
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    b.released[gen] = b.joined;
    if (gen >= 8) b.released.erase(gen - 8);
    ++b.generation;
    sync_state.cv.notify_all();
    if (wait) join_clock(hb_clock, b.joined);
    return;
  }
  if (wait) {
    wait_or_fail(
        lk, [&] { return b.generation != gen; }, "deadlock at named barrier", id);
    const auto it = b.released.find(gen);
    if (it == b.released.end())
      emu_fail("named barrier: a waiter woke after its phase's clocks went", id);
    join_clock(hb_clock, it->second);
  }
}

inline SyncState::MBarrier& mbarrier_of(std::uint32_t bar) {
  const auto it = sync_state.mbarriers.find(bar);
  if (it == sync_state.mbarriers.end()) emu_fail("mbarrier used before its init", bar);
  return it->second;
}
inline void mbarrier_settle(SyncState::MBarrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    b.released[b.phase] = b.joined;
    if (b.phase >= 8) b.released.erase(b.phase - 8);
    b.joined = {};
    ++b.phase;
    b.pending = b.expected;
    sync_state.cv.notify_all();
  }
}
inline void mbarrier_arrive(std::uint32_t bar, long tx) {
  std::unique_lock lk(sync_state.mutex);
  auto& b = mbarrier_of(bar);
  if (b.pending <= 0) emu_fail("mbarrier: more arrivals than its count", bar);
  join_clock(b.joined, hb_clock);
  b.tx += tx;
  --b.pending;
  mbarrier_settle(b);
}
inline void mbarrier_complete_tx(std::uint32_t bar, long bytes) {
  std::unique_lock lk(sync_state.mutex);
  auto& b = mbarrier_of(bar);
  b.tx -= bytes;
  mbarrier_settle(b);
}

// What the decode's tensor map says (filled by the test into CUtensorMap's bytes): 2-D, or 4-D
// with the outer dimensions (z, w) set (a 2-D map's are zero).
struct EmuTensorMap {
  const unsigned char* base;
  std::uint64_t dims[2];        // elements along x (contiguous), rows along y
  std::uint64_t stride;         // bytes between rows
  std::uint32_t box[2];         // elements x rows
  std::uint32_t elem;           // bytes an element: 2 (bf16: 128-byte swizzle, NaN past the tensor)
                                // or 1 (uint8: no swizzle, zeros past the tensor)
  std::uint64_t outer_dims[2];  // z, w (0, as a 2-D map leaves them: 1)
  std::uint64_t outer_strides[2];  // bytes between z's, between w's
  std::uint32_t outer_box[2];      // (0: 1)
};
static_assert(sizeof(EmuTensorMap) <= sizeof(CUtensorMap));
inline CUtensorMap encode_tensor_map(const EmuTensorMap& m) {
  CUtensorMap map{};
  std::memcpy(&map, &m, sizeof m);
  return map;
}

// wgmma, as the tensor cores see it: a warpgroup's n-th MMA starts once all 128 threads have
// issued their n-th, and completes before the first thread returns from a wait that retires it.
// Its operands are read at its start (their bytes kept) and must not change before it completes.
struct Mma {
  int issued = 0;
  bool checked = false;
  std::vector<std::uint32_t> addrs;  // every operand element (A's 64 x 16, then B's N x 16)
  std::vector<std::uint16_t> values;
};
struct WarpgroupMmas {
  std::uint64_t launch = 0;
  unsigned blk = ~0u;
  std::deque<Mma> mmas;  // in issue order (a deque: waiters hold references across pushes)
};
inline WarpgroupMmas warpgroup_mmas[4];
// Per warpgroup and 2-byte unit of shared memory, the index of the latest MMA that read it (-1:
// none), for the check of operand writes (check_operand_write); reset before each block. Atomic:
// MMAs start under sync_state.mutex while other threads check their writes without it (a check
// that misses an MMA starting meanwhile leaves that write to the check at the MMA's completion).
struct OperandReaders {
  std::size_t units = 0;
  std::unique_ptr<std::atomic<int>[]> latest[4];
  void reset(std::size_t shared_bytes) {
    if (units != shared_bytes / 2) {
      units = shared_bytes / 2;
      for (auto& l : latest) l = std::make_unique<std::atomic<int>[]>(units);
    }
    for (auto& l : latest) {
      for (std::size_t u = 0; u < units; ++u) l[u].store(-1, std::memory_order_relaxed);
    }
  }
};
inline OperandReaders operand_readers;
inline const bool operand_readers_hooked = [] {
  before_each_block = [] { operand_readers.reset(block->shared.size()); };
  return true;
}();
// A thread's issued MMAs (a count) and its committed groups ([begin, end) of the MMAs).
// While MMAs on an accumulator are in flight its registers hold kPoison (reads give NaN, writes
// are caught) and its value lives in a shadow, written back when the last of them retires.
constexpr std::uint32_t kPoison = 0x7fbadbadu;
struct Shadow {
  std::vector<float> value;
  int last = 0;  // index of the latest MMA into it
};
struct ThreadMmas {
  std::uint64_t launch = 0;
  unsigned blk = ~0u;
  int issued = 0, group_begin = 0;
  std::deque<std::pair<int, int>> groups;
  std::map<float*, Shadow> shadows;
};
inline thread_local ThreadMmas thread_mmas;

inline ThreadMmas& this_thread_mmas() {
  auto& t = thread_mmas;
  if (t.launch != launches || t.blk != block_idx.x) t = {launches, block_idx.x, 0, 0, {}, {}};
  return t;
}
inline WarpgroupMmas& this_warpgroup_mmas() {  // under sync_state.mutex
  auto& w = warpgroup_mmas[thread_idx.x / 128];
  if (w.launch != launches || w.blk != block_idx.x) w = {launches, block_idx.x, {}};
  return w;
}
inline std::uint16_t shared_u16(std::uint32_t a) {
  std::uint16_t v;
  std::memcpy(&v, shared_at(a, 2), 2);
  return v;
}
// Before this thread writes `bytes` of shared memory at a (a bulk copy, cp.async or st.shared):
// every MMA that read them must be one whose completion the thread is ordered after.
inline void check_operand_write(std::uint32_t a, std::size_t bytes) {
  shared_at(a, bytes);  // bounds
  for (std::uint32_t u = a / 2; u < (a + std::uint32_t(bytes) + 1) / 2; ++u) {
    for (int w = 0; w < 4; ++w) {
      const int mma = operand_readers.latest[w][u].load(std::memory_order_relaxed);
      if (mma >= hb_clock[std::size_t(w)]) {
        emu_fail(
            "a shared-memory write to an MMA's operand by a thread not ordered after that MMA's "
            "completion (warpgroup, MMA index)",
            w, mma);
      }
    }
  }
}

struct Descriptor {
  std::uint32_t start, leading, stride;
  explicit Descriptor(std::uint64_t d)
      : start(std::uint32_t(d & 0x3fffu) << 4),
        leading(std::uint32_t((d >> 16) & 0x3fffu) << 4),
        stride(std::uint32_t((d >> 32) & 0x3fffu) << 4) {
    if ((d >> 62) != 1) emu_fail("wgmma descriptor without the 128-byte swizzle");
  }
  // Address of element (i along M or N, k along K) of a K-major operand (rows along M / N, 64 K
  // values a row, 8-row atoms `stride` apart) or an MN-major one (rows along K, 64 M / N values
  // a row, 8-row atoms `stride` apart, 64-wide M / N blocks `leading` apart).
  std::uint32_t at(int i, int k, bool mn_major) const {
    const std::uint32_t logical =
        mn_major ? start + std::uint32_t(i / 64) * leading + std::uint32_t(k / 8) * stride +
                       std::uint32_t(k % 8) * 128u + std::uint32_t(i % 64) * 2u
                 : start + std::uint32_t(i / 8) * stride + std::uint32_t(i % 8) * 128u +
                       std::uint32_t(k) * 2u;
    return swizzle128(logical);
  }
};

// An MMA operand's element: bf16, or f16 (the round decode's fp8 cache).
inline float operand_value(std::uint16_t v, bool f16) {
  return f16 ? dcpmla::f16_to_float(v) : dcpmla::bf16_to_float(v);
}

// D[64 x N] (+)= A[64 x 16] B[16 x N], this thread's fragment (rows 16 warp + lane / 4 (+ 8),
// columns 8 j + 2 (lane % 4) + {0, 1}, in d[4 j + 2 r + e]), computed at issue.
inline bool poisoned(const float* d, int n) {
  for (int i = 0; i < n; ++i) {
    if (std::bit_cast<std::uint32_t>(d[i]) != kPoison) return false;
  }
  return true;
}

// D[64 x N] (+)= A[64 x 16] B[16 x N], this thread's fragment (rows 16 warp + lane / 4 (+ 8),
// columns 8 j + 2 (lane % 4) + {0, 1}, in d[4 j + 2 r + e]), computed at issue into d's shadow.
// A's two rows of this thread come from shared memory (A_desc) or, for an A fragment in
// registers, from `a_rows` (rs_rows below).
template <int N>
void wgmma(float (&d)[N / 2], const Descriptor* A_desc, const float (*a_rows)[16],
           std::uint64_t b_desc, bool accumulate, bool a_mn, bool b_mn, bool f16 = false) {
  auto value = [f16](std::uint16_t v) { return operand_value(v, f16); };
  const Descriptor B(b_desc);
  const int t = int(thread_idx.x) % 128, warp = t / 32, lane = t % 32;
  const int rows[2] = {16 * warp + lane / 4, 16 * warp + lane / 4 + 8};
  ThreadMmas& mine = this_thread_mmas();
  auto [it, fresh] = mine.shadows.try_emplace(d);
  std::vector<float>& acc = it->second.value;
  if (fresh) {
    acc.assign(d, d + N / 2);
  } else if (!poisoned(d, N / 2)) {
    emu_fail("accumulator registers written while an MMA into them is in flight");
  }
  float a[2][16];
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 16; ++k) {
      a[r][k] = A_desc != nullptr ? value(shared_u16(A_desc->at(rows[r], k, a_mn))) : a_rows[r][k];
    }
  }
  for (int j = 0; j < N / 8; ++j) {
    for (int e = 0; e < 2; ++e) {
      const int col = 8 * j + 2 * (lane % 4) + e;
      float b[16];
      for (int k = 0; k < 16; ++k) b[k] = value(shared_u16(B.at(col, k, b_mn)));
      for (int r = 0; r < 2; ++r) {
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum = std::fma(a[r][k], b[k], sum);
        float& out = acc[std::size_t(4 * j + 2 * r + e)];
        out = accumulate ? out + sum : sum;
      }
    }
  }
  std::fill(d, d + N / 2, std::bit_cast<float>(kPoison));
  it->second.last = mine.issued;
  const int index = mine.issued++;
  std::unique_lock lk(sync_state.mutex);
  WarpgroupMmas& wg = this_warpgroup_mmas();
  if (int(wg.mmas.size()) <= index) {
    Mma m;
    for (int i = 0; i < 64 && A_desc != nullptr; ++i) {
      for (int k = 0; k < 16; ++k) m.addrs.push_back(A_desc->at(i, k, a_mn));
    }
    for (int i = 0; i < N; ++i) {
      for (int k = 0; k < 16; ++k) m.addrs.push_back(B.at(i, k, b_mn));
    }
    wg.mmas.push_back(std::move(m));
  }
  Mma& m = wg.mmas[std::size_t(index)];
  if (++m.issued == 128) {  // it starts: the operands are read now
    auto& latest = operand_readers.latest[thread_idx.x / 128];
    for (std::uint32_t at : m.addrs) {
      m.values.push_back(shared_u16(at));
      if (latest[at / 2].load(std::memory_order_relaxed) < index) {
        latest[at / 2].store(index, std::memory_order_relaxed);
      }
    }
    sync_state.cv.notify_all();
  }
}

// Both operands in shared memory.
template <int N>
void wgmma(float (&d)[N / 2], std::uint64_t a_desc, std::uint64_t b_desc, bool accumulate,
           bool a_mn, bool b_mn, bool f16 = false) {
  const Descriptor A(a_desc);
  wgmma<N>(d, &A, nullptr, b_desc, accumulate, a_mn, b_mn, f16);
}

// The rows of A (bf16 values, or f16, as floats) whose fragment in registers the threads of this
// thread's quad hold: thread q of a quad holds, of its rows r0 and r0 + 8, columns 2 q + {0, 1}
// (a[0]: r0, a[1]: r0 + 8) and 8 + 2 q + {0, 1} (a[2]: r0, a[3]: r0 + 8), two values a register
// (low half first). Every lane of the warp calls (the instruction is warp-synchronous).
inline void rs_rows(const std::uint32_t (&a)[4], float (&rows)[2][16], bool f16 = false) {
  auto value = [f16](std::uint32_t v) { return operand_value(std::uint16_t(v), f16); };
  static std::uint32_t posted[32][32][4];  // [warp][lane][register]: one block runs at a time
  const int w = warp_of_thread(), lane = int(thread_idx.x) % 32;
  std::copy(a, a + 4, posted[w][lane]);
  __syncwarp();
  for (int q = 0; q < 4; ++q) {
    const std::uint32_t* from = posted[w][(lane & ~3) + q];
    for (int r = 0; r < 2; ++r) {
      for (int half = 0; half < 2; ++half) {
        const std::uint32_t v = from[2 * half + r];
        rows[r][8 * half + 2 * q] = value(v & 0xffffu);
        rows[r][8 * half + 2 * q + 1] = value(v >> 16);
      }
    }
  }
  __syncwarp();
}

inline void wgmma_commit() {
  ThreadMmas& mine = this_thread_mmas();
  mine.groups.emplace_back(mine.group_begin, mine.issued);
  mine.group_begin = mine.issued;
}

inline void wgmma_wait(int n) {
  ThreadMmas& mine = this_thread_mmas();
  while (int(mine.groups.size()) > n) {
    const auto [begin, end] = mine.groups.front();
    mine.groups.pop_front();
    std::unique_lock lk(sync_state.mutex);
    WarpgroupMmas& wg = this_warpgroup_mmas();
    for (int i = begin; i < end; ++i) {
      Mma& m = wg.mmas[std::size_t(i)];
      wait_or_fail(
          lk, [&] { return m.issued == 128; },
          "deadlock: a wgmma waited for that its warpgroup has not all issued", i);
      if (m.checked) continue;
      m.checked = true;
      for (std::size_t e = 0; e < m.addrs.size(); ++e) {
        if (shared_u16(m.addrs[e]) != m.values[e]) {
          emu_fail(
              "a wgmma's shared-memory operands changed while it was in flight (operand "
              "element, its address)",
              long(e), long(m.addrs[e]));
        }
      }
      m.addrs = {};
      m.values = {};
    }
    auto& seen = hb_clock[thread_idx.x / 128];
    seen = std::max(seen, end);
    lk.unlock();
    for (auto it = mine.shadows.begin(); it != mine.shadows.end();) {
      if (it->second.last >= end) {
        ++it;
        continue;
      }
      if (!poisoned(it->first, int(it->second.value.size()))) {
        emu_fail("accumulator registers written while an MMA into them was in flight");
      }
      std::copy(it->second.value.begin(), it->second.value.end(), it->first);
      it = mine.shadows.erase(it);
    }
  }
}

}  // namespace dcpmla_emu

inline bool __any_sync(unsigned, bool pred) {
  const int w = dcpmla_emu::warp_of_thread(), lane = int(threadIdx.x) % 32;
  auto& slots = dcpmla_emu::block->slots[w];
  slots[lane] = pred ? 1u : 0u;
  __syncwarp();
  bool any = false;
  for (std::uint32_t s : slots) any = any || s != 0;
  __syncwarp();
  return any;
}

namespace dcpmla::cuda::hopper {

inline void mbarrier_init(std::uint32_t bar, std::uint32_t count) {
  std::unique_lock lk(dcpmla_emu::sync_state.mutex);
  dcpmla_emu::SyncState::MBarrier b;
  b.expected = b.pending = int(count);
  dcpmla_emu::sync_state.mbarriers[bar] = b;
}
inline void mbarrier_arrive(std::uint32_t bar) {
  dcpmla_emu::mbarrier_arrive(bar, 0);
}
inline void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  dcpmla_emu::mbarrier_arrive(bar, long(bytes));
}
inline void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
  using dcpmla_emu::sync_state;
  std::unique_lock lk(sync_state.mutex);
  auto& b = dcpmla_emu::mbarrier_of(bar);
  // The phase of parity `parity` has completed once the current phase has the other parity.
  dcpmla_emu::wait_or_fail(
      lk, [&] { return (b.phase & 1u) != parity; }, "deadlock at mbarrier", long(bar));
  // The latest completed phase of that parity: the waiter is ordered after its arrivals.
  const std::uint64_t done = (b.phase - 1) % 2 == parity ? b.phase - 1 : b.phase - 2;
  const auto it = b.released.find(done);
  if (it != b.released.end()) dcpmla_emu::join_clock(dcpmla_emu::hb_clock, it->second);
}

inline void bulk_tensor_load_4d(std::uint32_t dst, const CUtensorMap* map, int x, int y, int z,
                                int w, std::uint32_t bar) {
  dcpmla_emu::EmuTensorMap m;
  std::memcpy(&m, map, sizeof m);
  const bool bf16 = m.elem == 2;  // the 128-byte swizzle; uint8 boxes land unswizzled
  const std::uint32_t row_bytes = m.box[0] * m.elem;
  if (bf16 ? (dst % 1024 != 0 || row_bytes != 128) : (m.elem != 1 || dst % 16 != 0)) {
    dcpmla_emu::emu_fail(
        "bulk copy: bf16 boxes of 128-byte rows at 1024-byte-aligned addresses, "
        "or uint8 boxes at 16-byte-aligned ones",
        dst, long(m.elem));
  }
  for (int d = 0; d < 2; ++d) {
    m.outer_dims[d] = std::max<std::uint64_t>(m.outer_dims[d], 1);
    m.outer_box[d] = std::max<std::uint32_t>(m.outer_box[d], 1);
  }
  // The box's rows in shared memory: y fastest, then z, then w.
  const std::uint32_t rows = m.box[1] * m.outer_box[0] * m.outer_box[1];
  for (std::uint32_t r = 0; r < rows; ++r) {
    const std::uint64_t gy = std::uint64_t(y) + r % m.box[1];
    const std::uint64_t gz = std::uint64_t(z) + r / m.box[1] % m.outer_box[0];
    const std::uint64_t gw = std::uint64_t(w) + r / (m.box[1] * m.outer_box[0]);
    const bool row_inside = y >= 0 && z >= 0 && w >= 0 && gy < m.dims[1] && gz < m.outer_dims[0] &&
                            gw < m.outer_dims[1];
    for (std::uint32_t c = 0; c < m.box[0]; ++c) {
      const std::uint64_t gx = std::uint64_t(x) + c;
      std::uint16_t v = bf16 ? 0x7fc0 : 0;  // past the tensor: NaN (floats), zero (integers)
      if (x >= 0 && row_inside && gx < m.dims[0]) {
        std::memcpy(&v,
                    m.base + gw * m.outer_strides[1] + gz * m.outer_strides[0] + gy * m.stride +
                        gx * m.elem,
                    m.elem);
      }
      const std::uint32_t at = dst + r * row_bytes + c * m.elem;
      const std::uint32_t where = bf16 ? dcpmla_emu::swizzle128(at) : at;
      dcpmla_emu::check_operand_write(where, m.elem);
      std::memcpy(dcpmla_emu::shared_at(where, m.elem), &v, m.elem);
    }
  }
  dcpmla_emu::mbarrier_complete_tx(bar, long(row_bytes) * rows);
}
inline void bulk_tensor_load_2d(std::uint32_t dst, const CUtensorMap* map, int x, int y,
                                std::uint32_t bar) {
  bulk_tensor_load_4d(dst, map, x, y, 0, 0, bar);
}

inline void wgmma_fence() {}
inline void wgmma_commit() {
  dcpmla_emu::wgmma_commit();
}
template <int N>
void wgmma_wait() {
  dcpmla_emu::wgmma_wait(N);
}
inline void fence_proxy_async_shared() {}
// Registers are the host thread's: moving them between warpgroups changes nothing.
template <int N>
void release_registers() {}
template <int N>
void claim_registers() {}
template <int N>
void pin_registers(float (&)[N]) {}

inline void wgmma_m64n16k16_ss(float (&d)[8], std::uint64_t a, std::uint64_t b, bool acc) {
  dcpmla_emu::wgmma<16>(d, a, b, acc, false, false);
}
inline void wgmma_m64n32k16_ss(float (&d)[16], std::uint64_t a, std::uint64_t b, bool acc) {
  dcpmla_emu::wgmma<32>(d, a, b, acc, false, false);
}
inline void wgmma_m64n64k16_ss(float (&d)[32], std::uint64_t a, std::uint64_t b, bool acc) {
  dcpmla_emu::wgmma<64>(d, a, b, acc, false, false);
}
inline void wgmma_m64n256k16_ss_tb(float (&d)[128], std::uint64_t a, std::uint64_t b, bool acc) {
  dcpmla_emu::wgmma<256>(d, a, b, acc, false, true);
}
inline void wgmma_m64n16k16_ss_ta(float (&d)[8], std::uint64_t a, std::uint64_t b, bool acc) {
  dcpmla_emu::wgmma<16>(d, a, b, acc, true, false);
}
inline void wgmma_m64n32k16_ss_ta(float (&d)[16], std::uint64_t a, std::uint64_t b, bool acc) {
  dcpmla_emu::wgmma<32>(d, a, b, acc, true, false);
}
inline void wgmma_m64n64k16_rs(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b,
                               bool acc) {
  float rows[2][16];
  dcpmla_emu::rs_rows(a, rows);
  dcpmla_emu::wgmma<64>(d, nullptr, rows, b, acc, false, false);
}
inline void wgmma_m64n64k16_ss_f16(float (&d)[32], std::uint64_t a, std::uint64_t b, bool acc) {
  dcpmla_emu::wgmma<64>(d, a, b, acc, false, false, true);
}
inline void wgmma_m64n256k16_ss_tb_f16(float (&d)[128], std::uint64_t a, std::uint64_t b,
                                       bool acc) {
  dcpmla_emu::wgmma<256>(d, a, b, acc, false, true, true);
}
inline void wgmma_m64n64k16_rs_f16(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t b,
                                   bool acc) {
  float rows[2][16];
  dcpmla_emu::rs_rows(a, rows, true);
  dcpmla_emu::wgmma<64>(d, nullptr, rows, b, acc, false, false, true);
}

inline void cp_async16_line(std::uint32_t dst, const void* src) {
  dcpmla_emu::check_operand_write(dst, 16);
  std::memcpy(dcpmla_emu::shared_at(dst, 16), src, 16);
}

}  // namespace dcpmla::cuda::hopper

namespace dcpmla::cuda::sm90 {

inline std::uint32_t smem_addr(const void* p) {
  return dcpmla_emu::shared_address(p);
}
inline void st_shared16(std::uint32_t dst, uint4 v) {
  dcpmla_emu::check_operand_write(dst, 16);
  std::memcpy(dcpmla_emu::shared_at(dst, 16), &v, 16);
}
inline uint4 ld_shared16(std::uint32_t src) {
  uint4 v;
  std::memcpy(&v, dcpmla_emu::shared_at(src, 16), 16);
  return v;
}
inline void st_shared2(std::uint32_t dst, std::uint16_t v) {
  dcpmla_emu::check_operand_write(dst, 2);
  std::memcpy(dcpmla_emu::shared_at(dst, 2), &v, 2);
}
inline void st_shared4(std::uint32_t dst, std::uint32_t v) {
  dcpmla_emu::check_operand_write(dst, 4);
  std::memcpy(dcpmla_emu::shared_at(dst, 4), &v, 4);
}
inline void st_shared8(std::uint32_t dst, uint2 v) {
  dcpmla_emu::check_operand_write(dst, 8);
  std::memcpy(dcpmla_emu::shared_at(dst, 8), &v, 8);
}
inline float fast_exp2(float x) {
  const float r = std::exp2(x);
  return std::fpclassify(r) == FP_SUBNORMAL ? 0.0f : r;  // ftz
}
inline void named_barrier_sync(int id, int threads) {
  dcpmla_emu::named_barrier(id, threads, true);
}
inline void named_barrier_arrive(int id, int threads) {
  dcpmla_emu::named_barrier(id, threads, false);
}

}  // namespace dcpmla::cuda::sm90
