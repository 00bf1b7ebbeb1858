"""A :class:`watchdog.serving.model.VerdictSource` a test sets by hand: the balancer interfaces' tests flip
verdicts and trust and watch what HAProxy, the HTTP endpoints or the agent-check port do with them."""

from __future__ import annotations

import threading
import time

from watchdog.serving.model import EngineVerdict, Reason, Verdict

REASON_OF: dict[Verdict, Reason] = {
    Verdict.ADMIT: Reason("ok", "free KV 80 %"),
    Verdict.SHORT_ONLY: Reason("kv_free_low", "free KV 12 % < 15 %"),
    Verdict.SHED: Reason("kv_free_low", "free KV 2 % < 5 %"),
    Verdict.DRAIN: Reason("engine_wedged", "no token for 30 s with 4 running"),
    Verdict.DOWN: Reason("not_answering", "metrics endpoint refused"),
    Verdict.UNKNOWN: Reason("stale_data", "no reading for 20 s"),
}


class SettableVerdicts:
    """Verdicts of the given jobs, all ``admit`` at 100 % to begin with; thread-safe."""

    def __init__(self, jobs: list[str]) -> None:
        self._lock = threading.Lock()
        self._trusted = True
        now = time.time()
        self._verdicts = {job: EngineVerdict(job, f"127.0.0.1:{8000 + i}", Verdict.ADMIT, 100,
                                             (REASON_OF[Verdict.ADMIT],), now, now)
                          for i, job in enumerate(jobs)}

    def set(self, job: str, verdict: Verdict, weight_percent: int | None = None,
            reasons: tuple[Reason, ...] | None = None) -> None:
        """Give ``job`` a new verdict now (weight 100 unless given, 0 for shed/drain/down)."""
        if weight_percent is None:
            weight_percent = 0 if verdict in (Verdict.SHED, Verdict.DRAIN, Verdict.DOWN) else 100
        now = time.time()
        with self._lock:
            old = self._verdicts[job]
            self._verdicts[job] = EngineVerdict(
                job, old.instance, verdict, weight_percent,
                reasons if reasons is not None else (REASON_OF[verdict],),
                old.since_seconds if old.verdict is verdict else now, now)

    def set_trusted(self, trusted: bool) -> None:
        """Say whether the agent is healthy enough to be believed."""
        with self._lock:
            self._trusted = trusted

    def verdicts(self) -> list[EngineVerdict]:
        with self._lock:
            return [self._verdicts[job] for job in sorted(self._verdicts)]

    def verdict(self, job: str) -> EngineVerdict | None:
        with self._lock:
            return self._verdicts.get(job)

    def trusted(self) -> bool:
        with self._lock:
            return self._trusted
