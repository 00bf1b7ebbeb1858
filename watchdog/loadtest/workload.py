"""What a load test sends: arrival times and request lengths.

- Arrivals: ``poisson`` (exponential gaps: independent users arriving at a mean rate, which is how real
  traffic bunches) or ``constant`` (evenly spaced) at a rate; offsets start at 0 and are seeded, so a
  run is reproducible.
- Lengths: fixed, drawn from a distribution around the means (``uniform`` within +/- spread, or
  ``lognormal`` with sigma = spread, mean preserved), or replayed in order from a JSONL file of
  ``{"prompt_tokens": N, "output_tokens": N}`` (see :func:`watchdog.capacity.units.read_length_pairs`).
- Prompts are ``N`` repetitions of a one-token word, so the server's prompt length is close to N; or
  real prompts from a dataset file (:func:`read_prompt_dataset`: JSONL of ``{"prompt": ...}`` or a
  ShareGPT-style JSON list of conversations, as ``vllm bench serve`` reads), used in order, cycling.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

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


CHARS_PER_TOKEN = 4
"""Without the model's tokenizer a text's token count is estimated as characters / 4 (English BPE text)."""


@dataclass(frozen=True)
class PromptEntry:
    """One prompt of a dataset and, when the dataset says, how many tokens to generate for it."""

    prompt: str
    output_tokens: int | None = None

    @property
    def prompt_tokens(self) -> int:
        """The estimated prompt length (see :data:`CHARS_PER_TOKEN`)."""
        return max(1, round(len(self.prompt) / CHARS_PER_TOKEN))


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message names the file and line or entry."""


def _sharegpt_entry(item: Any, where: str) -> PromptEntry | None:
    turns = item.get("conversations") if isinstance(item, dict) else None
    if not isinstance(turns, list):
        raise DatasetError(f"{where}: expected an object with a 'conversations' list")
    human = next((i for i, t in enumerate(turns) if isinstance(t, dict) and t.get("from") in ("human", "user")), None)
    if human is None or not str(turns[human].get("value", "")).strip():
        return None  # a conversation without a question: skipped, as vllm bench does
    answer = next((t for t in turns[human + 1:] if isinstance(t, dict) and t.get("from") in ("gpt", "assistant")),
                  None)
    output = max(1, round(len(str(answer.get("value", ""))) / CHARS_PER_TOKEN)) if answer else None
    return PromptEntry(str(turns[human]["value"]), output)


def read_prompt_dataset(path: Path) -> tuple[PromptEntry, ...]:
    """The prompts of ``path``: JSONL, one ``{"prompt": TEXT, "output_tokens": N}`` a line (``output_tokens``
    or ``max_tokens`` optional), or ShareGPT JSON (a list of ``{"conversations": [{"from": "human", "value":
    ...}, {"from": "gpt", "value": ...}]}``: the first human turn is the prompt, the reply's estimated length
    the output). Raises :class:`DatasetError` naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read: {exc}") from None
    entries: list[PromptEntry] = []
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise DatasetError(f"{path}: not valid JSON: {exc}") from None
        for index, item in enumerate(items):
            entry = _sharegpt_entry(item, f"{path}: entry {index}")
            if entry is not None:
                entries.append(entry)
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise DatasetError(f"{path}:{number}: not valid JSON: {exc}") from None
            if isinstance(item, dict) and "conversations" in item:
                entry = _sharegpt_entry(item, f"{path}:{number}")
                if entry is not None:
                    entries.append(entry)
                continue
            prompt = item.get("prompt") if isinstance(item, dict) else None
            if not isinstance(prompt, str) or not prompt.strip():
                raise DatasetError(f"{path}:{number}: expected {{\"prompt\": TEXT}} (or a ShareGPT conversation)")
            output = item.get("output_tokens", item.get("max_tokens"))
            if output is not None and (not isinstance(output, int) or isinstance(output, bool) or output < 1):
                raise DatasetError(f"{path}:{number}: output_tokens must be a positive integer, not {output!r}")
            entries.append(PromptEntry(prompt, output))
    if not entries:
        raise DatasetError(f"{path}: no prompts in it")
    return tuple(entries)


@dataclass(frozen=True)
class LengthSource:
    """Prompt and output lengths: means with a distribution, or a replay list (used in order, cycling)."""

    prompt_tokens: int = 512
    output_tokens: int = 128
    distribution: Distribution = Distribution.FIXED
    spread: float = 0.5
    replay: tuple[tuple[int, int], ...] = ()
    prompts: tuple[PromptEntry, ...] = ()
    """Real prompts (a dataset file), used in order, cycling; their output length when the file gives one,
    else ``output_tokens``."""

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
        if lengths.prompts:
            entry = lengths.prompts[index % len(lengths.prompts)]
            output = entry.output_tokens or lengths.sample(index, rng)[1]
            requests.append(CompletionRequest(prompt=entry.prompt, max_tokens=output, model=model, api=api,
                                              prompt_tokens=entry.prompt_tokens, ignore_eos=ignore_eos))
            continue
        prompt, output = lengths.sample(index, rng)
        requests.append(CompletionRequest(prompt=make_prompt(prompt), max_tokens=output, model=model, api=api,
                                          prompt_tokens=prompt, ignore_eos=ignore_eos))
    return requests
