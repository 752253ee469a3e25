"""A drafter whose proposals are the oracle's continuation with seeded corruptions: each request
and step drafts k in 0..max_drafts tokens, each replaced by another token with probability
`corruption`, so acceptance varies by request and step. It depends on the request's state only,
so every rank proposes the same drafts."""

import numpy as np


class OracleDrafter:
    def __init__(self, continuations, *, max_drafts, corruption, vocab_size, seed):
        """continuations: request id -> the oracle's tokens after that request's prompt."""
        self.continuations, self.max_drafts = continuations, max_drafts
        self.corruption, self.vocab_size, self.seed = corruption, vocab_size, seed

    def propose(self, request, limit):
        """At most `limit` draft tokens to follow request's last token."""
        rng = np.random.default_rng([self.seed, 2, request.id, request.length])
        k = min(int(rng.integers(0, self.max_drafts + 1)), limit)
        truth = self.continuations[request.id]
        start = len(request.generated)  # the oracle's token at the request's next position
        drafts = list(truth[start : start + k])
        for i in range(len(drafts)):
            if rng.random() < self.corruption:
                drafts[i] = (drafts[i] + int(rng.integers(1, self.vocab_size))) % self.vocab_size
        return drafts
