"""The serving harness: a seeded DeepSeek-V3-shaped model served through dcpmla (absorbed MLA,
paged cache per DCP rank, continuous batching, speculative decoding with greedy verification),
its tokens checked against transformers' greedy decoding of the same weights.

python -m dcpmla.serve --help; in code: dcpmla.serve.launch.serve(ServeConfig(...)) -> report.
Needs torch, transformers, tqdm and matplotlib (docs/serving.md)."""

from dcpmla.serve.config import ServeConfig

__all__ = ["ServeConfig"]
