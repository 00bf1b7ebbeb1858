"""Give freed heap memory back to the kernel: glibc's ``malloc_trim(0)``, where there is one.

The agent frees most of what it allocates within a tick (parsed pages, evaluation results), and glibc
keeps freed blocks for reuse; over hours the kept part drifts up although what Python holds is flat
(docs/performance.md, "Memory (third pass)": 0.3 ms a call, RSS about 1-1.5 MB lower and under 80 MB at
8 GPUs x 8 engines). Contract: :func:`heap_trimmer` returns a callable that trims and returns whether
memory was released, or ``None`` where the C library has no ``malloc_trim`` (musl, macOS, no libc found);
it never raises.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


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
