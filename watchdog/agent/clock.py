"""The tick's timestamp: the wall clock, never going back.

:class:`TickClock` promises tick times that only move forward. When the wall clock steps back behind the
previous tick, tick time continues on the monotonic clock until the wall clock catches up: a backward step
would otherwise drop every sample as out of order and let instant selectors see nothing (false resolves).
Each step is logged once and counted in ``TickStats.clock_steps_total`` (``watchdog_clock_steps_total``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from watchdog.agent.self_metrics import TickStats

log = logging.getLogger(__name__)


class TickClock:
    """Tick times in milliseconds from ``wall`` (seconds), kept monotonic across backward steps."""

    def __init__(self, wall: Callable[[], float], stats: TickStats) -> None:
        self.wall = wall
        self.stats = stats
        self._last: tuple[int, float] | None = None  # (tick time ms, monotonic seconds)
        self._stepped = False

    def time_ms(self, monotonic_now: float) -> int:
        """The tick's timestamp at ``monotonic_now`` (see the module docstring)."""
        wall_ms = int(self.wall() * 1000)
        last = self._last
        if last is None or wall_ms >= last[0]:
            if self._stepped:
                log.info("wall clock caught up with the tick time", extra={"wall_ms": wall_ms})
                self._stepped = False
            self._last = (wall_ms, monotonic_now)
            return wall_ms
        tick_ms = max(last[0] + int((monotonic_now - last[1]) * 1000), last[0] + 1)
        if not self._stepped:
            self._stepped = True
            self.stats.clock_steps_total += 1
            log.warning("wall clock stepped backwards; tick time continues on the monotonic clock",
                        extra={"step_seconds": round((wall_ms - last[0]) / 1000, 3)})
        self._last = (tick_ms, monotonic_now)
        return tick_ms
