"""CUDA graphs of the serving step: which capture size a step is padded to, when graphs are used
(and the errors when they are asked for where they cannot be), the static inputs a graph reads,
and the step graphs themselves: on the CPU through a stand-in that reruns the captured forward
over the same static inputs (what a replay does), on a GPU through torch.cuda.CUDAGraph: a replay
gives the eager run's logits, padding rows write nothing, and graphs on and off serve the same
tokens, with the report's counts of captured graphs, replayed and eager steps."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dcpmla.serve import rank_main  # noqa: E402
from dcpmla.serve.batch import build_step_batch  # noqa: E402
from dcpmla.serve.cli import _parser, config_from_args, main  # noqa: E402
from dcpmla.serve.config import ServeConfig  # noqa: E402
from dcpmla.serve.launch import oracle_continuations, serve  # noqa: E402
from dcpmla.serve.step_graphs import (  # noqa: E402
    CudaStepGraph,
    StaticStepInputs,
    cuda_graphs_choice,
)
from dcpmla.serve.warmup import capture_size_for, capture_sizes  # noqa: E402

from serve_markers import cuda, torch_ops  # noqa: E402

BASE = dict(num_requests=5, prompt_len=(8, 32), max_new_tokens=16, show_progress=False)


class RerunForward:
    """CudaStepGraph's calls on the CPU: capture keeps the forward, and a replay runs it again
    over the same static inputs, as a CUDA graph reruns its kernels on the same addresses."""

    def __init__(self, forward, pool=None):
        self.forward, self.pool = forward, pool

    def replay(self):
        return self.forward()


def test_a_step_is_padded_to_the_smallest_capture_size_that_holds_it():
    sizes = [1, 2, 4, 8, 16]
    assert [capture_size_for(n, sizes) for n in (1, 3, 8, 9, 16)] == [1, 4, 8, 16, 16]
    assert capture_size_for(17, sizes) == 17  # larger than every size: eager, unpadded
    assert capture_size_for(5, []) == 5
    assert capture_sizes(ServeConfig(capture_sizes=(8, 2, 8))) == [2, 8]
    assert capture_sizes(ServeConfig(max_capture_size=3)) == [1, 2, 3]


def test_graphs_are_used_where_a_rank_can_capture_its_step():
    gpu = dict(device="cuda", decode="torch", max_capture_size=16)
    assert cuda_graphs_choice(ServeConfig(**gpu), None)[0]
    assert cuda_graphs_choice(ServeConfig(**gpu, world=2), "nccl")[0]
    used, why = cuda_graphs_choice(ServeConfig(**gpu, world=2), "gloo")
    assert not used and "host" in why
    assert not cuda_graphs_choice(ServeConfig(**gpu, cuda_graphs=False), None)[0]
    assert not cuda_graphs_choice(ServeConfig(device="cuda", decode="torch"), None)[0]
    assert not cuda_graphs_choice(ServeConfig(max_capture_size=16), None)[0]  # the CPU
    # Asked for with ranks simulated on shared GPUs: the collectives cannot be captured.
    with pytest.raises(ValueError, match=r"^cuda_graphs \(unavailable\): expected a GPU"):
        cuda_graphs_choice(ServeConfig(**gpu, world=2, cuda_graphs=True), "gloo")


def test_graphs_asked_for_where_they_cannot_be_name_the_option():
    with pytest.raises(ValueError, match=r"^cuda_graphs \(invalid value\).*device 'cpu'.*True"):
        ServeConfig(cuda_graphs=True, max_capture_size=8).validate()
    with pytest.raises(ValueError, match=r"^cuda_graphs \(invalid value\).*capture sizes"):
        ServeConfig(device="cuda", decode="torch", cuda_graphs=True).validate()
    with pytest.raises(ValueError, match=r"^cuda_graphs \(invalid value\).*got 'yes'"):
        ServeConfig(cuda_graphs="yes").validate()
    assert ServeConfig(cuda_graphs=False).validate().cuda_graphs is False


def test_cli_graph_flags(capsys):
    def parsed(*argv):
        return config_from_args(_parser().parse_args(list(argv))).cuda_graphs

    assert parsed() is None and parsed("--cuda-graphs") is True
    assert parsed("--no-cuda-graphs") is False
    assert main(["--cuda-graphs", "--max-capture-size", "4"]) == 2
    assert "cuda_graphs (invalid value)" in capsys.readouterr().err


def _batch(rows, num_tokens, block_size=16):
    return build_step_batch(rows, block_size=block_size, num_tokens=num_tokens)


def test_static_inputs_take_a_padded_step_and_forget_the_last():
    inputs = StaticStepInputs.allocate(8, 4, torch.device("cpu"))
    inputs.load(_batch([([5] * 6, 6, [3]), ([7], 20, [1, 2])], 8))
    static = inputs.load(_batch([([9] * 3, 3, [4])], 8))  # a smaller step after a larger one
    assert static.token_ids is inputs.token_ids and static.block_table is inputs.block_table
    assert inputs.token_ids.tolist() == [9, 9, 9, 0, 0, 0, 0, 0]
    assert inputs.positions.tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
    assert inputs.slots.tolist() == [64, 65, 66, -1, -1, -1, -1, -1]  # padding writes nothing
    assert inputs.block_table[0].tolist() == [4, -1, -1, -1]
    assert (inputs.block_table[1:] == -1).all()
    with pytest.raises(ValueError, match=r"^batch \(shape mismatch\): expected 8 rows"):
        inputs.load(_batch([([1] * 3, 3, [4])], 4))
    with pytest.raises(ValueError, match=r"and 4 blocks a request, got .* and 5 blocks"):
        inputs.load(_batch([([1] * 3, 70, [0, 1, 2, 3, 4])], 8))


def _graph_engine(device, graph_type):
    config = ServeConfig(
        **BASE, device=device, decode="torch", max_drafts=7, capture_sizes=(8, 16), num_blocks=32
    )
    return rank_main.build_engine(config, {}, 0, None, graph_type)


@pytest.mark.parametrize(
    "device,graph_type",
    [
        pytest.param("cpu", RerunForward, marks=torch_ops),
        pytest.param("cuda", CudaStepGraph, marks=cuda),
    ],
)
def test_a_replay_gives_the_eager_logits_and_padding_writes_nothing(device, graph_type):
    engine = _graph_engine(device, graph_type)
    graphs = engine.graphs
    # 9 rows (a prompt of 8 and one of 1, the warm-up's 8 + 1) padded to 16; then 5 rows to 8.
    nine = _batch([(list(range(3, 11)), 8, [2]), ([40], 1, [3])], 16)
    five = _batch([([11, 12, 13, 14, 15], 5, [4])], 8)
    eager, replayed = graphs.run(nine)  # captures 16 after an eager run
    assert not replayed and graphs.captured == 1
    graphs.run(five)  # captures 8
    before = [cache.clone() for cache in engine.caches]
    other = _batch([([20, 21, 22], 3, [5])], 8)
    _, replayed = graphs.run(other)  # replays 8 with another batch
    assert replayed and graphs.captured == 2
    for old, new in zip(before, engine.caches):
        written = (old != new).any(dim=-1).flatten().nonzero().flatten().tolist()
        assert written == [5 * 16, 5 * 16 + 1, 5 * 16 + 2]  # block 5's first 3 slots, no padding
    again, replayed = graphs.run(nine)
    assert replayed and torch.equal(again.argmax(-1), eager.argmax(-1))
    # The same kernels on the same plan: equal (a replay of the captured batch instead of this
    # one, or of a stale table, would be far off).
    torch.testing.assert_close(again, eager, rtol=1e-6, atol=1e-5)
    decode = engine.attention.decode  # planned into the schedule its graph reads
    assert decode.wrapper is decode.wrapper_for(16) is not decode.wrapper_for(17)
    assert decode.graph_sizes == [8, 16]


@pytest.fixture(scope="module")
def oracle():
    return oracle_continuations(ServeConfig(**BASE))


def _served_tokens_and_graphs(oracle, **overrides):
    report = serve(ServeConfig(**BASE, **overrides), oracle=oracle)
    assert report["agreement"]["passed"], report["agreement"]["divergences"]
    return report["generated"], report["cuda_graphs"], report["steps"]


def _assert_graph_counts(graphs, steps, sizes):
    replayed = [s for s in steps if s["replayed"]]
    assert graphs["used"] and graphs["captured"] == len(sizes) == len(graphs["capture_sizes"])
    assert graphs["replayed_steps"] == len(replayed) > 0
    assert graphs["eager_steps"] == len(steps) - len(replayed) > 0  # prompts over 16 tokens
    assert any(s["padded_tokens"] > s["tokens"] for s in replayed)
    assert all(s["attention"] is None and s["padded_tokens"] in sizes for s in replayed)


@torch_ops
def test_graph_path_on_the_cpu_serves_the_eager_tokens(oracle, monkeypatch):
    """The whole run through the step graphs (their static inputs, a wrapper per size), the
    stand-in rerunning each captured forward: the eager run's tokens, and the report's counts."""
    sizes = (1, 2, 4, 8, 16)
    run = dict(decode="torch", max_drafts=7, capture_sizes=sizes)
    eager, off, _ = _served_tokens_and_graphs(oracle, **run)
    assert not off["used"] and off["replayed_steps"] == 0 and off["captured"] == 0
    monkeypatch.setattr(rank_main, "cuda_graphs_choice", lambda config, backend: (True, "test"))
    monkeypatch.setattr(rank_main, "CudaStepGraph", RerunForward)
    graphed, graphs, steps = _served_tokens_and_graphs(oracle, **run)
    assert graphed == eager
    _assert_graph_counts(graphs, steps, sizes)


@cuda
def test_gpu_graphs_on_and_off_serve_the_same_tokens(oracle):
    sizes = (1, 2, 4, 8, 16)
    run = dict(device="cuda", decode="torch", max_drafts=7, capture_sizes=sizes)
    eager, off, _ = _served_tokens_and_graphs(oracle, cuda_graphs=False, **run)
    assert not off["used"] and off["replayed_steps"] == 0
    graphed, graphs, steps = _served_tokens_and_graphs(oracle, **run)  # auto: on at W = 1
    assert graphed == eager
    _assert_graph_counts(graphs, steps, sizes)
