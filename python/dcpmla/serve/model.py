"""The served model: DeepSeek-V3 MLA in the absorbed form, one DCP rank's share of it.

Per layer and step of N tokens (H heads, W ranks, Hl = H / W heads on this rank, tensor parallel
over heads as DCP engines run it):

- q [N, Hl, 192] from the rank's rows of q_b_proj; q_nope [N, Hl, 128] is absorbed through W_UK
  into the latent: q_latent [N, Hl, 512] = q_nope @ W_UK[h] ([128, 512] per head);
- the cache entry [N, 576] = (kv_a_layernorm(latent) [512], rope(k_pe) [64]) is the same on every
  rank; each rank writes the positions it owns;
- attention (dcpmla, through serve.attention) returns out_latent [N, Hl, 512], the rank's heads of
  the whole attention; out_v [N, Hl, 128] = out_latent @ W_UV[h]^T, and o_proj's columns of those
  heads give a partial [N, hidden] summed over the ranks.

The rest (embedding, MLPs, norms, head) is replicated. Weights are a transformers
DeepseekV3ForCausalLM state dict (the oracle's); nothing here runs transformers code.
"""

import torch
import torch.nn.functional as F

from dcpmla.serve import collectives
from dcpmla.serve.rope import YarnRope


def rms_norm(x, weight, eps):
    """x [N, D] normalised by its root mean square in fp32, times weight [D]."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


class AbsorbedLayer:
    """One decoder layer's weights, cut to this rank's heads and absorbed."""

    def __init__(self, config, weights, prefix, heads):
        def w(name):
            return weights[prefix + name]

        H, nope, rope_dim, v_dim = (
            config.num_attention_heads,
            config.qk_nope_head_dim,
            config.qk_rope_head_dim,
            config.v_head_dim,
        )
        self.eps = config.rms_norm_eps
        self.input_norm = w("input_layernorm.weight")
        self.post_norm = w("post_attention_layernorm.weight")
        if config.q_lora_rank is None:
            self.q_a, self.q_a_norm = None, None
            q_b = w("self_attn.q_proj.weight")
        else:
            self.q_a = w("self_attn.q_a_proj.weight")
            self.q_a_norm = w("self_attn.q_a_layernorm.weight")
            q_b = w("self_attn.q_b_proj.weight")
        # [H * 192, in] -> this rank's heads, [Hl * 192, in]
        self.q_b = q_b.view(H, nope + rope_dim, -1)[heads].reshape(-1, q_b.shape[-1])
        self.kv_a = w("self_attn.kv_a_proj_with_mqa.weight")  # [512 + 64, hidden]
        self.kv_a_norm = w("self_attn.kv_a_layernorm.weight")
        kv_b = w("self_attn.kv_b_proj.weight").view(H, nope + v_dim, -1)[heads]  # [Hl, 256, 512]
        self.w_uk = kv_b[:, :nope].contiguous()  # [Hl, 128, 512]
        self.w_uv = kv_b[:, nope:].contiguous()  # [Hl, 128, 512]
        o = w("self_attn.o_proj.weight")  # [hidden, H * 128]
        self.o = o.view(o.shape[0], H, v_dim)[:, heads].reshape(o.shape[0], -1)  # [hidden, Hl*128]
        self.gate = w("mlp.gate_proj.weight")
        self.up = w("mlp.up_proj.weight")
        self.down = w("mlp.down_proj.weight")
        self.nope, self.rope_dim, self.latent = nope, rope_dim, config.kv_lora_rank


class AbsorbedMLAModel:
    """One rank's model. forward(token_ids, positions, caches) -> logits [N, vocab] float32.

    attention: a serve.attention.DcpAttention planned for the step (its batch, slots, mask)."""

    def __init__(self, config, weights, attention, *, rank=0, world=1, group=None):
        H = config.num_attention_heads
        if H % world != 0:
            raise ValueError(
                f"world (invalid value): expected a divisor of the model's {H} heads, got {world}"
            )
        heads_local = H // world
        heads = torch.arange(rank * heads_local, (rank + 1) * heads_local)
        self.config, self.attention, self.group, self.world = config, attention, group, world
        self.heads_local = heads_local
        self.rope = YarnRope(config.rope_parameters, config.qk_rope_head_dim)
        self.embed = weights["model.embed_tokens.weight"]
        self.norm = weights["model.norm.weight"]
        self.lm_head = weights["lm_head.weight"]
        self.layers = [
            AbsorbedLayer(config, weights, f"model.layers.{i}.", heads)
            for i in range(config.num_hidden_layers)
        ]

    @torch.inference_mode()
    def forward(self, token_ids, positions, caches):
        """token_ids [N] int64, positions [N] int64 (global), caches: one rank-local paged cache
        [num_blocks, block_size, 576] a layer -> logits [N, vocab] float32."""
        h = F.embedding(token_ids, self.embed)
        for index, layer in enumerate(self.layers):
            x = rms_norm(h, layer.input_norm, layer.eps)
            h = h + self._attention(layer, x, positions, caches[index])
            x = rms_norm(h, layer.post_norm, layer.eps)
            h = h + F.linear(F.silu(F.linear(x, layer.gate)) * F.linear(x, layer.up), layer.down)
        return F.linear(rms_norm(h, self.norm, self.config.rms_norm_eps), self.lm_head).float()

    def _attention(self, layer, x, positions, cache):
        n = x.shape[0]
        q_in = (
            x if layer.q_a is None else rms_norm(F.linear(x, layer.q_a), layer.q_a_norm, layer.eps)
        )
        q = F.linear(q_in, layer.q_b).view(n, self.heads_local, layer.nope + layer.rope_dim)
        q_nope, q_pe = q[..., : layer.nope], q[..., layer.nope :]
        q_latent = torch.einsum("nhd,hdc->nhc", q_nope, layer.w_uk)  # [N, Hl, 512]
        q_absorbed = torch.cat([q_latent, self.rope(q_pe, positions)], dim=-1)  # [N, Hl, 576]

        kv = F.linear(x, layer.kv_a)  # [N, 576]
        latent = rms_norm(kv[:, : layer.latent], layer.kv_a_norm, layer.eps)
        entries = torch.cat([latent, self.rope(kv[:, layer.latent :], positions)], dim=-1)

        out_latent = self.attention(q_absorbed, entries, cache)  # [N, Hl, 512]
        out_v = torch.einsum("nhc,hdc->nhd", out_latent.to(x.dtype), layer.w_uv)  # [N, Hl, 128]
        partial = F.linear(out_v.reshape(n, -1), layer.o)  # [N, hidden], this rank's heads
        if self.world > 1:  # tensor parallel over heads: o_proj's row-parallel sum
            collectives.all_reduce_(partial, self.group)
        return partial
