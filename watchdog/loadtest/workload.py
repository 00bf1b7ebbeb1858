"""What a load test sends: arrival times and request lengths.

- Arrivals: ``poisson`` (exponential gaps: independent users arriving at a mean rate, which is how real
  traffic bunches) or ``constant`` (evenly spaced) at a rate; offsets start at 0 and are seeded, so a
  run is reproducible.
- Lengths: fixed, drawn from a distribution around the means (``uniform`` within +/- spread, or
  ``lognormal`` with sigma = spread, mean preserved), or replayed in order from a JSONL file of
  ``{"prompt_tokens": N, "output_tokens": N}`` (see :func:`watchdog.capacity.units.read_length_pairs`).
- Prompts are ``N`` repetitions of a one-token word, so the server's prompt length is close to N.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import Enum

from watchdog.loadtest.client import Api, CompletionRequest


class Arrival(str, Enum):
    """How requests arrive at a given rate."""

    POISSON = "poisson"
    CONSTANT = "constant"


class Distribution(str, Enum):
    """How request lengths vary around their means."""

    FIXED = "fixed"
    UNIFORM = "uniform"
    LOGNORMAL = "lognormal"


def arrival_offsets(kind: Arrival, rate: float, count: int, rng: random.Random) -> list[float]:
    """Send times in seconds from the start of a step, for ``count`` requests at ``rate`` per second."""
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    if kind is Arrival.CONSTANT:
        return [index / rate for index in range(count)]
    offsets, now = [], 0.0
    for _ in range(count):
        offsets.append(now)
        now += rng.expovariate(rate)
    return offsets


@dataclass(frozen=True)
class LengthSource:
    """Prompt and output lengths: means with a distribution, or a replay list (used in order, cycling)."""

    prompt_tokens: int = 512
    output_tokens: int = 128
    distribution: Distribution = Distribution.FIXED
    spread: float = 0.5
    replay: tuple[tuple[int, int], ...] = ()

    def _draw(self, mean: int, rng: random.Random) -> int:
        if self.distribution is Distribution.UNIFORM:
            return max(1, round(rng.uniform(mean * (1 - self.spread), mean * (1 + self.spread))))
        if self.distribution is Distribution.LOGNORMAL:
            sigma = self.spread
            return max(1, round(rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)))
        return mean

    def sample(self, index: int, rng: random.Random) -> tuple[int, int]:
        """``(prompt_tokens, output_tokens)`` of the ``index``-th request."""
        if self.replay:
            return self.replay[index % len(self.replay)]
        return self._draw(self.prompt_tokens, rng), self._draw(self.output_tokens, rng)


def make_prompt(tokens: int) -> str:
    """A prompt of about ``tokens`` tokens."""
    return " ".join(["hi"] * max(1, tokens))


def make_requests(lengths: LengthSource, count: int, rng: random.Random, model: str, api: Api,
                  first_index: int = 0, ignore_eos: bool = True) -> list[CompletionRequest]:
    """``count`` requests with lengths from ``lengths`` (replays continue from ``first_index``)."""
    requests = []
    for index in range(first_index, first_index + count):
        prompt, output = lengths.sample(index, rng)
        requests.append(CompletionRequest(prompt=make_prompt(prompt), max_tokens=output, model=model, api=api,
                                          prompt_tokens=prompt, ignore_eos=ignore_eos))
    return requests
