"""APScheduler drives the agent's tick at a fixed interval.

Contract: one tick at a time (``max_instances=1``); a tick that is due while the previous one still runs
is not queued: it is counted as an overrun (``watchdog_tick_overruns_total``) and logged, never silently
dropped. A hung collector cannot wedge the loop because the collector runner bounds every collector.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

log = logging.getLogger("watchdog.scheduler")  # the name its log lines have always had

TICK_JOB_ID = "tick"


class TickScheduler:
    """Runs ``agent.tick`` every ``interval_seconds`` until :meth:`stop`."""

    def __init__(self, agent: Any, interval_seconds: float) -> None:
        self.agent = agent
        self.interval_seconds = interval_seconds
        self._scheduler = BackgroundScheduler(daemon=True, job_defaults={"max_instances": 1, "coalesce": True})
        self._scheduler.add_listener(self._on_event, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_MISSED | EVENT_JOB_ERROR)
        self.stopped = threading.Event()

    def _on_event(self, event: JobExecutionEvent) -> None:
        if event.code in (EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED):
            self.agent.note_overrun()
        elif event.code == EVENT_JOB_ERROR:
            log.error("tick raised", extra={"error": repr(event.exception)})

    def start(self) -> None:
        """Run one tick now, then every interval."""
        self._scheduler.start()
        self._scheduler.add_job(
            self.agent.tick,
            IntervalTrigger(seconds=self.interval_seconds),
            id=TICK_JOB_ID,
            misfire_grace_time=max(1, int(self.interval_seconds)),
            next_run_time=datetime.now(self._scheduler.timezone),
        )

    def set_interval(self, interval_seconds: float) -> None:
        """Tick every ``interval_seconds`` from now on (a reload that changed ``tick_interval_seconds``)."""
        if interval_seconds == self.interval_seconds:
            return
        self.interval_seconds = interval_seconds
        if self._scheduler.running:
            self._scheduler.reschedule_job(TICK_JOB_ID, trigger=IntervalTrigger(seconds=interval_seconds))
        log.info("tick interval changed", extra={"tick_interval_seconds": interval_seconds})

    def stop(self, wait: bool = True) -> None:
        """Stop scheduling; with ``wait`` the tick in progress finishes first."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)
        self.stopped.set()
