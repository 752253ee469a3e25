"""The decoding loop of one DCP rank: continuous batching over a paged cache, speculative
decoding with greedy verification.

Each step: arrived requests join (up to max_running); every running request contributes its rows
to one ragged batch (its prompt the first time, then its last token and k drafts), prompts first,
within a token budget and the free blocks; the model runs once; rank 0's greedy tokens
(broadcast, so every rank takes the same decisions) accept the longest prefix of the drafts that
matches, plus one token. A request's blocks then shrink to its accepted length, so rejected
drafts' slots are written again by the next step. Requests leave at max_new tokens and return
their blocks. A request joins only when the free blocks hold its tokens and one step's growth;
when no running request can grow, the newest gives its blocks back and waits (preemption by
recomputation: it later prefills all its tokens again).

With CUDA graphs (graphs: a serve.step_graphs.StepGraphs) a step padded to a capture size
replays that size's graph; a larger step runs eagerly."""

import time
from dataclasses import dataclass

from dcpmla.serve import collectives
from dcpmla.serve.batch import build_step_batch
from dcpmla.serve.kv_cache import OutOfBlocks, blocks_needed
from dcpmla.serve.warmup import capture_size_for, capture_sizes


@dataclass
class StepRecord:
    tokens: int  # query rows of the batch
    padded_tokens: int  # rows incl. padding up to a capture size
    requests: int
    prefill_rows: int
    new_tokens: int  # tokens the step produced (accepted drafts and one more per request)
    seconds: float
    # The decode attention summed over layers, and the query all-gather and combine of the
    # partials; None in a replayed graph (it runs without the host's marks).
    attention: object
    combine: object
    viewed_uniform: bool
    replayed: bool = False  # the step replayed a CUDA graph

    @property
    def rest(self):
        if self.replayed:
            return None
        return self.seconds - self.attention - self.combine


class Engine:
    def __init__(
        self, model, attention, caches, allocator, drafter, config, *, rank, group, graphs=None
    ):
        self.model, self.attention, self.caches = model, attention, caches
        self.allocator, self.drafter, self.config = allocator, drafter, config
        self.rank, self.group, self.graphs = rank, group, graphs
        self.capture_sizes = capture_sizes(config)

    def blocks_needed(self, total_len):
        c = self.config
        return blocks_needed(total_len, c.world, c.block_size, c.interleave)

    def padded_size(self, num_tokens):
        """The smallest capture size >= num_tokens (the graph an engine replays), or num_tokens
        itself when it exceeds them all (the step then runs eagerly)."""
        return capture_size_for(num_tokens, self.capture_sizes)

    def _blocks_for(self, request, total_len):
        """Grows request's blocks to hold total_len tokens on every rank (OutOfBlocks if not)."""
        need = self.blocks_needed(total_len)
        if need > len(request.blocks):
            request.blocks += self.allocator.allocate(need - len(request.blocks))

    def _shrink(self, request, total_len):
        need = self.blocks_needed(total_len)
        if need < len(request.blocks):
            self.allocator.free(request.blocks[need:])
            del request.blocks[need:]

    def forward(self, rows, drafting):
        """rows: (tokens, total_len, blocks) per request; drafting: per request whether its rows
        are a token and its drafts (not a prompt) -> (greedy tokens [N] int64, the step's
        StepBatch, {category: seconds}, whether a CUDA graph replayed it); the batch as the
        controls present it to attention. With graphs, a capture size's first step (warm-up)
        runs eagerly and captures its graph; its later steps replay it."""
        batch = build_step_batch(
            rows,
            block_size=self.config.block_size,
            world=self.config.world,
            rank=self.rank,
            interleave=self.config.interleave,
            num_tokens=self.padded_size(sum(len(tokens) for tokens, _, _ in rows)),
            full_mask=drafting if self.config.control_full_mask else None,
            view_uniform=self.config.control_uniform_view,
        )
        if self.graphs is not None and self.graphs.covers(batch.num_tokens):
            logits, replayed = self.graphs.run(batch)
        else:
            batch, replayed = batch.to(self.caches[0].device), False
            self.attention.plan(batch)
            logits = self.model.forward(batch.token_ids, batch.positions, self.caches)
        greedy = logits.argmax(dim=-1)
        if self.config.world > 1:
            collectives.broadcast_(greedy, 0, self.group)
        return greedy.tolist(), batch, self.attention.timer.take(), replayed

    def _schedule(self, running):
        """(request, tokens, total_len) of the requests in this step's batch."""
        budget = self.config.max_batch_tokens
        scheduled = []
        # Prompts first (a prompt longer than the budget runs when it comes first), then the
        # drafting requests, each group in arrival order.
        for request in sorted(running, key=lambda r: r.prefilled):
            if request.prefilled:
                drafts = self.drafter.propose(request, request.remaining - 1)
                tokens = [request.generated[-1], *drafts]
                total = request.length + len(drafts)
            else:  # a new request's prompt, or all the tokens of a preempted one
                tokens = request.prompt + request.generated
                total = len(tokens)
            if scheduled and len(tokens) > budget:
                continue
            try:
                self._blocks_for(request, total)
            except OutOfBlocks:
                continue
            scheduled.append((request, tokens, total))
            budget -= len(tokens)
        return scheduled

    def step(self, running):
        """One engine step over the running requests; returns its StepRecord (None when nothing
        could be scheduled)."""
        start = time.perf_counter()
        scheduled = self._schedule(running)
        if not scheduled:
            return None
        greedy, batch, seconds, replayed = self.forward(
            [(tokens, total, request.blocks) for request, tokens, total in scheduled],
            [request.prefilled for request, _, _ in scheduled],
        )
        new_tokens, prefill_rows, row = 0, 0, 0
        for request, tokens, _ in scheduled:
            predicted = greedy[row : row + len(tokens)]
            row += len(tokens)
            if not request.prefilled:
                request.prefilled, prefill_rows = True, prefill_rows + len(tokens)
                accepted = [predicted[-1]]
            else:
                drafts = tokens[1:]
                matched = 0
                while matched < len(drafts) and drafts[matched] == predicted[matched]:
                    matched += 1
                request.drafts_proposed += len(drafts)
                request.drafts_accepted += matched
                accepted = drafts[:matched] + [predicted[matched]]
            accepted = accepted[: request.remaining]
            request.generated += accepted
            new_tokens += len(accepted)
            self._shrink(request, request.length)
        return StepRecord(
            tokens=row,
            padded_tokens=batch.num_tokens,
            requests=len(scheduled),
            prefill_rows=prefill_rows,
            new_tokens=new_tokens,
            seconds=time.perf_counter() - start,
            attention=None if replayed else seconds.get("attention", 0.0),
            combine=None if replayed else seconds.get("combine", 0.0),
            viewed_uniform=batch.viewed_uniform,
            replayed=replayed,
        )

    def _fits(self, request):
        """Whether the free blocks hold request's tokens and one step's growth (1 + K)."""
        total = request.length + 1 + self.config.max_drafts
        return self.blocks_needed(total) <= self.allocator.num_free

    def _preempt(self, running, waiting):
        """Takes the newest running request's blocks back; it waits first in line."""
        victim = max(running, key=lambda r: r.arrival)
        self.allocator.free(victim.blocks)
        victim.blocks, victim.prefilled = [], False
        victim.preemptions += 1
        running.remove(victim)
        waiting.insert(0, victim)

    def serve(self, requests, progress=None):
        """Runs every request to its max_new tokens; returns the StepRecords."""
        pending = sorted(requests, key=lambda r: r.arrival)
        waiting, running, records, step = [], [], [], 0
        while pending or waiting or running:
            while pending and pending[0].arrival <= step:
                waiting.append(pending.pop(0))
            while waiting and len(running) < self.config.max_running and self._fits(waiting[0]):
                running.append(waiting.pop(0))
            if not running and waiting:
                raise RuntimeError(
                    f"num_blocks (too small): expected blocks for request {waiting[0].id}'s "
                    f"{waiting[0].length} tokens and one step's growth, "
                    f"got {self.config.num_blocks}"
                )
            record = self.step(running) if running else None
            if record is None and running:  # no running request can grow
                if len(running) == 1:
                    raise RuntimeError(
                        f"num_blocks (too small): expected blocks for request {running[0].id} to "
                        f"grow past {running[0].length} tokens, got {self.config.num_blocks}"
                    )
                self._preempt(running, waiting)
            if record is not None:
                records.append(record)
                if progress is not None:
                    progress.update(record.new_tokens)
            for request in [r for r in running if r.remaining == 0]:
                self.allocator.free(request.blocks)
                request.blocks = []
                running.remove(request)
            step += 1
        return records
