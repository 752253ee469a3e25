#include "merge_states.h"

#include <numbers>
#include <vector>

#include "dcpmla/merge.h"
#include "elements.h"

namespace dcpmla::cpu {

void merge_states(ThreadPool& pool, const MergeStatesArgs& a) {
  validate(a);
  const std::int64_t S = a.v.shape[0], N = a.v.shape[1], H = a.v.shape[2], D = a.v.shape[3];
  const std::int64_t pairs = N * H;
  // Base-2 logarithms are merged as natural ones: ln x = log2 x * ln 2.
  const float to_e = a.lse_base_e ? 1.0f : std::numbers::ln2_v<float>;
  const float from_e = a.lse_base_e ? 1.0f : std::numbers::log2e_v<float>;
  const bool bf16 = a.v.dtype == DType::bf16;
  const std::size_t out_elem = dtype_size(a.v_out.dtype);
  pool.parallel_for(pairs, [&](std::int64_t i, int) {
    std::vector<float> lse(static_cast<std::size_t>(S)), merged(static_cast<std::size_t>(D));
    for (std::int64_t r = 0; r < S; ++r) lse[r] = a.s.as<const float>()[r * pairs + i] * to_e;
    const auto identity = [](float x) { return x; };
    const long stride = long(pairs * D);  // elements from one state's pair to the next's
    float l;
    if (bf16) {
      l = merge::merge_partials(int(S), a.v.as<const std::uint16_t>() + i * D, stride, lse.data(),
                                1, int(D), merged.data(), identity);
    } else {
      l = merge::merge_partials(int(S), a.v.as<const float>() + i * D, stride, lse.data(), 1,
                                int(D), merged.data(), identity);
    }
    a.s_out.as<float>()[i] = l * from_e;
    store_f32(merged.data(), D, 1.0f, a.v_out.dtype,
              a.v_out.as<std::uint8_t>() + std::size_t(i * D) * out_elem);
  });
}

}  // namespace dcpmla::cpu
