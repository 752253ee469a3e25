"""Warm-up as an engine does it before serving: one dummy batch per capture size n up to a max,
of ceil(n / (1 + K)) requests of 1 + K tokens, the last one the remainder (9 tokens with K = 7:
8 + 1, the batch that crashed engines at start-up). With CUDA graphs (serve/step_graphs.py) each
size's batch runs once eagerly and is then captured; without them (the CPU, ranks simulated on a
shared GPU, --no-cuda-graphs) the batches run eagerly. While serving, a batch is padded to the
smallest capture size that holds it (capture_size_for)."""


def capture_sizes(config):
    """config.capture_sizes, or every batch size 1..max_capture_size when none are given (a CPU
    run is cheap; engines capture a subset and pad a batch to the next size)."""
    if config.capture_sizes:
        return sorted(set(config.capture_sizes))
    return list(range(1, config.max_capture_size + 1))


def capture_size_for(num_tokens, sizes):
    """The smallest of sizes >= num_tokens (the graph an engine replays for the batch), or
    num_tokens itself when it exceeds them all (the batch then runs eagerly, unpadded)."""
    return min((s for s in sizes if s >= num_tokens), default=num_tokens)


def warmup_q_lens(num_tokens, max_drafts):
    """Query lengths of the dummy batch of num_tokens: full 1 + K requests, then the rest."""
    per_request = 1 + max_drafts
    full, rest = divmod(num_tokens, per_request)
    return [per_request] * full + ([rest] if rest else [])


def warm_up(engine, max_drafts):
    """Runs the dummy batches (token 0, each request's length its query length, blocks taken
    from the allocator and returned), capturing each size's graph when the engine has graphs;
    returns the query lengths of every batch run."""
    shapes = []
    for size in engine.capture_sizes:
        q_lens = warmup_q_lens(size, max_drafts)
        block_lists = []
        try:
            for q in q_lens:
                block_lists.append(engine.allocator.allocate(engine.blocks_needed(q)))
            engine.forward(
                [([0] * q, q, blocks) for q, blocks in zip(q_lens, block_lists)],
                [True] * len(q_lens),
            )
        finally:
            for blocks in block_lists:
                engine.allocator.free(blocks)
        shapes.append(q_lens)
    return shapes
