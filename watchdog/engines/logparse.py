"""Engine log lines that metrics cannot say: CUDA out-of-memory, NCCL watchdog timeouts, CUDA errors, crashes.

:func:`parse_engine_log_line` classifies one line of a vLLM or SGLang log (any prefix: journald,
``(EngineCore_DP0 pid=..)``, ``[rank0]:[E...]``, ``[2025-.. TP2]``, container timestamps) into an
:class:`EngineLogEvent` of one :data:`KINDS`, or None:

- ``cuda_oom``: ``torch.OutOfMemoryError`` / ``torch.cuda.OutOfMemoryError: CUDA out of memory``, or
  ``CUDA error: out of memory``; ``detail`` is the allocation that failed (``Tried to allocate 2.00 MiB``);
- ``nccl_timeout``: PyTorch's ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=N,
  OpType=OP, ...)`` with ``rank``, ``collective`` (the OpType) and ``seq`` (SeqNum);
- ``cuda_error``: ``CUDA error: <reason>`` other than out of memory (illegal memory access, ECC error, ...);
  ``detail`` is the reason;
- ``engine_dead``: the engine's own crash report (vLLM ``EngineDeadError`` / ``AsyncEngineDeadError``,
  a dead worker process, SGLang ``Scheduler hit an exception``); ``detail`` is the short reason.

Every matching line counts, so one failure logged by eight ranks counts eight times (each names its rank).
Pure: text in, data out. Fixtures with their sources: tests/fixtures/engine_logs/SOURCES.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KINDS = ("cuda_oom", "nccl_timeout", "cuda_error", "engine_dead")

_OOM = re.compile(r"(?:OutOfMemoryError: CUDA out of memory|CUDA error: out of memory)\.?\s*(?P<detail>Tried to "
                  r"allocate [0-9.]+ [KMGT]?i?B)?")
_NCCL = re.compile(r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: "
                   r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>[A-Z_]+)")
_CUDA = re.compile(r"CUDA error: (?P<reason>[a-z][a-z ,'-]*[a-z])")
_DEAD = re.compile(
    r"(?P<reason>EngineDeadError: [^.\n]*|AsyncEngineDeadError: [^.\n]*|Scheduler hit an exception"
    r"|Worker \S+ pid \d+ died, exit code: -?\d+)")
_WRAPPER = re.compile(r"Process group watchdog thread terminated with exception")


@dataclass(frozen=True)
class EngineLogEvent:
    """One classified log line. ``rank``/``collective``/``seq`` only for ``nccl_timeout``."""

    kind: str
    detail: str = ""
    rank: str = ""
    collective: str = ""
    seq: str = ""


def parse_engine_log_line(line: str) -> EngineLogEvent | None:
    """The event this line reports, or None (see the module docstring)."""
    nccl = _NCCL.search(line)
    if nccl is not None:
        if _WRAPPER.search(line):  # the same timeout re-raised by the watchdog thread: not a new one
            return None
        return EngineLogEvent("nccl_timeout", rank=nccl["rank"], collective=nccl["op"], seq=nccl["seq"])
    oom = _OOM.search(line)
    if oom is not None:
        return EngineLogEvent("cuda_oom", detail=oom["detail"] or "")
    cuda = _CUDA.search(line)
    if cuda is not None:
        return EngineLogEvent("cuda_error", detail=cuda["reason"])
    dead = _DEAD.search(line)
    if dead is not None:
        return EngineLogEvent("engine_dead", detail=dead["reason"].strip())
    return None
