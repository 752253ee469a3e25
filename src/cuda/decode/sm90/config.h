// Compile-time choices of the sm90 decode, one constant each (the measurements behind them:
// docs/design/decode-kernel.md). Plain C++: the kernel selection reads them on the host.
#pragma once

namespace dcpmla::cuda::sm90 {

// Tiles of at most this many (row, head) pairs (0, 16 or 32) run the narrow, transposed form
// (narrow_tile.cuh): below 16 pairs the wide form's 64-row MMAs are mostly padding, while 32-pair
// narrow tiles ran slower than wide ones.
inline constexpr int kNarrowPairs = 16;

// Full fp8 tiles: output warpgroup 1 issues its P.V only after warpgroup 0's is done, so the
// chunks warpgroup 0 refills free earlier (faster for fp8, whose tiles the threads copy; slower
// for bf16, whose tiles come by bulk copies, so bf16 issues both halves at once).
inline constexpr bool kPvInTurn = true;

// A pair's running max (log2 units) rises only when a tile exceeds it by more than this, so
// P = exp2(s - m) <= 2^kRescaleSlack and most tiles of a long row leave O unscaled.
inline constexpr float kRescaleSlack = 8.0f;

}  // namespace dcpmla::cuda::sm90
