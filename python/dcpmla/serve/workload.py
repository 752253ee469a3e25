"""The seeded requests of a run: random prompts of random lengths, arriving one every
arrival_gap steps, each to be served to exactly max_new_tokens."""

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Request:
    id: int
    prompt: list  # token ids
    max_new: int
    arrival: int  # the engine step at which it arrives
    generated: list = field(default_factory=list)
    blocks: list = field(default_factory=list)  # block ids, the same on every rank
    prefilled: bool = False
    drafts_proposed: int = 0
    drafts_accepted: int = 0
    preemptions: int = 0  # times its blocks were taken back (it then recomputes its tokens)

    @property
    def length(self):
        """Tokens so far (prompt and generated); all but the last are in the cache."""
        return len(self.prompt) + len(self.generated)

    @property
    def remaining(self):
        return self.max_new - len(self.generated)


def make_requests(config):
    rng = np.random.default_rng([config.seed, 1])
    low, high = config.prompt_len
    requests = []
    for i in range(config.num_requests):
        length = int(rng.integers(low, high + 1))
        prompt = rng.integers(0, config.vocab_size, size=length).tolist()
        requests.append(Request(i, prompt, config.max_new_tokens, i * config.arrival_gap))
    return requests
