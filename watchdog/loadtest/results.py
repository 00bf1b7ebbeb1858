"""Reading a saved ``loadtest --json`` result (the document is described in docs/cli.md)."""

from __future__ import annotations

import json
from pathlib import Path


def knee_throughput(path: Path) -> float:
    """The knee's goodput (output tokens/s that met every SLO) from a loadtest result; ValueError naming the problem."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read a loadtest result: {exc}") from exc
    knee = doc.get("knee") if isinstance(doc, dict) else None
    if not isinstance(knee, dict):
        if isinstance(doc, dict) and doc.get("knee_status") == "not reached":
            raise ValueError(f"{path}: knee: not reached (every step met the attainment objective, so the "
                             "highest load tried is a lower bound, not the knee): sweep higher")
        raise ValueError(f"{path}: knee: no knee in this result (no step met the attainment objective)")
    value = knee.get("goodput_tokens_per_second")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{path}: knee.goodput_tokens_per_second: expected a positive number, got {value!r}")
    return float(value)
