#include "kv_write.h"

#include "elements.h"

namespace dcpmla::cpu {

void write_kv(const KvWriteArgs& a) {
  validate(a);
  validate_slot_values(a);
  const auto n = a.latents.shape[0];
  const auto* slots = a.slots.as<const std::int64_t>();
  const std::size_t in_elem = dtype_size(a.latents.dtype);
  const std::size_t out_elem = dtype_size(a.cache.dtype);
  // The cache stores e4m3(x / k_scale) for fp8 (k_scale is 1 for other dtypes). A division, not
  // a multiplication by 1 / k_scale: the two round differently for some x.
  const float k_scale = a.cache.k_scale;
  float row[kHeadDim];
  for (std::int64_t i = 0; i < n; ++i) {
    if (slots[i] < 0) continue;
    load_f32(a.latents.as<const std::uint8_t>() + std::size_t(i) * kHeadDim * in_elem,
             a.latents.dtype, kHeadDim, 1.0f, row);
    for (float& x : row) x /= k_scale;
    store_f32(
        row, kHeadDim, 1.0f, a.cache.dtype,
        static_cast<std::uint8_t*>(a.cache.data) + std::size_t(slots[i]) * kHeadDim * out_elem);
  }
}

}  // namespace dcpmla::cpu
