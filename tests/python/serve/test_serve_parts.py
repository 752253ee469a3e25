"""The harness's parts on their own: the absorbed model against transformers' forward of the same
weights, the YaRN softmax scale, the block allocator, warm-up shapes, the uniform view of the
negative control, the agreement count and the configuration checks."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dcpmla.serve.agreement import compare_with_oracle  # noqa: E402
from dcpmla.serve.attention import DcpAttention, MLADecodeCpu  # noqa: E402
from dcpmla.serve.batch import build_step_batch, uniform_view  # noqa: E402
from dcpmla.serve.config import ServeConfig  # noqa: E402
from dcpmla.serve.kv_cache import (  # noqa: E402
    BlockAllocator,
    OutOfBlocks,
    allocate_caches,
    blocks_needed,
)
from dcpmla.serve.model import AbsorbedMLAModel  # noqa: E402
from dcpmla.serve.model_config import deepseek_v3_config, softmax_scale  # noqa: E402
from dcpmla.serve.oracle import OracleContinuation, model_weights, seeded_model  # noqa: E402
from dcpmla.serve.warmup import warmup_q_lens  # noqa: E402


def _absorbed_logits(config, weights, prompt, q_dtype, kv_dtype, block_size=16):
    decode = MLADecodeCpu(softmax_scale=softmax_scale(config))
    model = AbsorbedMLAModel(config, weights, DcpAttention(decode, q_dtype=q_dtype))
    blocks = list(range(blocks_needed(len(prompt), 1, block_size)))
    caches = allocate_caches(config.num_hidden_layers, len(blocks), block_size, kv_dtype)
    batch = build_step_batch([(prompt, len(prompt), blocks[::-1])], block_size=block_size)
    model.attention.plan(batch)
    return model.forward(batch.token_ids, batch.positions, caches)


@pytest.mark.parametrize(
    "variant,q_dtype,kv_dtype,tol",
    [
        ("deepseek-v3", torch.float32, torch.float32, 1e-4),
        ("deepseek-v3", torch.bfloat16, torch.bfloat16, 0.05),
        ("kimi", torch.float32, torch.float32, 1e-4),
    ],
)
def test_absorbed_model_matches_transformers(variant, q_dtype, kv_dtype, tol):
    config = deepseek_v3_config(variant, num_layers=2, init_std=0.05)
    hf = seeded_model(config, seed=3)
    prompt = torch.randint(0, config.vocab_size, (37,), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        want = hf(input_ids=prompt[None]).logits[0].float()
    got = _absorbed_logits(config, model_weights(hf), prompt.tolist(), q_dtype, kv_dtype)
    assert (got - want).abs().max() <= tol
    assert want.std() > 0.5  # the logits carry signal, the tolerance is meaningful


def test_softmax_scale_is_deepseek_v3s():
    assert softmax_scale(deepseek_v3_config()) == pytest.approx(0.1352338, abs=1e-7)


def test_allocator_reuses_freed_blocks_and_refuses_too_many():
    allocator = BlockAllocator(4)
    first = allocator.allocate(3)
    allocator.free(first[1:])
    assert allocator.allocate(2) == first[1:]
    with pytest.raises(OutOfBlocks, match=r"^blocks \(out of memory\): expected 3 free, got 1"):
        allocator.allocate(3)
    # rank 0 holds ceil(T / W) positions: 33 tokens over 2 ranks -> 17 -> 2 blocks of 16
    assert blocks_needed(33, 2, 16) == 2 and blocks_needed(32, 2, 16) == 1


def test_warmup_shapes_end_with_the_remainder():
    assert warmup_q_lens(9, 7) == [8, 1]
    assert warmup_q_lens(16, 7) == [8, 8]
    assert warmup_q_lens(3, 0) == [1, 1, 1]


def test_uniform_view_only_of_ragged_batches_that_divide():
    assert uniform_view([8, 2], [100, 40]).tolist() == [0, 5, 10]
    assert uniform_view([4, 4], [100, 40]) is None  # uniform already
    assert uniform_view([8, 1], [100, 40]) is None  # 9 tokens do not divide by 2
    assert uniform_view([8, 2], [100, 4]) is None  # 5 rows in a request of length 4


def test_agreement_counts_flips_below_delta_and_stops_at_divergence():
    oracle = {
        0: OracleContinuation([1, 2, 3, 4], [1.0, 0.001, 1.0, 1.0]),
        1: OracleContinuation([5, 6, 7], [1.0, 1.0, 0.5]),
        2: OracleContinuation([8, 9], [1.0, 1.0]),
    }
    result = compare_with_oracle({0: [1, 9, 9, 9], 1: [5, 6, 0], 2: [8, 9]}, oracle, 0.01)
    assert result["positions_compared"] == 2 + 3 + 2
    assert result["flips_below_delta"] == 1 and result["disagreements_above_delta"] == 1
    assert result["first_divergence"]["request"] == 0 and not result["passed"]


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"^world \(invalid value\): expected a divisor"):
        ServeConfig(world=3).validate()
    with pytest.raises(ValueError, match=r"^kv_dtype \(invalid value\).*got 'fp16'"):
        ServeConfig(kv_dtype="fp16").validate()
    with pytest.raises(ValueError, match=r"^max_batch_tokens"):
        ServeConfig(max_drafts=7, max_batch_tokens=4).validate()
    # Each check runs once those before it passed: no ZeroDivisionError for world 0.
    with pytest.raises(ValueError, match=r"^world \(invalid value\): expected >= 1, got 0"):
        ServeConfig(world=0).validate()
    bad = {
        "hidden_size": dict(hidden_size=0),
        "vocab_size": dict(vocab_size=1),
        "init_std": dict(init_std=float("nan")),
        "seed": dict(seed=-1),
        "k_scale": dict(k_scale=4.0),  # an fp32 cache
    }
    for field, change in bad.items():
        with pytest.raises(ValueError, match=rf"^{field} \(invalid value\)"):
            ServeConfig(**change).validate()
    with pytest.raises(ValueError, match=r"^k_scale \(invalid value\): expected finite"):
        ServeConfig(kv_dtype="fp8", k_scale=float("inf")).validate()
    # The longest request (40 + 24 + 3 tokens: 5 blocks of 16) and the largest warm-up batch
    # (64 tokens in 16 requests of 4: 16 blocks) must fit the pool.
    with pytest.raises(ValueError, match=r"^num_blocks \(invalid value\).*longest request"):
        ServeConfig(num_blocks=4).validate()
    with pytest.raises(ValueError, match=r"^num_blocks \(invalid value\).*warm-up.*16 blocks"):
        ServeConfig(num_blocks=15, max_capture_size=64).validate()
    ServeConfig(num_blocks=16, max_capture_size=64).validate()


def test_cli_exit_statuses(capsys, monkeypatch):
    from dcpmla.serve import cli

    assert cli.main(["--world", "0"]) == 2
    assert "world (invalid value)" in capsys.readouterr().err
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert cli.main(["--device", "cuda", "--decode", "torch"]) == 2
    assert "device (unavailable)" in capsys.readouterr().err

    # A run that fails (not a disagreement with the oracle) exits 3, never 1.
    def fail(config):
        raise RuntimeError("out of memory")

    monkeypatch.setattr("dcpmla.serve.launch.serve", fail)
    assert cli.main([]) == 3
    assert "out of memory" in capsys.readouterr().err


def test_cli_help_prints_every_option(capsys):
    from dcpmla.serve.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert "rank r on GPU r % GPUs" in " ".join(capsys.readouterr().out.split())
