"""A time budget in CPU seconds of the evaluating thread, cheap to check at every node.

Contract: :meth:`CpuBudget.spent` is True once the thread that created the budget has used ``seconds``
of CPU time since then. A starved thread (waiting for a core) does not spend it: the rule engine's time
budget guards against runaway rules, and a rule that is slow only because the host's cores are busy
should finish, not leave a gap in its output. The wall clock is read first (CPU time never runs ahead
of it), so the thread's CPU clock, a system call, is read only when the wall-clock share has run out.
"""

from __future__ import annotations

import time


class CpuBudget:
    """``seconds`` of the current thread's CPU time from now (see the module docstring)."""

    __slots__ = ("_cpu_start", "seconds", "wall_deadline")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._cpu_start = time.thread_time()
        self.wall_deadline = time.monotonic() + seconds
        """Before this ``time.monotonic()`` instant the budget cannot be spent."""

    def spent(self) -> bool:
        """Whether the budget is used up; if not, :attr:`wall_deadline` moves to the earliest instant
        it could be."""
        now = time.monotonic()
        if now <= self.wall_deadline:
            return False
        left = self.seconds - (time.thread_time() - self._cpu_start)
        if left <= 0:
            return True
        self.wall_deadline = now + left
        return False
