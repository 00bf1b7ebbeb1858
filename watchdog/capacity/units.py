"""Parsing the planner's inputs: byte sizes with explicit units, and request lengths from JSONL files.

``parse_size``: ``80GB`` is 80 x 10^9 bytes, ``80GiB`` 80 x 2^30, ``40KB`` 40,000 and ``40KiB`` 40,960;
a bare number is bytes. Units are decimal unless they say ``i``, so rounding (80 GB for an 80 GiB card) is explicit.

``lengths_from_jsonl``: one JSON object per line with ``prompt_tokens`` and ``output_tokens`` (the
format ``loadtest --lengths`` replays); returns means and P90s. Errors name the file and line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from watchdog.capacity.plan import Lengths
from watchdog.loadtest.client import percentile

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> float:
    """Bytes in ``text`` (``18GB``, ``4GiB``, ``40000``); ValueError naming the text otherwise."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (use e.g. 18GB, 4GiB, 40KB or plain bytes)")
    return float(match.group(1)) * _UNITS[(match.group(2) or "B").lower()]


def read_length_pairs(path: Path) -> list[tuple[int, int]]:
    """``(prompt_tokens, output_tokens)`` per line of a JSONL file; ValueError naming file:line otherwise."""
    pairs: list[tuple[int, int]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt, output = row["prompt_tokens"], row["output_tokens"]
        except (ValueError, KeyError, TypeError) as exc:
            expected = '{"prompt_tokens": N, "output_tokens": N}'
            raise ValueError(f"{path}:{number}: expected {expected}: {exc}") from exc
        if not (isinstance(prompt, int) and isinstance(output, int) and prompt >= 1 and output >= 1):
            raise ValueError(f"{path}:{number}: prompt_tokens and output_tokens must be positive integers")
        pairs.append((prompt, output))
    if not pairs:
        raise ValueError(f"{path}: no requests")
    return pairs


def lengths_from_pairs(pairs: list[tuple[int, int]], source: str) -> Lengths:
    """Means and P90s of prompt and output lengths."""
    prompts = [float(p) for p, _ in pairs]
    outputs = [float(o) for _, o in pairs]
    return Lengths(prompt_mean=sum(prompts) / len(prompts), output_mean=sum(outputs) / len(outputs),
                   prompt_p90=percentile(prompts, 90) or 0.0, output_p90=percentile(outputs, 90) or 0.0,
                   source=source)
