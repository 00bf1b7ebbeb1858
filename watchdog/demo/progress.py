"""What the demo tells its viewer while it runs: the alerts the scenario expects, progress while it waits,
each expected alert ticked off when it fires, and a last word on what did and did not fire. Pure.

Contract: :class:`DemoProgress` is fed after every tick (``update(now, firing, pending)`` with alert
names) and returns the lines to print (none most ticks): a waiting line every ``every_seconds`` until
every expected alert has fired, one ``✓`` line per expected alert when it first fires, one line per alert
the scenario also causes (``also``, no time bound) and one per unexpected alert when it first fires.
:meth:`summary` is the closing line. :class:`FiredHistory` keeps each alert that fired since the start,
once, from the agent's alerts after every tick.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from watchdog.model import Alert, AlertState


@dataclass
class FiredHistory:
    """Each alert that fired since the start, once (its first firing), in order."""

    alerts: list[Alert] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)  # the fingerprints in ``alerts``

    def note(self, alerts: Iterable[Alert]) -> None:
        """Add the alerts of one tick that fire for the first time."""
        for alert in alerts:
            if alert.state is AlertState.FIRING and alert.fingerprint not in self._seen:
                self._seen.add(alert.fingerprint)
                self.alerts.append(alert)


@dataclass
class DemoProgress:
    """See the module docstring. Times are seconds (any origin, the same for ``start`` and ``now``)."""

    expected: tuple[str, ...]
    within_seconds: float
    start: float
    every_seconds: float = 5.0
    also: tuple[str, ...] = ()
    fired_at: dict[str, float] = field(default_factory=dict)
    _last_note: float = 0.0

    def opening(self) -> str:
        """The line printed before the first tick."""
        if not self.expected and not self.also:
            return "this scenario expects no alert: a quiet node"
        text = f"expecting within {self.within_seconds:.0f}s: {', '.join(self.expected) or 'none'}"
        return text + (f"; along the way: {', '.join(self.also)}" if self.also else "")

    def update(self, now: float, firing: Iterable[str], pending: Iterable[str] = ()) -> list[str]:
        """Lines to print after the tick at ``now``."""
        elapsed = now - self.start
        lines = []
        for name in sorted(set(firing)):
            if name in self.fired_at:
                continue
            self.fired_at[name] = elapsed
            if name in self.expected:
                done = sum(1 for n in self.expected if n in self.fired_at)
                lines.append(f"  ✓ {name} fired after {elapsed:.0f}s ({done}/{len(self.expected)} expected)")
            elif name in self.also:
                lines.append(f"  ✓ {name} fired after {elapsed:.0f}s (expected along the way)")
            else:
                lines.append(f"  • {name} fired after {elapsed:.0f}s (not in the scenario's expectations)")
        waiting = [n for n in self.expected if n not in self.fired_at]
        if waiting and elapsed - self._last_note >= self.every_seconds:
            self._last_note = elapsed
            building = sorted(set(pending) & set(waiting))
            note = f"; pending: {', '.join(building)}" if building else ""
            lines.append(f"  … {elapsed:.0f}s, waiting for {', '.join(waiting)}{note}")
        return lines

    def summary(self) -> str:
        """The closing line: expected alerts ticked or crossed, and the others that fired."""
        marks = [f"✓ {n}" if n in self.fired_at else f"✗ {n} (did not fire)" for n in self.expected]
        along = [f"✓ {n}" if n in self.fired_at else f"✗ {n} (not yet)" for n in self.also]
        others = sorted(n for n in self.fired_at if n not in self.expected and n not in self.also)
        text = "demo finished: " + (", ".join(marks) if marks else "no alert expected")
        text += f"; along the way: {', '.join(along)}" if along else ""
        return text + (f"; not expected: {', '.join(others)}" if others else "")
