"""YaRN rotary position embedding of the 64 rope dims, written from the YaRN paper's formulas
(NTK-by-parts interpolation and the attention temperature), in the pairwise form DeepSeek's
checkpoints use: dims (2i, 2i + 1) are one pair, rotated by position * inv_freq[i]."""

import math

import torch

from dcpmla.serve.model_config import yarn_mscale


def _correction_dim(rotations, dim, base, original_max):
    """The dim index whose wavelength fits `rotations` times in the original context."""
    return dim * math.log(original_max / (rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_frequencies(rope_parameters, dim):
    """(inv_freq [dim / 2] float32, attention_factor): wavelengths longer than the original
    context are interpolated by `factor`, shorter ones kept, a linear ramp between."""
    p = rope_parameters
    base, factor = p["rope_theta"], p["factor"]
    original_max = p["original_max_position_embeddings"]
    exponents = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    extrapolated = 1.0 / base**exponents
    interpolated = extrapolated / factor
    low = max(math.floor(_correction_dim(p.get("beta_fast", 32), dim, base, original_max)), 0)
    high = min(math.ceil(_correction_dim(p.get("beta_slow", 1), dim, base, original_max)), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1.0 - ramp  # 1: extrapolate (high frequencies), 0: interpolate
    inv_freq = interpolated * (1 - keep) + extrapolated * keep
    if p.get("mscale") and p.get("mscale_all_dim"):
        attention_factor = yarn_mscale(factor, p["mscale"]) / yarn_mscale(
            factor, p["mscale_all_dim"]
        )
    else:
        attention_factor = yarn_mscale(factor, 1.0)
    return inv_freq, attention_factor


class YarnRope:
    """Rotates [..., 64] rope vectors at integer positions."""

    def __init__(self, rope_parameters, dim):
        self.inv_freq, self.attention_factor = yarn_frequencies(rope_parameters, dim)

    def __call__(self, x, positions):
        """x [N, ..., 64] (pairs (2i, 2i + 1)), positions [N] -> [N, ..., 64] with the rotated
        pairs' first members in dims [0, 32) and second members in [32, 64) (dot products of two
        rotated vectors do not depend on the order of dims, as long as both use the same)."""
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        angle = positions.to(torch.float32)[:, None] * self.inv_freq  # [N, 32]
        cos = (angle.cos() * self.attention_factor).to(x.dtype)
        sin = (angle.sin() * self.attention_factor).to(x.dtype)
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[-1],)
        cos, sin = cos.view(shape), sin.view(shape)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.cat([even * cos - odd * sin, odd * cos + even * sin], dim=-1)
