"""The DeepSeek-V3-shaped models the harness serves: transformers.DeepseekV3Config with the real
attention geometry (MLA: kv_lora_rank 512, rope 64, nope 128, v 128; YaRN rope scaling as in
DeepSeek-V3, so the softmax scale is the mscale-adjusted one) and a small, dense rest (every
layer a dense MLP; small hidden size and vocabulary) so that CPU runs are fast."""

import math

# Head counts of the variants: DeepSeek-V3 under TP 8 (16 heads a GPU) and a Kimi-like 96.
VARIANT_HEADS = {"deepseek-v3": 16, "kimi": 96}

# DeepSeek-V3's rope_scaling (config.json of the released checkpoint).
YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 40.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


def deepseek_v3_config(
    variant="deepseek-v3",
    *,
    num_layers=2,
    hidden_size=256,
    intermediate_size=512,
    vocab_size=512,
    q_lora_rank=128,
    init_std=0.02,
):
    """A transformers.DeepseekV3Config of `variant` ("deepseek-v3": 16 heads, "kimi": 96)."""
    from transformers import DeepseekV3Config

    heads = VARIANT_HEADS[variant]
    config = DeepseekV3Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        moe_intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        kv_lora_rank=512,
        q_lora_rank=q_lora_rank,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        # Every layer dense: the MoE is not what the harness checks.
        first_k_dense_replace=num_layers,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        max_position_embeddings=int(YARN["factor"] * YARN["original_max_position_embeddings"]),
        rope_parameters=dict(YARN),
        rope_interleave=True,
        initializer_range=init_std,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config._attn_implementation = "eager"
    return config


def yarn_mscale(factor, mscale):
    """YaRN's attention temperature factor 0.1 * mscale * ln(factor) + 1 (1 for factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def softmax_scale(config):
    """DeepSeek-V3's MLA softmax scale: qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2
    (0.1352338 for the released model), never 576^-0.5."""
    rope = config.rope_parameters
    scale = (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5
    if rope.get("rope_type", "default") == "yarn" and rope.get("mscale_all_dim"):
        scale *= yarn_mscale(rope["factor"], rope["mscale_all_dim"]) ** 2
    return scale
