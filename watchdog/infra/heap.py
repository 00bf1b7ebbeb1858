"""The daemon's memory housekeeping: glibc's ``malloc_trim(0)``, where there is one, and the cyclic
garbage collector's thresholds.

The agent frees most of what it allocates within a tick (parsed pages, evaluation results), and glibc
keeps freed blocks for reuse; over hours the kept part drifts up although what Python holds is flat
(docs/performance.md, "Memory": 0.3 ms a call, RSS about 1-1.5 MB lower and under 80 MB at
8 GPUs x 8 engines). Contract: :func:`heap_trimmer` returns a callable that trims and returns whether
memory was released, or ``None`` where the C library has no ``malloc_trim`` (musl, macOS, no libc found);
it never raises.

:func:`quiet_cyclic_gc` raises the cyclic collector's first threshold from CPython's 700 to
:data:`GC_THRESHOLDS`'s: a tick allocates and frees thousands of containers (parsed samples, label tuples,
evaluation results), freed by reference counting, yet each 700 allocations in flight start a collection
that finds nothing (2.7 collections a tick at 8 GPUs x 8 engines, about 1.9 ms of a 20 ms tick); the
agent leaves almost no cyclic garbage (14 objects in 100 ticks at that size, docs/performance.md), so
collections at 50 000 allocations in flight cost next to nothing and hold no more memory. Process-wide:
the daemon (:func:`watchdog.daemon.serve.serve`) calls it, library users and tests keep CPython's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable

GC_THRESHOLDS = (50_000, 10, 10)
"""The daemon's ``gc.set_threshold``: generation 0 at 50 000 allocations in flight (CPython: 700); the
older generations' counts as CPython's."""


def quiet_cyclic_gc() -> None:
    """Set :data:`GC_THRESHOLDS` (process-wide; see the module docstring)."""
    gc.set_threshold(*GC_THRESHOLDS)


def heap_trimmer(library: str | None = None) -> Callable[[], bool] | None:
    """``malloc_trim(0)`` of ``library`` (default: the process's C library), or ``None`` without one."""
    name = library if library is not None else ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: bool(trim(0))
