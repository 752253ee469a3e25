"""Serving runs end to end on the CPU against the oracle (transformers' greedy decoding of the
same weights): W = 1 in this process and W = 2 as two gloo processes, speculative decoding on and
off, the seed report's configuration (W = 2, K = 7, warm-up through the capture sizes, 9 tokens
as 8 + 1 among them), other dtypes, and the negative controls, which must change tokens."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dcpmla.serve.cli import main  # noqa: E402
from dcpmla.serve.config import ServeConfig  # noqa: E402
from dcpmla.serve.launch import oracle_continuations, serve  # noqa: E402

from serve_markers import cuda, torch_ops  # noqa: E402

# Small and quick: 5 requests arriving one a step, prompts of 8..32 tokens, 16 new tokens each.
BASE = dict(num_requests=5, prompt_len=(8, 32), max_new_tokens=16, show_progress=False)


@pytest.fixture(scope="module")
def oracle():
    """The continuations of BASE's model and workload (every run below serves the same)."""
    return oracle_continuations(ServeConfig(**BASE))


def _serve(oracle, **overrides):
    return serve(ServeConfig(**BASE, **overrides), oracle=oracle)


def _assert_agrees(report):
    a = report["agreement"]
    total = BASE["num_requests"] * BASE["max_new_tokens"]
    assert report["throughput"]["generated_tokens"] == total
    assert a["passed"], a["divergences"]
    # every served token compared, except after a flip where the oracle's margin is below delta
    assert a["positions_compared"] >= total - a["flips_below_delta"] * BASE["max_new_tokens"]


@pytest.mark.parametrize("max_drafts", [0, 3])
def test_one_rank_serves_the_oracles_tokens(oracle, max_drafts):
    report = _serve(oracle, max_drafts=max_drafts)
    _assert_agrees(report)
    rate = report["speculative"]["acceptance_rate"]
    if max_drafts:
        assert 0.2 < rate < 0.95  # corrupted drafts: some accepted, some not
        assert report["throughput"]["steps"] < BASE["max_new_tokens"] + BASE["num_requests"]
    else:
        assert rate is None


def test_two_ranks_seed_configuration(oracle):
    """The seed report's engine: W = 2, K = 7, warm-up through capture sizes up to 12."""
    report = _serve(oracle, world=2, max_drafts=7, max_capture_size=12)
    _assert_agrees(report)
    assert report["warmup"]["batches"][8] == [8, 1]
    assert report["speculative"]["acceptance_rate"] > 0
    assert max(step["tokens"] for step in report["steps"]) > 9


def test_two_ranks_without_drafts_all_to_all_interleaved_padded(oracle):
    """a2a combine, interleave 4 (blocks of 16), batches padded up to CUDA-graph sizes."""
    report = _serve(
        oracle,
        world=2,
        max_drafts=0,
        combine="a2a",
        interleave=4,
        capture_sizes=(1, 2, 4, 8, 16, 32, 64),
    )
    _assert_agrees(report)
    assert any(step["padded_tokens"] > step["tokens"] for step in report["steps"])


def test_bf16_query_and_fp8_cache(oracle):
    # fp8 rounds every latent: the oracle's close calls may flip, clear ones may not.
    _assert_agrees(_serve(oracle, q_dtype="bf16", kv_dtype="fp8", k_scale=0.05, margin_delta=0.25))


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("control", ["control_full_mask", "control_uniform_view"])
def test_negative_controls_change_tokens(oracle, control, world):
    report = _serve(oracle, max_drafts=3, world=world, **{control: True})
    a = report["agreement"]
    assert a["disagreements_above_delta"] >= 2 and not a["passed"]
    if control == "control_uniform_view":
        assert report["controls"]["steps_viewed_uniform"] > 0


def test_cli_exit_status_report_and_plot(tmp_path):
    report_path, plot_path = tmp_path / "report.json", tmp_path / "steps.png"
    args = ["--requests", "3", "--max-new-tokens", "8", "--no-progress"]
    args += ["--report", str(report_path), "--plot", str(plot_path)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-m", "dcpmla.serve", *args], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text())
    assert report["agreement"]["passed"] and plot_path.stat().st_size > 1000
    assert set(report["step_time_mean_seconds"]) == {"total", "attention", "combine", "rest"}
    # A negative control disagrees with the oracle: exit status 1. Bad arguments: 2.
    assert main([*args, "--control-full-mask", "--plot", ""]) == 1
    assert main(["--kv-dtype", "fp16"]) == 2


def test_requests_wait_for_blocks_and_are_preempted(oracle):
    """A pool of 12 blocks of 8 holds one or two requests (up to 32 + 16 tokens, 4 + 3 drafts):
    the others wait for the blocks that finished requests and rejected drafts give back, and a
    request that cannot grow is preempted and recomputes its tokens."""
    roomy = _serve(oracle, max_drafts=3, block_size=8, num_blocks=64)
    tight = _serve(oracle, max_drafts=3, block_size=8, num_blocks=12)
    _assert_agrees(tight)
    assert tight["throughput"]["steps"] > roomy["throughput"]["steps"]
    assert tight["throughput"]["preemptions"] > 0 == roomy["throughput"]["preemptions"]
    with pytest.raises(ValueError, match=r"^num_blocks \(invalid value\).*longest request"):
        _serve(oracle, block_size=8, num_blocks=2)


@torch_ops
@pytest.mark.parametrize("world", [1, 2])
def test_torch_ops_path_serves_the_oracles_tokens(oracle, world):
    """The decode through BatchMLADecodeWrapper (the path a GPU runs), here on CPU tensors."""
    report = _serve(oracle, world=world, decode="torch", max_drafts=3, max_capture_size=6)
    _assert_agrees(report)
    assert "BatchMLADecodeWrapper" in report["backend"]["decode"]


@cuda
@pytest.mark.parametrize("world", [1, 2])
def test_gpu_serves_the_oracles_tokens(oracle, world):
    """W = 1 on the GPU, and W = 2 simulated on it (two processes, collectives via the host)."""
    report = _serve(
        oracle, world=world, device="cuda", decode="torch", max_drafts=7, max_capture_size=12
    )
    _assert_agrees(report)
    assert report["backend"]["device"].startswith("cuda")
    # Graphs by default where each rank has a GPU (W = 1, or NCCL); ranks sharing one: eager.
    graphs = report["cuda_graphs"]
    assert graphs["used"] == (world == 1 or torch.cuda.device_count() >= world)
    assert graphs["captured"] == (12 if graphs["used"] else 0)


def test_numpy_decode_refuses_the_gpu():
    with pytest.raises(ValueError, match="decode"):
        ServeConfig(**BASE, device="cuda").validate()
