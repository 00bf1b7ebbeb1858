"""Verdicts as JSON: the body of ``GET /api/v1/engines`` and of each engine's health endpoint, and what
``inference-watchdog engine list --json`` prints. The shape is documented in ``docs/routing.md``.

Contract: :func:`verdict_json` maps one :class:`EngineVerdict` to plain JSON types only (no NaN: missing
scores are ``null``); :func:`verdicts_json` wraps a source's list in the Prometheus-API envelope
``{"status": "success", "data": {"trusted": bool, "engines": [...]}}``; :func:`verdict_from_json` reads
one back (the command line's view of a running agent).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from watchdog.serving.model import EngineVerdict, ManualState, Reason, Scores, Verdict, VerdictSource


def _score(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) or math.isinf(value) else value


def verdict_json(v: EngineVerdict) -> dict[str, Any]:
    """One engine's verdict as JSON-ready data."""
    manual = None
    if v.manual is not None:
        manual = {"verdict": v.manual.verdict.value, "reason": v.manual.reason, "set_by": v.manual.set_by,
                  "set_at": v.manual.set_at_seconds, "until": v.manual.until_seconds}
    return {
        "job": v.job,
        "instance": v.instance,
        "verdict": v.verdict.value,
        "weight_percent": v.weight_percent,
        "reasons": [{"code": r.code, "detail": r.detail} for r in v.reasons],
        "since": v.since_seconds,
        "updated": v.updated_seconds,
        "proposed": v.proposed.value if v.proposed is not None else None,
        "manual": manual,
        "scores": {f.name: _score(getattr(v.scores, f.name)) for f in dataclasses.fields(Scores)},
    }


def verdicts_json(source: VerdictSource) -> dict[str, Any]:
    """Every engine's verdict in the API envelope."""
    return {"status": "success",
            "data": {"trusted": source.trusted(), "engines": [verdict_json(v) for v in source.verdicts()]}}


def verdict_from_json(data: dict[str, Any]) -> EngineVerdict:
    """The inverse of :func:`verdict_json`; raises ``KeyError``/``ValueError`` on a malformed entry."""
    manual_data = data.get("manual")
    manual = None
    if manual_data:
        manual = ManualState(job=data["job"], verdict=Verdict(manual_data["verdict"]), reason=manual_data["reason"],
                             set_by=manual_data["set_by"], set_at_seconds=float(manual_data["set_at"]),
                             until_seconds=manual_data.get("until"))
    scores = data.get("scores") or {}
    return EngineVerdict(
        job=data["job"], instance=data["instance"], verdict=Verdict(data["verdict"]),
        weight_percent=int(data["weight_percent"]),
        reasons=tuple(Reason(r["code"], r["detail"]) for r in data.get("reasons", [])),
        since_seconds=float(data["since"]), updated_seconds=float(data["updated"]),
        scores=Scores(**{f.name: scores.get(f.name) for f in dataclasses.fields(Scores)}),
        manual=manual, proposed=Verdict(data["proposed"]) if data.get("proposed") else None)
