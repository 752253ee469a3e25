// Fuzz target: the planner. The input bytes decode to a batch description, a sharding, head
// count, block size, cache size and split limits: mostly plausible values, with adversarial ones
// (zero, negative, int32 and int64 edges, wrong vector sizes, bad block ids) mixed in by
// byte_reader.h. make_plan must return a plan that satisfies its invariants or throw a
// dcpmla::Error.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "byte_reader.h"
#include "dcpmla/error.h"
#include "dcpmla/plan.h"
#include "dcpmla/types.h"
#include "fuzz_target.h"

namespace {

using dcpmla::Batch;
using dcpmla::Mask;
using dcpmla::PlanConfig;
using dcpmla::Sharding;

// A plan holds 16 bytes per query row and 24 per work item; descriptions whose valid plan could
// need more than a few MB are skipped (the planner does not bound them), which keeps every input
// fast enough to fuzz. Overflow edges come from extents, not counts: a 2^31 - 1 token request in
// blocks of 2^16 tokens is still a small plan.
constexpr std::int64_t kMaxRows = std::int64_t(1) << 16;
constexpr std::int64_t kMaxWorkItems = std::int64_t(1) << 16;
// The block table is built here, so it is bounded here too (1 MiB of ids).
constexpr std::int64_t kMaxTableEntries = std::int64_t(1) << 18;
constexpr std::int64_t kMaxRequests = 4096;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "plan fuzz finding: %s\n", what.c_str());
  std::abort();
}

void check(bool ok, const std::string& what) {
  if (!ok) finding(what);
}

std::int32_t wrap32(std::int64_t v) {
  return std::int32_t(std::uint32_t(std::uint64_t(v)));
}

bool sharding_valid(const PlanConfig& c) {
  const auto& s = c.sharding;
  return s.world >= 1 && s.interleave >= 1 && s.rank >= 0 && s.rank < s.world &&
         c.block_size >= 1 && c.block_size % s.interleave == 0;
}

// An upper bound of the rows and work items a plan of this description holds, or false when it
// may be too large to build here. Only values make_plan accepts matter: it refuses the others
// before allocating.
bool plan_size_bounded(const Batch& b, const PlanConfig& c) {
  const std::int64_t rows = b.num_tokens >= 0 ? b.num_tokens : b.real_tokens();
  if (rows > kMaxRows) return false;
  if (!sharding_valid(c)) return true;
  const auto& lim = c.limits;
  const auto valid_len = [](std::int64_t T) {
    return T >= 1 && T <= std::numeric_limits<std::int32_t>::max();
  };
  // The chunk in blocks as make_plan chooses it (from the blocks of the valid requests).
  std::int64_t total_blocks = 0;
  for (auto T : b.total_len) {
    if (valid_len(T)) total_blocks += (c.sharding.local_len(T) + c.block_size - 1) / c.block_size;
  }
  std::int64_t chunk_blocks = 1;
  if (lim.kv_chunk_blocks > 0) {
    chunk_blocks = lim.kv_chunk_blocks;
  } else if (lim.target_work_items <= 0) {
    chunk_blocks = std::numeric_limits<std::int32_t>::max();
  } else {
    const std::int64_t spread =
        (std::max<std::int64_t>(total_blocks, 1) + lim.target_work_items - 1) /
        lim.target_work_items;
    chunk_blocks = std::max<std::int64_t>({1, lim.min_chunk_blocks, spread});
  }
  std::int64_t items = 0;
  for (std::size_t r = 0; r < b.total_len.size(); ++r) {
    const auto T = b.total_len[r];
    if (!valid_len(T)) continue;
    std::int64_t chunk = chunk_blocks;
    if (r < lim.request_chunk_blocks.size() && lim.request_chunk_blocks[r] > 0) {
      chunk = lim.request_chunk_blocks[r];
    }
    const std::int64_t tokens = chunk * c.block_size;
    items += 1 + c.sharding.local_len(T) / tokens;
    if (items > kMaxWorkItems) return false;
  }
  return true;
}

Batch decode_batch(dcpmla::fuzz::ByteReader& in, PlanConfig& c) {
  c.sharding.world = in.small_int(1, 8);
  c.sharding.rank =
      in.small_int(0, int(std::max<std::int64_t>(0, std::int64_t(c.sharding.world) - 1)));
  c.sharding.interleave = in.small_int(1, 4);
  // block_size = interleave * k keeps it a multiple of the interleave unless k is an edge value.
  const int k = in.small_int(1, 16);
  c.block_size = k >= 1 && c.sharding.interleave >= 1
                     ? int(std::min<std::int64_t>(std::int64_t(c.sharding.interleave) * k,
                                                  std::numeric_limits<int>::max()))
                     : k;
  c.num_heads = in.small_int(1, 128);

  Batch b;
  const int B = in.small_int(0, 12);
  if (B < 0 || B > kMaxRequests) return b;
  const std::uint8_t layout = in.u8();  // which adversarial layout faults to inject
  std::int64_t start = 0;
  b.query_start_loc.push_back(layout & 0x01 ? wrap32(in.small_int(0, 3)) : 0);
  for (int r = 0; r < B; ++r) {
    const int Q = in.small_int(1, 8);
    start += Q;
    b.query_start_loc.push_back(wrap32(start));
    const std::uint8_t t_mode = in.u8();
    const std::int64_t ctx = in.length();
    // Mostly T = Q + context (saturating); sometimes the raw length as T.
    std::int64_t T = ctx;
    if (t_mode < 224 && __builtin_add_overflow(ctx, std::int64_t(Q), &T)) T = ctx;
    b.total_len.push_back(T);
    const std::uint8_t m = in.u8();
    b.mask.push_back(m < 160 ? Mask::causal : m < 250 ? Mask::full : Mask(m - 248));
  }
  if (layout & 0x02) b.query_start_loc.push_back(wrap32(start + 1));
  if ((layout & 0x04) && !b.query_start_loc.empty()) b.query_start_loc.pop_back();
  if (b.query_start_loc.empty()) b.query_start_loc.push_back(0);
  if (layout & 0x08) b.mask.clear();
  if ((layout & 0x10) && !(layout & 0x08)) b.mask.push_back(Mask::causal);

  switch (in.u8() % 4) {
    case 0:
      b.num_tokens = -1;
      break;
    case 1:
    case 2:
      b.num_tokens = b.real_tokens() + in.small_int(0, 8);
      break;
    default:
      b.num_tokens = in.length();
      break;
  }

  // The blocks rank 0 (the fullest) reads, plus slack or an adversarial column count.
  std::int64_t needed = 0;
  const Sharding rank0{c.sharding.world, 0, c.sharding.interleave};
  const bool valid = sharding_valid(c);
  for (auto T : b.total_len) {
    if (!valid || T < 1 || T > std::numeric_limits<std::int32_t>::max()) continue;
    needed = std::max(needed, (rank0.local_len(T) + c.block_size - 1) / c.block_size);
  }
  const int slack = in.small_int(0, 3);
  const std::int64_t columns = slack == 1000 ? std::int64_t(in.small_int(0, 4)) : needed + slack;
  b.max_blocks = wrap32(columns);
  // Ids: consecutive, shuffled by the input, or with one bad entry; num_blocks matches or not.
  const std::int64_t entries =
      b.max_blocks > 0 ? std::int64_t(b.total_len.size()) * b.max_blocks : 0;
  const std::int64_t table = std::min(entries, kMaxTableEntries);
  b.block_table.resize(std::size_t(table));
  const std::uint8_t id_mode = in.u8();
  for (std::int64_t i = 0; i < table; ++i) {
    b.block_table[std::size_t(i)] = id_mode % 3 == 0   ? wrap32(i)
                                    : id_mode % 3 == 1 ? wrap32(table - 1 - i)
                                                       : std::int32_t(in.u8()) - 1;
  }
  if ((layout & 0x20) && table > 0) {
    const auto at = std::size_t(in.u32() % std::uint64_t(table));
    b.block_table[at] = wrap32(in.length());
  }
  if (layout & 0x40) b.block_table.push_back(0);
  const std::int64_t nb = in.length();
  c.num_blocks = (layout & 0x80) ? nb : std::max<std::int64_t>(table, 1) + nb % 4;

  c.limits.kv_chunk_blocks = in.small_int(0, 8);
  c.limits.target_work_items = in.small_int(0, 64);
  c.limits.min_chunk_blocks = in.small_int(1, 4);
  const std::uint8_t chunk_mode = in.u8();
  if (chunk_mode >= 128) {
    // One entry per request, or a wrong count.
    const std::size_t n = b.total_len.size() + (chunk_mode >= 250 ? chunk_mode - 252 : 0);
    if (n <= std::size_t(kMaxRequests) + 4) {
      for (std::size_t i = 0; i < n; ++i) {
        c.limits.request_chunk_blocks.push_back(in.small_int(0, 4));
      }
    }
  }
  return b;
}

// The plan against the slow, obvious definitions (Sharding::local_len, SPEC's row bounds).
void check_plan(const Batch& b, const PlanConfig& c, const dcpmla::Plan& p) {
  const int B = b.num_requests();
  const std::int64_t rows = b.rows();
  check(p.num_requests == B && p.num_rows == rows && p.num_real_rows == b.real_tokens(),
        "plan sizes");
  check(std::int64_t(p.row_request.size()) == rows &&
            std::int64_t(p.row_global_bound.size()) == rows &&
            std::int64_t(p.row_local_bound.size()) == rows &&
            std::int64_t(p.request_local_len.size()) == B,
        "plan vector sizes");
  for (int r = 0; r < B; ++r) {
    const int Q = b.q_len(r);
    const auto T = b.total_len[std::size_t(r)];
    const auto local = c.sharding.local_len(T);
    check(p.request_local_len[std::size_t(r)] == local, "request_local_len");
    for (int j = 0; j < Q; ++j) {
      const std::size_t row = std::size_t(b.query_start_loc[std::size_t(r)]) + j;
      const auto bound = dcpmla::row_global_bound(T, Q, j, b.mask_of(r));
      check(p.row_request[row] == r, "row_request");
      check(p.row_global_bound[row] == bound, "row_global_bound");
      check(p.row_local_bound[row] == std::min(local, c.sharding.local_len(bound)),
            "row_local_bound of row " + std::to_string(row));
    }
  }
  for (std::int64_t row = b.real_tokens(); row < rows; ++row) {
    check(p.row_request[std::size_t(row)] == -1, "padding row with a request");
  }
  // Work items: every request covered once, in order, with in-range partial rows.
  std::vector<std::int64_t> covered(std::size_t(B), 0);
  for (const auto& w : p.work) {
    check(w.request >= 0 && w.request < B, "work item request");
    const auto r = std::size_t(w.request);
    check(w.row_begin == b.query_start_loc[r] && w.num_rows == b.q_len(w.request),
          "work item rows");
    check(w.kv_begin == covered[r] && w.kv_begin <= w.kv_end && w.kv_end <= p.request_local_len[r],
          "work item KV range");
    covered[r] = w.kv_end;
    check(w.partial_row == -1 || (w.partial_row >= 0 &&
                                  std::int64_t(w.partial_row) + w.num_rows <= p.num_partial_rows),
          "work item partial_row " + std::to_string(w.partial_row) + " outside [0, " +
              std::to_string(p.num_partial_rows) + ")");
  }
  for (int r = 0; r < B; ++r) {
    check(covered[std::size_t(r)] == p.request_local_len[std::size_t(r)], "uncovered KV");
  }
  for (const auto& m : p.merges) {
    check(m.first_partial_row >= 0 && m.num_splits >= 2 &&
              std::int64_t(m.first_partial_row) + std::int64_t(m.num_splits) * m.num_rows <=
                  p.num_partial_rows,
          "merge partial rows");
  }
  // The workspace size must be exact: a wrapped product would under-allocate.
  const unsigned __int128 want = (unsigned __int128)(p.num_partial_rows) *
                                 std::uint64_t(c.num_heads) * (dcpmla::kLatentDim + 1) * 4;
  check(want == dcpmla::decode_workspace_bytes(p), "decode_workspace_bytes wrapped");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  dcpmla::fuzz::ByteReader in(data, size);
  PlanConfig config;
  const Batch batch = decode_batch(in, config);
  if (!plan_size_bounded(batch, config)) {
    if (dcpmla::fuzz::verbose()) std::fprintf(stderr, "skipped: a plan too large to build\n");
    return 0;
  }
  dcpmla::Plan plan;
  try {
    plan = dcpmla::make_plan(batch, config);
  } catch (const dcpmla::Error& e) {
    dcpmla::fuzz::note_refusal(e);
    return 0;
  }
  check_plan(batch, config, plan);
  if (dcpmla::fuzz::verbose()) {
    std::fprintf(stderr, "plan: %d requests, %lld rows, %zu work items, %lld partial rows\n",
                 plan.num_requests, static_cast<long long>(plan.num_rows), plan.work.size(),
                 static_cast<long long>(plan.num_partial_rows));
  }
  return 0;
}
