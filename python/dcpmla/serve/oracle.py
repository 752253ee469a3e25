"""The truth: transformers' DeepseekV3ForCausalLM (non-absorbed attention) with the seeded
weights; its greedy continuation of every prompt and the margin between its top two logits at
each generated position."""

from dataclasses import dataclass

import torch


def seeded_model(config, seed):
    """DeepseekV3ForCausalLM(config) with weights drawn from `seed` (the same on every process),
    fp32, in eval mode."""
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config).float().eval()
    return model


def model_weights(model):
    """The state dict as plain, detached tensors (what the served model is built from)."""
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


@dataclass
class OracleContinuation:
    tokens: list  # [max_new] greedy tokens after the prompt
    margins: list  # [max_new] top-1 minus top-2 logit where each was chosen


@torch.inference_mode()
def greedy_continuation(model, prompt, max_new):
    """The oracle's greedy max_new tokens after prompt (a list of ids), with their margins."""
    ids = torch.tensor([prompt], dtype=torch.int64)
    out = model(input_ids=ids, use_cache=True)
    tokens, margins = [], []
    for step in range(max_new):
        logits = out.logits[0, -1].float()
        top = torch.topk(logits, 2)
        tokens.append(int(top.indices[0]))
        margins.append(float(top.values[0] - top.values[1]))
        if step + 1 < max_new:
            out = model(input_ids=top.indices[:1].view(1, 1), use_cache=True, **_cache_of(out))
    return OracleContinuation(tokens, margins)


def _cache_of(output):
    """The keyword that hands output's KV cache to the next call: `cache` since transformers
    5.x, `past_key_values` before."""
    if "cache" in output.keys():
        return {"cache": output["cache"]}
    return {"past_key_values": output["past_key_values"]}
