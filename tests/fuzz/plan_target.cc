// Fuzz target: the planner. The input bytes decode to a batch description, a sharding, head
// count, block size, cache size, device model and split limits: mostly plausible values, with
// adversarial ones (zero, negative, int32 and int64 edges, wrong vector sizes, bad block ids) mixed
// in by byte_reader.h. make_plan must return a plan that satisfies its invariants or throw a
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

// A plan holds 4 bytes per query row, 32 per work item and 16 per merge row; descriptions whose
// valid plan could need more than a few MB are skipped (the planner does not bound them), which
// keeps every input fast enough to fuzz. Overflow edges come from extents, not counts: a 2^31 - 1
// token request in blocks of 2^16 tokens is still a small plan.
constexpr std::int64_t kMaxRows = std::int64_t(1) << 16;
constexpr std::int64_t kMaxWorkItems = std::int64_t(1) << 16;
// The block table is built here, so it is bounded here too (1 MiB of ids).
constexpr std::int64_t kMaxTableEntries = std::int64_t(1) << 18;
constexpr std::int64_t kMaxRequests = 4096;
// Cuts of at most this many splits a request with the model (split_policy.cc: a batch chunk of
// at most 2 x workers splits; the last-wave cut makes at most 8 parts).
constexpr std::int64_t kMaxTailParts = 8;

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

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

bool sharding_valid(const PlanConfig& c) {
  const auto& s = c.sharding;
  return s.world >= 1 && s.interleave >= 1 && s.rank >= 0 && s.rank < s.world &&
         c.block_size >= 1 && c.block_size % s.interleave == 0;
}

bool model_valid(const PlanConfig& c) {
  const auto& m = c.model;
  return c.num_heads >= 1 && m.workers >= 0 && m.tile_pairs >= 0 && m.min_split_tokens >= 1 &&
         c.kv_chunk_blocks >= 0;
}

// An upper bound of the rows and work items a plan of this description holds, or false when it
// may be too large to build here. Only values make_plan accepts matter: it refuses the others
// before allocating.
bool plan_size_bounded(const Batch& b, const PlanConfig& c) {
  const std::int64_t rows = b.num_tokens >= 0 ? b.num_tokens : b.real_tokens();
  if (rows > kMaxRows) return false;
  if (!sharding_valid(c) || !model_valid(c)) return true;
  const auto valid_len = [](std::int64_t T) {
    return T >= 1 && T <= std::numeric_limits<std::int32_t>::max();
  };
  // Most splits of one request: a fixed chunk, else the model's (never below min_split_tokens).
  const std::int64_t min_chunk = ceil_div(c.model.min_split_tokens, c.block_size);
  const std::int64_t model_splits =
      c.model.workers == 0
          ? 1
          : std::max<std::int64_t>(2 * std::int64_t(c.model.workers), kMaxTailParts);
  std::int64_t items = 0;
  const std::size_t B = std::min(b.total_len.size(), b.query_start_loc.size() - 1);
  for (std::size_t r = 0; r < B; ++r) {
    const auto T = b.total_len[r];
    if (!valid_len(T)) continue;
    const std::int64_t blocks = ceil_div(c.sharding.local_len(T), c.block_size);
    const std::int64_t splits = c.kv_chunk_blocks > 0
                                    ? ceil_div(blocks, c.kv_chunk_blocks)
                                    : std::min(model_splits, ceil_div(blocks, min_chunk));
    // Pairs of the request (Q x H) in tiles of tile_pairs (0: one tile).
    const std::int64_t pairs =
        std::max<std::int64_t>(1, std::int64_t(b.query_start_loc[r + 1]) - b.query_start_loc[r]) *
        c.num_heads;
    const std::int64_t tiles = c.model.tile_pairs > 0 ? ceil_div(pairs, c.model.tile_pairs) : 1;
    // Compared before multiplying: a request of 2^30 rows and many splits overflows the product.
    const std::int64_t request_splits = std::max<std::int64_t>(splits, 1);
    if (tiles > kMaxWorkItems || request_splits > (kMaxWorkItems - items) / tiles) return false;
    items += request_splits * tiles;
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

  c.kv_chunk_blocks = in.small_int(0, 8);
  c.model.workers = in.small_int(0, 64);
  c.model.tile_pairs = in.small_int(0, 128);
  c.model.min_split_tokens = in.small_int(1, 512);
  if (in.u8() >= 128) {  // a capacity's limits (-1: none; other negatives act as none too)
    c.max_work_items = in.length();
    c.max_partial_rows = in.length();
  }
  return b;
}

// The plan against the slow, obvious definitions (Sharding::local_len, SPEC's row bounds) and
// plan.h's promises on work items (tiles of pairs, launch order) and merge rows.
// Maximum of v over [first, last] in O(1) after O(n log n) set-up (a sparse table).
class RangeMax {
 public:
  explicit RangeMax(const std::vector<std::int32_t>& v) : levels_{v} {
    for (std::size_t width = 2; width <= v.size(); width *= 2) {
      const auto& prev = levels_.back();
      std::vector<std::int32_t> next(v.size() - width + 1);
      for (std::size_t i = 0; i < next.size(); ++i) {
        next[i] = std::max(prev[i], prev[i + width / 2]);
      }
      levels_.push_back(std::move(next));
    }
  }
  std::int32_t max(std::int64_t first, std::int64_t last) const {
    std::size_t level = 0;
    while ((std::int64_t(2) << level) <= last - first + 1) ++level;
    const auto& l = levels_[level];
    return std::max(l[std::size_t(first)], l[std::size_t(last + 1 - (std::int64_t(1) << level))]);
  }

 private:
  std::vector<std::vector<std::int32_t>> levels_;
};

void check_plan(const Batch& b, const PlanConfig& c, const dcpmla::Plan& p) {
  const int B = b.num_requests();
  const std::int64_t rows = b.rows();
  const int H = c.num_heads;
  const int bs = c.block_size;
  check(p.num_requests == B && p.num_rows == rows && p.num_real_rows == b.real_tokens(),
        "plan sizes");
  check(std::int64_t(p.row_local_bound.size()) == rows &&
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
      check(p.row_local_bound[row] == std::min(local, c.sharding.local_len(bound)),
            "row_local_bound of row " + std::to_string(row));
    }
  }
  for (std::int64_t row = b.real_tokens(); row < rows; ++row) {
    check(p.row_local_bound[std::size_t(row)] == 0, "padding row with a bound");
  }
  // Work items: the items of one request split together, covering its Q x H pairs once in order
  // in tiles of at most tile_pairs; splits in launch order (the split's walk, in tiles of 64 keys
  // up to its items' furthest visible end, non-increasing); the splits of a request cover
  // [0, local_len) in order.
  std::vector<std::int64_t> kv_covered(std::size_t(B), 0);
  std::vector<std::int64_t> splits(std::size_t(B), 0);
  std::vector<std::int32_t> first_partial(std::size_t(B), -1);
  std::int64_t last_walk = std::numeric_limits<std::int64_t>::max();
  const RangeMax bound_max(p.row_local_bound);
  for (std::size_t i = 0; i < p.work.size();) {
    const dcpmla::WorkItem& head = p.work[i];
    check(head.request >= 0 && head.request < B, "work item request");
    const auto r = std::size_t(head.request);
    const std::int64_t pairs = std::int64_t(b.q_len(head.request)) * H;
    check(head.kv_begin == kv_covered[r] && head.kv_begin % bs == 0 &&
              head.kv_begin <= head.kv_end && head.kv_end <= p.request_local_len[r],
          "work item KV range");
    check(splits[r] == 0 || head.kv_begin > 0, "a request split twice at 0");
    if (splits[r] == 0) first_partial[r] = head.partial_row;
    check(head.partial_row == -1 ||
              (head.partial_row >= 0 &&
               head.partial_row == first_partial[r] + splits[r] * b.q_len(head.request)),
          "split partial rows not consecutive");
    check(head.partial_row == -1 ||
              std::int64_t(head.partial_row) + b.q_len(head.request) <= p.num_partial_rows,
          "work item partial_row " + std::to_string(head.partial_row) + " outside [0, " +
              std::to_string(p.num_partial_rows) + ")");
    std::int64_t next_pair = 0;
    std::int32_t split_visible = head.kv_begin;
    for (; i < p.work.size() && p.work[i].request == head.request &&
           p.work[i].kv_begin == head.kv_begin && next_pair < pairs;
         ++i) {
      const dcpmla::WorkItem& w = p.work[i];
      check(w.row_begin == b.query_start_loc[r], "work item rows");
      check(w.kv_end == head.kv_end && w.partial_row == head.partial_row,
            "items of one split differ");
      check(w.pair_begin == next_pair && w.num_pairs >= 1 && next_pair + w.num_pairs <= pairs,
            "work item pairs");
      check(c.model.tile_pairs > 0 ? w.num_pairs <= c.model.tile_pairs : w.num_pairs == pairs,
            "work item wider than tile_pairs");
      // max over the item's rows of min(bound, kv_end) = min(max of the bounds, kv_end): the
      // rows' max from a sparse table (items may span many rows, many times over).
      const std::int64_t first = w.row_begin + w.pair_begin / H;
      const std::int64_t last = w.row_begin + (w.pair_begin + w.num_pairs - 1) / H;
      const std::int32_t visible =
          std::max(w.kv_begin, std::min(bound_max.max(first, last), w.kv_end));
      check(w.kv_visible_end == visible, "kv_visible_end");
      split_visible = std::max(split_visible, w.kv_visible_end);
      next_pair += w.num_pairs;
    }
    check(next_pair == pairs, "a split's items miss pairs");
    const std::int64_t walk = ceil_div(std::int64_t(split_visible) - head.kv_begin, 64);
    check(walk <= last_walk, "request splits out of launch order");
    last_walk = walk;
    kv_covered[r] = head.kv_end;
    ++splits[r];
  }
  std::int64_t merge_rows = 0;
  for (int r = 0; r < B; ++r) {
    check(kv_covered[std::size_t(r)] == p.request_local_len[std::size_t(r)], "uncovered KV");
    check(splits[std::size_t(r)] >= 1, "request without a work item");
    check((splits[std::size_t(r)] > 1) == (first_partial[std::size_t(r)] >= 0),
          "split request without partial rows, or one item writing partials");
    if (splits[std::size_t(r)] > 1) merge_rows += b.q_len(r);
  }
  check(std::int64_t(p.merges.size()) == merge_rows, "merge rows");
  std::int32_t max_splits = 1;
  for (const auto& m : p.merges) {
    check(m.out_row >= 0 && m.out_row < b.real_tokens(), "merge out_row");
    const auto r = std::size_t(
        std::upper_bound(b.query_start_loc.begin(), b.query_start_loc.end(), m.out_row) -
        b.query_start_loc.begin() - 1);
    const int j = m.out_row - b.query_start_loc[r];
    check(m.num_splits == splits[r] && m.num_splits >= 2 && m.split_stride_rows == b.q_len(int(r)),
          "merge splits");
    check(m.first_partial_row == first_partial[r] + j &&
              std::int64_t(m.first_partial_row) +
                      std::int64_t(m.num_splits - 1) * m.split_stride_rows <
                  p.num_partial_rows,
          "merge partial rows");
    max_splits = std::max(max_splits, m.num_splits);
  }
  check(p.max_splits == max_splits, "max_splits");
  // A split the model chose respects the config's limits.
  if (c.kv_chunk_blocks == 0 && !p.merges.empty()) {
    check(c.max_work_items < 0 || std::int64_t(p.work.size()) <= c.max_work_items,
          "a model split over max_work_items");
    check(c.max_partial_rows < 0 || p.num_partial_rows <= c.max_partial_rows,
          "a model split over max_partial_rows");
  }
  // The workspace size must be exact: a wrapped product would under-allocate.
  const unsigned __int128 want = (unsigned __int128)(p.num_partial_rows) *
                                 std::uint64_t(c.num_heads) * (dcpmla::kLatentDim + 1) * 4;
  check(want == dcpmla::decode_workspace_bytes(p), "decode_workspace_bytes wrapped");
}

// validate_block_ids (make_plan reads no block id) of a batch make_plan accepted, against the
// obvious definition: it refuses exactly the tables where rank 0 (the fullest) lacks a column or
// reads an id outside [0, num_blocks).
void check_block_ids(const Batch& b, const PlanConfig& c) {
  const Sharding rank0{c.sharding.world, 0, c.sharding.interleave};
  bool bad = false;
  for (int r = 0; r < b.num_requests() && !bad; ++r) {
    const std::int64_t needed =
        ceil_div(rank0.local_len(b.total_len[std::size_t(r)]), c.block_size);
    if (needed > b.max_blocks) {
      bad = true;
      break;
    }
    const auto row = b.block_row(r);
    for (std::int64_t i = 0; i < needed; ++i) {
      if (row[std::size_t(i)] < 0 || row[std::size_t(i)] >= c.num_blocks) bad = true;
    }
  }
  bool refused = false;
  try {
    dcpmla::validate_block_ids(b, c);
  } catch (const dcpmla::Error& e) {
    dcpmla::fuzz::note_refusal(e);
    refused = true;
  }
  check(refused == bad, refused ? "validate_block_ids refused a good table"
                                : "validate_block_ids accepted a bad block id");
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
  check_block_ids(batch, config);
  if (dcpmla::fuzz::verbose()) {
    std::fprintf(stderr, "plan: %d requests, %lld rows, %zu work items, %lld partial rows\n",
                 plan.num_requests, static_cast<long long>(plan.num_rows), plan.work.size(),
                 static_cast<long long>(plan.num_partial_rows));
  }
  return 0;
}
