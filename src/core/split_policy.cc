#include "core/split_policy.h"

#include <algorithm>
#include <numeric>

#include "core/plan_rules.h"

namespace dcpmla {
namespace {

constexpr std::int64_t kSumCap = std::int64_t(1) << 62;

struct CandidateSums {
  std::uint64_t items, split_q;
};
// The work items and split rows of every request cut into chunks of `chunk` blocks, over 32-bit
// copies of the inputs: 32 x 32 -> 64-bit multiplies and no branches, so the loop vectorises. An
// AVX2 clone, chosen at load time where the CPU has it, runs 4 requests an instruction (the
// default x86-64 build has only 2-lane SSE2 and no 64-bit compare).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
CandidateSums
candidate_sums(const std::uint32_t* kv32, const std::uint32_t* tiles32, const std::uint32_t* q32,
               std::size_t B, std::int64_t chunk_blocks) {
  const rules::CeilDivider divider(chunk_blocks);
  // Blocks, chunks, splits and the multiplier all fit 32 bits (CeilDivider::floor).
  const auto chunk = std::uint32_t(chunk_blocks), magic = std::uint32_t(divider.magic);
  const int shift = divider.shift;
  std::uint64_t item_sum = 0, split_q = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const std::uint32_t kv = kv32[b];
    // CeilDivider::ceil; a request of 0 blocks wraps here and takes the unsplit branch.
    // Split (n >= 2) exactly where kv > chunk: all ones then, else zero.
    const std::uint32_t split = 0u - std::uint32_t(kv > chunk);
    const auto quotient = std::uint32_t((std::uint64_t(kv - 1u) * magic) >> shift) + 1u;
    const std::uint32_t n = 1u + (split & (quotient - 1u));
    item_sum += std::uint64_t(tiles32[b]) * n;
    split_q += std::uint64_t(split & n) * q32[b];
  }
  return {item_sum, split_q};
}

// The batch-wide chunk: among the candidates (k = 0 unsplit, then ever smaller chunks), the first
// whose cost is within 2 % of the best.
std::int64_t batch_chunk(const SplitInputs& in, const PlanConfig& config, std::int64_t longest,
                         std::int64_t min_chunk) {
  const int S = config.model.workers;
  const int H = config.num_heads;
  const std::size_t B = in.q.size();
  struct Option {
    std::int64_t chunk;
    std::uint64_t cost;
  };
  std::vector<Option> options;
  std::uint64_t best = 0;
  // Where no term can reach split_terms' cap (splits <= longest) and B terms stay under the sums'
  // cap, the sums need neither: a loop of multiplies (CeilDivider) instead of divisions.
  const std::int64_t max_tiles = *std::max_element(in.tiles.begin(), in.tiles.end());
  const std::int64_t max_q = *std::max_element(in.q.begin(), in.q.end());
  const bool exact = B <= (std::size_t(1) << 22) && longest <= rules::kTermCap / max_tiles &&
                     longest <= rules::kTermCap / (max_q * std::int64_t(H));
  // 32-bit copies (every value fits: blocks and pairs of a request are below 2^31) for a loop
  // the compiler vectorises: 32 x 32 -> 64-bit multiplies, no branches.
  std::vector<std::uint32_t> kv32, tiles32, q32;
  if (exact) {
    kv32.assign(in.kv_blocks.begin(), in.kv_blocks.end());
    tiles32.assign(in.tiles.begin(), in.tiles.end());
    q32.assign(in.q.begin(), in.q.end());
  }
  for (rules::Candidate c{longest, 1}; c.chunk_blocks > 0;
       c = rules::next_candidate(c, longest, min_chunk, S)) {
    std::int64_t items = 0, split_pairs = 0;
    if (exact) {
      const CandidateSums sums =
          candidate_sums(kv32.data(), tiles32.data(), q32.data(), B, c.chunk_blocks);
      items = std::int64_t(sums.items);
      split_pairs = std::int64_t(sums.split_q) * H;
    } else {
      for (std::size_t b = 0; b < B; ++b) {
        const auto t = rules::split_terms(in.kv_blocks[b], c.chunk_blocks, in.tiles[b], in.q[b], H);
        // Saturating: terms are at most 2^40, sums stop at 2^62 (the GPU planner's sums over at
        // most 16384 requests never get there, so both agree).
        items = std::min(items + t.work_items, kSumCap);
        split_pairs = std::min(split_pairs + t.split_pairs, kSumCap);
      }
    }
    // The unsplit candidate always counts: a plan over the limits then fails its capacity check.
    if (!options.empty() && !rules::within_limits(items, split_pairs, H, config.max_work_items,
                                                  config.max_partial_rows)) {
      continue;
    }
    const auto k =
        rules::chunk_cost(c.chunk_blocks, longest, config.block_size, items, split_pairs, S);
    if (options.empty() || k < best) best = k;
    options.push_back({c.chunk_blocks, k});
  }
  for (const Option& o : options) {
    if (o.cost * 100 <= best * rules::kTolerancePercent) return o.chunk;
  }
  return longest;
}

// The last-wave cut of an unsplit batch: the requests whose work items start in a partly filled
// last wave (of 2..8) are cut into p = min(8, workers / the last wave's items) parts each, where
// the estimated finish (the sum over waves of each wave's longest walk) comes >= 2 % sooner.
// Returns whether it cut; chunks of the cut requests are written.
bool tail_cut(const SplitInputs& in, const PlanConfig& config, std::int64_t min_chunk,
              std::vector<std::int64_t>& chunks) {
  const std::int64_t S = config.model.workers;
  const std::size_t B = in.q.size();
  const std::int64_t total = std::accumulate(in.tiles.begin(), in.tiles.end(), std::int64_t(0));
  if (total <= S || total > rules::kMaxTailWaves * S) return false;
  std::vector<std::uint64_t> order(B);
  for (std::size_t b = 0; b < B; ++b) order[b] = rules::order_key(in.kv_blocks[b], b);
  std::sort(order.begin(), order.end());
  auto request = [&](std::size_t k) { return std::size_t(order[k] & 0xffffffffu); };
  const std::int64_t waves = rules::ceil_div(total, S);
  const std::int64_t tail_start = (waves - 1) * S;
  auto walk = [&](std::size_t b) {
    return in.kv_blocks[b] * config.block_size + rules::kFixedTokens;
  };
  // Sum over waves of the walk of the wave's first (longest) item.
  std::int64_t estimate = 0, position = 0, next_wave = 0;
  std::size_t first_tail = B;
  for (std::size_t k = 0; k < B; ++k) {
    const std::size_t b = request(k);
    while (next_wave < waves && next_wave * S < position + in.tiles[b]) {
      estimate += walk(b);
      ++next_wave;
    }
    if (first_tail == B && position + in.tiles[b] > tail_start) first_tail = k;
    position += in.tiles[b];
  }
  // Parts: as many as the SMs hold for the blocks of the last wave (the requests cut are those
  // with a block there, the first of them maybe started in the wave before).
  const std::int64_t parts = std::min(rules::kMaxTailParts, S / (total - tail_start));
  if (parts < 2) return false;
  const std::int64_t H = config.num_heads;
  const std::size_t longest_tail = request(first_tail);
  std::int64_t split_pairs = 0, items = total;
  for (std::size_t k = first_tail; k < B; ++k) {
    const std::size_t b = request(k);
    const std::int64_t chunk = std::max(min_chunk, rules::ceil_div(in.kv_blocks[b], parts));
    const std::int64_t n = in.kv_blocks[b] <= chunk ? 1 : rules::ceil_div(in.kv_blocks[b], chunk);
    if (n > 1) split_pairs += n * in.q[b] * H;
    items += (n - 1) * in.tiles[b];
  }
  if (!rules::within_limits(items, split_pairs, int(H), config.max_work_items,
                            config.max_partial_rows)) {
    return false;
  }
  const std::int64_t split_milli = split_pairs * rules::kSplitPairMilli;
  const std::int64_t first_chunk =
      std::max(min_chunk, rules::ceil_div(in.kv_blocks[longest_tail], parts));
  const std::int64_t cut_walk =
      std::min(first_chunk, in.kv_blocks[longest_tail]) * config.block_size + rules::kFixedTokens;
  const auto after = (unsigned __int128)(estimate - walk(longest_tail) + cut_walk) * rules::kMilli +
                     std::uint64_t(split_milli);
  const auto before = (unsigned __int128)(estimate)*rules::kMilli;
  if (after * 100 > before * rules::kTailGainPercent) return false;
  for (std::size_t k = first_tail; k < B; ++k) {
    const std::size_t b = request(k);
    chunks[b] = std::max(min_chunk, rules::ceil_div(in.kv_blocks[b], parts));
  }
  return true;
}

}  // namespace

std::vector<std::int64_t> choose_chunks(const SplitInputs& in, const PlanConfig& config) {
  const std::size_t B = in.q.size();
  if (config.kv_chunk_blocks > 0) return std::vector<std::int64_t>(B, config.kv_chunk_blocks);
  const std::int64_t longest = std::max<std::int64_t>(
      1, B ? *std::max_element(in.kv_blocks.begin(), in.kv_blocks.end()) : 1);
  std::vector<std::int64_t> chunks(B, longest);
  const std::int64_t min_chunk = rules::ceil_div(config.model.min_split_tokens, config.block_size);
  if (config.model.workers == 0 || B == 0 || longest <= min_chunk) return chunks;
  const std::int64_t chunk = batch_chunk(in, config, longest, min_chunk);
  if (chunk < longest) {
    std::fill(chunks.begin(), chunks.end(), chunk);
    return chunks;
  }
  tail_cut(in, config, min_chunk, chunks);
  return chunks;
}

}  // namespace dcpmla
