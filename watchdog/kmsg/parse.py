"""Kernel-log lines → GPU and OOM events: the pure parser (no I/O).

Contract:
- :func:`parse_line` recognises one line (or one ``/dev/kmsg`` record, whose embedded newlines arrive as
  ``\\x0a``) and returns a :class:`KernelEvent` or ``None``. Recognised, whatever the prefix (raw
  ``/dev/kmsg`` ``prio,seq,usec,flags;``, ``dmesg`` ``[ 12.345]``, ``dmesg -T``, syslog ``host kernel:``,
  journald, Talos...), because matching is anchored on the message itself (``NVRM:``, ``SXid``,
  ``Killed process``, ``oom-kill:``), never on the prefix:
  ``NVRM: Xid`` lines of every driver generation (with or without ``pid=``/``name=``, ``pid='<unknown>'``,
  NVLink5 144–150 ``UNIT Fatal|Nonfatal XC0 i0 Link N (...)``, Xid 154 recovery-action changes, trailing
  ``caused by previous Xid N``), ``GPU has fallen off the bus`` without an Xid (kind ``fallen_off_bus``,
  xid 79), NVSwitch ``SXid`` lines, and OOM-killer victims (``Killed process N (name)``,
  ``oom-kill:...,task=name,pid=N``).
- :class:`KernelLogParser` feeds lines in order and adds what needs context: the multi-line
  ``The NVIDIA GPU ... has fallen off the bus`` message split over several lines, the PCI → UUID map
  from ``NVRM: GPU at PCI:...: GPU-<uuid>`` lines, and de-duplication of one incident reported twice:
  an ``oom-kill:`` summary and its ``Killed process`` line (same pid), an ``Xid 79`` and its
  ``GPU has fallen off the bus`` line (same GPU), and NVSwitch ``SXid`` detail lines (``Severity N
  Engine instance``, ``Data {...}``) after their primary line. ``caused by previous Xid N`` is recorded on
  the event (:attr:`KernelEvent.caused_by`) and never counted as a second Xid N.
- Severity and action come from the XID catalogue, refined by what the line itself says (NVLink5
  Fatal/Nonfatal, the Xid 154 target action, SXid Fatal/Non-fatal).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from watchdog.kmsg.pci import find_pci_bus_id, normalize_pci_bus_id
from watchdog.xid.catalogue import UNKNOWN_ACTION, UNKNOWN_SEVERITY, Catalogue, default_catalogue

KINDS: tuple[str, ...] = ("xid", "sxid", "fallen_off_bus", "oom_kill")
FALLEN_OFF_BUS_XID = 79
OOM_SEVERITY, OOM_ACTION = "critical", "restart_app"
# How far apart (in lines) two reports of one incident may be and still be merged.
DEDUPE_WINDOW_LINES = 20
# NVSwitch detail lines of one SXid can trail their primary line by more (several links report at once).
SXID_DETAIL_WINDOW_LINES = 100
# How many lines a multi-line "The NVIDIA GPU ..." message may span.
MULTILINE_SPAN_LINES = 4

_ANCHORS = ("NVRM", "SXid", "Killed process", "oom-kill:")

_KMSG_RECORD = re.compile(r"^\s*(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<text>.*)$", re.DOTALL)
_KMSG_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

_XID = re.compile(r"NVRM: Xid\s*\((?P<dev>[^)]*)\):?\s*(?P<code>\d+)(?P<rest>.*)", re.DOTALL)
_PID_NAME = re.compile(
    r"^,\s*pid=(?P<pid>'?<unknown>'?|'?\d+'?)(?:,\s*name=(?P<name>[^,]*?))?\s*(?:,\s*|$)"
)
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)", re.IGNORECASE)
_NVLINK5 = re.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]*(?:/[A-Z0-9_]+)?)\s+(?P<sev>Fatal|Non-?fatal)\b"
    r"(?:\s+(?P<xc>XC\d+))?(?:\s+(?P<inj>i\d+))?(?:\s+Link\s+(?P<link>-?\d+))?",
    re.IGNORECASE,
)
_RECOVERY = re.compile(
    r"recovery action changed(?: from (?P<from_code>0x[0-9a-fA-F]+)\s*\((?P<from_name>[^)]*)\))?"
    r"\s+to\s+(?:(?P<to_code>0x[0-9a-fA-F]+)\s*)?\(?(?P<to_name>[A-Za-z0-9 ]+?)\)?\s*\.?\s*$",
    re.IGNORECASE,
)
_SXID = re.compile(
    r"(?:(?P<switch>nvidia-nvswitch\d+):\s*)?SXid\s*\((?P<dev>[^)]*)\):?\s*(?P<code>\d+)\s*,?\s*(?P<rest>.*)",
    re.DOTALL,
)
_SXID_DETAIL = re.compile(r"^(?:Severity\s+\d+\s+Engine instance|Data\s*\{)", re.IGNORECASE)
_GPU_IDENTITY = re.compile(
    r"NVRM: GPU at (?:PCI:)?(?P<dev>[^\s:]+:[^\s:]+:[^\s:]+?):\s*(?P<uuid>GPU-[0-9A-Za-z-]+)"
)
_UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_FALLEN = re.compile(r"fallen off the bus", re.IGNORECASE)
_MULTILINE_START = re.compile(r"NVRM: The NVIDIA GPU\b")
_OOM_KILLED = re.compile(
    r"(?:(?:Memory cgroup out of memory|Out of memory(?: \([^)]*\))?):\s*)?Killed process (?P<pid>\d+) "
    r"\((?P<name>[^)]*)\)"
)
_OOM_SUMMARY = re.compile(r"oom-kill:.*?\btask=(?P<name>[^,]*),\s*pid=(?P<pid>\d+)")

# Xid 154 target actions: NVIDIA's recovery-action values and names → our severity and action.
_RECOVERY_BY_CODE: dict[int, tuple[str, str]] = {
    0: ("info", "none"),
    1: ("critical", "reset_gpu"),
    2: ("fatal", "reboot_system"),
    3: ("critical", "reset_gpu"),
    4: ("critical", "reset_gpu"),
}
_RECOVERY_BY_NAME: tuple[tuple[str, tuple[str, str]], ...] = (
    ("reboot", ("fatal", "reboot_system")),
    ("drain and reset", ("critical", "reset_gpu")),
    ("drain p2p", ("critical", "reset_gpu")),
    ("reset", ("critical", "reset_gpu")),
    ("none", ("info", "none")),
)


@dataclass(frozen=True)
class KernelEvent:
    """One GPU/NVSwitch/OOM incident read from the kernel log.

    ``xid`` holds the Xid (79 for ``fallen_off_bus``), the SXid for ``sxid`` events, ``None`` for OOM kills.
    ``line`` is 1-based in the input. ``details`` carries what some lines add (NVLink unit, link and
    severity word; the Xid 154 target action; the NVSwitch device) as sorted (key, value) pairs.
    """

    kind: str
    xid: int | None
    pci_bus_id: str | None
    pid: int | None
    process: str | None
    message: str
    severity: str
    action: str
    line: int
    uuid: str | None = None
    caused_by: int | None = None
    details: tuple[tuple[str, str], ...] = field(default=())
    seq: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The object ``kmsg parse --json`` prints (exactly these keys, in this order)."""
        return {
            "kind": self.kind,
            "xid": self.xid,
            "pci_bus_id": self.pci_bus_id,
            "pid": self.pid,
            "process": self.process,
            "message": self.message,
            "severity": self.severity,
            "action": self.action,
            "line": self.line,
        }

    def detail(self, key: str) -> str | None:
        """One value of :attr:`details`, or ``None``."""
        for name, value in self.details:
            if name == key:
                return value
        return None


def _unwrap(text: str) -> str:
    """The kernel message inside a ``journalctl -o json`` line; ANSI colours (``dmesg --color``) removed."""
    if "\x1b[" in text:
        text = _ANSI.sub("", text)
    stripped = text.lstrip()
    if stripped.startswith("{") and '"MESSAGE"' in stripped:
        try:
            record = json.loads(stripped)
        except ValueError:
            return text
        message = record.get("MESSAGE") if isinstance(record, dict) else None
        if isinstance(message, list):  # journald's form for messages that are not valid UTF-8
            message = bytes(int(b) & 0xFF for b in message).decode("utf-8", "replace")
        if isinstance(message, str):
            return message
    return text


def split_kmsg_record(text: str) -> tuple[int | None, str]:
    """``(seq, message)`` of a raw ``/dev/kmsg`` record, ``\\xNN`` escapes decoded; else ``(None, text)``."""
    match = _KMSG_RECORD.match(text)
    if not match:
        return None, text
    body = match.group("text")
    # Dictionary lines (" SUBSYSTEM=pci") follow the message in a record; they are not part of it.
    body = body.split("\n ", 1)[0].rstrip("\n")
    return int(match.group("seq")), _KMSG_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), body)


def _clean_message(text: str) -> str:
    """The message as logged; a multi-line one joined into one line without its repeated ``NVRM:`` tags."""
    text = text.replace("\r", "")
    if "\n" not in text:
        return text.strip()
    parts = [part.strip() for part in text.split("\n")]
    parts = [part for part in parts if part]
    joined = parts[:1]
    for part in parts[1:]:
        anchor = part.find("NVRM:")
        if anchor >= 0:
            part = part[anchor + len("NVRM:"):].strip()
        joined.append(part)
    return " ".join(joined)


def _nullable_name(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip().strip("'")
    return None if not value or value == "<unknown>" else value


def _nullable_pid(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip("'")
    return int(value) if value.isdigit() else None


def _recovery_target(detail: str) -> tuple[str, str, str] | None:
    """Xid 154: (severity, action, target name) of the recovery action the GPU now requires."""
    match = _RECOVERY.search(detail)
    if not match:
        return None
    name = (match.group("to_name") or "").strip()
    if match.group("to_code"):
        code = int(match.group("to_code"), 16)
        if code in _RECOVERY_BY_CODE:
            return (*_RECOVERY_BY_CODE[code], name)
    lowered = name.lower()
    for needle, result in _RECOVERY_BY_NAME:
        if needle in lowered:
            return (*result, name)
    return None


def _parse_xid(match: re.Match[str], message: str, line_no: int, catalogue: Catalogue) -> KernelEvent:
    code = int(match.group("code"))
    rest = match.group("rest")
    pid: int | None = None
    process: str | None = None
    pid_match = _PID_NAME.match(rest)
    if pid_match:
        pid = _nullable_pid(pid_match.group("pid"))
        process = _nullable_name(pid_match.group("name"))
        detail = rest[pid_match.end():]
    else:
        detail = rest.lstrip(", ")
    detail = _clean_message(detail)

    entry = catalogue.xid(code)
    severity, action = (entry.severity, entry.action) if entry else (UNKNOWN_SEVERITY, UNKNOWN_ACTION)
    details: dict[str, str] = {}

    nvlink = _NVLINK5.match(detail) if 144 <= code <= 150 else None
    if nvlink:
        fatal = nvlink.group("sev").lower() == "fatal"
        severity, action = ("critical", "reset_gpu") if fatal else ("warning", "none")
        details["nvlink_unit"] = nvlink.group("unit")
        details["nvlink_severity"] = "fatal" if fatal else "nonfatal"
        if nvlink.group("link") is not None:
            details["link"] = str(int(nvlink.group("link")))

    if code == 154:
        target = _recovery_target(detail)
        if target:
            severity, action, name = target
            details["recovery_action"] = name

    caused_by: int | None = None
    cause = _CAUSED_BY.search(detail)
    if cause:
        caused_by = int(cause.group(1))
        action = "none"  # follow the Xid that caused it; that one carries the action

    device, *device_extra = match.group("dev").split() or [""]
    if device_extra:  # e.g. MIG instance ids after the bus id
        details["device_extra"] = " ".join(device_extra)

    return KernelEvent(
        kind="xid",
        xid=code,
        pci_bus_id=normalize_pci_bus_id(device),
        pid=pid,
        process=process,
        message=message,
        severity=severity,
        action=action,
        line=line_no,
        caused_by=caused_by,
        details=tuple(sorted(details.items())),
    )


def sxid_is_detail(event: KernelEvent) -> bool:
    """True for the NVSwitch lines that only add detail to a preceding SXid (``Severity N``, ``Data {``)."""
    return event.kind == "sxid" and event.detail("sxid_line") == "detail"


def _parse_sxid(match: re.Match[str], message: str, line_no: int, catalogue: Catalogue) -> KernelEvent:
    code = int(match.group("code"))
    rest = _clean_message(match.group("rest"))
    entry = catalogue.sxid(code)
    lowered = rest.lower()
    details: dict[str, str] = {}
    if match.group("switch"):
        details["nvswitch"] = match.group("switch")
    if lowered.startswith("fatal"):
        severity, action, kind = "critical", "reboot_system", "primary"
    elif lowered.startswith(("non-fatal", "nonfatal")):
        severity, action, kind = "warning", "none", "primary"
    else:
        severity, action = (entry.severity, entry.action) if entry else ("warning", "none")
        kind = "detail" if _SXID_DETAIL.match(rest) else "primary"
    details["sxid_line"] = kind
    return KernelEvent(
        kind="sxid",
        xid=code,
        pci_bus_id=normalize_pci_bus_id(match.group("dev")),
        pid=None,
        process=None,
        message=message,
        severity=severity,
        action=action,
        line=line_no,
        details=tuple(sorted(details.items())),
    )


def _fallen_off_bus(message: str, line_no: int, catalogue: Catalogue) -> KernelEvent:
    entry = catalogue.xid(FALLEN_OFF_BUS_XID)
    severity, action = (entry.severity, entry.action) if entry else ("fatal", "reboot_system")
    return KernelEvent(
        kind="fallen_off_bus",
        xid=FALLEN_OFF_BUS_XID,
        pci_bus_id=find_pci_bus_id(message),
        pid=None,
        process=None,
        message=message,
        severity=severity,
        action=action,
        line=line_no,
    )


def _from(text: str, anchor_index: int) -> str:
    return _clean_message(text[anchor_index:])


def parse_line(text: str, line_no: int, catalogue: Catalogue | None = None) -> KernelEvent | None:
    """The event one kernel-log line (or ``/dev/kmsg`` record) reports, or ``None``. Pure."""
    if text.startswith("{"):
        text = _unwrap(text)
    if not any(anchor in text for anchor in _ANCHORS):
        return None
    seq, text = split_kmsg_record(_unwrap(text))
    cat = catalogue or default_catalogue()
    event = _parse_text(text, line_no, cat)
    if event is not None and seq is not None:
        event = replace(event, seq=seq)
    return event


def _parse_text(text: str, line_no: int, cat: Catalogue) -> KernelEvent | None:
    match = _XID.search(text)
    if match:
        return _parse_xid(match, _from(text, match.start()), line_no, cat)
    match = _SXID.search(text)
    if match:
        return _parse_sxid(match, _from(text, match.start()), line_no, cat)
    nvrm = text.find("NVRM:")
    if nvrm >= 0 and _FALLEN.search(text, nvrm):
        return _fallen_off_bus(_from(text, nvrm), line_no, cat)
    match = _OOM_KILLED.search(text)
    if match:
        return KernelEvent(
            kind="oom_kill", xid=None, pci_bus_id=None, pid=int(match.group("pid")),
            process=_nullable_name(match.group("name")), message=_from(text, match.start()),
            severity=OOM_SEVERITY, action=OOM_ACTION, line=line_no,
        )
    match = _OOM_SUMMARY.search(text)
    if match:
        return KernelEvent(
            kind="oom_kill", xid=None, pci_bus_id=None, pid=int(match.group("pid")),
            process=_nullable_name(match.group("name")), message=_from(text, match.start()),
            severity=OOM_SEVERITY, action=OOM_ACTION, line=line_no,
        )
    return None


def parse_gpu_identity(text: str) -> tuple[str, str] | None:
    """``(pci_bus_id, uuid)`` from ``NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>``; ``None`` if absent."""
    if "NVRM: GPU at" not in text:
        return None
    match = _GPU_IDENTITY.search(split_kmsg_record(text)[1])
    if not match:
        return None
    pci = normalize_pci_bus_id(match.group("dev"))
    uuid = match.group("uuid")
    if pci is None or not _UUID.match(uuid):
        return None
    return pci, uuid.lower().replace("gpu-", "GPU-", 1)


_Key = TypeVar("_Key")


def _recent_only(seen: dict[_Key, int], horizon: int, keep: int = 256) -> dict[_Key, int]:
    """``seen`` without entries older than ``horizon`` once it holds more than ``keep`` of them."""
    if len(seen) <= keep:
        return seen
    return {key: line for key, line in seen.items() if line >= horizon}


@dataclass
class _PendingMultiline:
    line: int
    parts: list[str]


class KernelLogParser:
    """Feeds lines in order; adds multi-line messages, the PCI → UUID map and de-duplication.

    Not thread-safe; one parser per stream. ``uuid_by_pci`` is the map learnt from the log.
    """

    def __init__(self, catalogue: Catalogue | None = None) -> None:
        self.catalogue = catalogue or default_catalogue()
        self.uuid_by_pci: dict[str, str] = {}
        self._pending: _PendingMultiline | None = None
        self._recent_lost: dict[str, int] = {}
        self._recent_oom: dict[int, int] = {}
        self._recent_sxid: dict[tuple[str | None, int], int] = {}

    def feed(self, text: str, line_no: int) -> list[KernelEvent]:
        """Events completed by this line (usually zero or one)."""
        if self._pending is not None and line_no - self._pending.line > MULTILINE_SPAN_LINES:
            self._pending = None
        if text.startswith("{"):
            text = _unwrap(text)
        if not any(anchor in text for anchor in _ANCHORS):
            return []
        text = _unwrap(text)
        identity = parse_gpu_identity(text)
        if identity is not None:
            self.uuid_by_pci[identity[0]] = identity[1]
            return []
        seq, body = split_kmsg_record(text)
        event = _parse_text(body, line_no, self.catalogue)
        if event is None:
            return self._continue_multiline(body, line_no)
        if event.kind == "fallen_off_bus" and event.pci_bus_id is None and self._pending is not None:
            event = self._complete_multiline(event.message, seq)
        elif event.kind == "fallen_off_bus":
            self._pending = None
        if seq is not None and event.seq is None:
            event = replace(event, seq=seq)
        return self._emit(event)

    def _continue_multiline(self, body: str, line_no: int) -> list[KernelEvent]:
        start = _MULTILINE_START.search(body)
        if start:
            self._pending = _PendingMultiline(line_no, [_from(body, start.start())])
            return []
        if self._pending is not None:
            anchor = body.find("NVRM:")
            if anchor >= 0:
                self._pending.parts.append(_from(body, anchor))
        return []

    def _complete_multiline(self, last_part: str, seq: int | None) -> KernelEvent:
        assert self._pending is not None
        message = _clean_message("\n".join([*self._pending.parts, last_part]))
        event = replace(_fallen_off_bus(message, self._pending.line, self.catalogue), seq=seq)
        self._pending = None
        return event

    def _emit(self, event: KernelEvent) -> list[KernelEvent]:
        if event.pci_bus_id and event.pci_bus_id in self.uuid_by_pci and event.kind != "sxid":
            event = replace(event, uuid=self.uuid_by_pci[event.pci_bus_id])
        if self._is_duplicate(event):
            return []
        return [event]

    def _forget_old(self, line: int) -> None:
        """Drop incidents too old to be repeated (a follower runs for months: memory stays bounded)."""
        horizon = line - SXID_DETAIL_WINDOW_LINES
        self._recent_oom = _recent_only(self._recent_oom, horizon)
        self._recent_lost = _recent_only(self._recent_lost, horizon)
        self._recent_sxid = _recent_only(self._recent_sxid, horizon)

    def _is_duplicate(self, event: KernelEvent) -> bool:
        """Records the event and says whether it repeats an incident already emitted."""
        line = event.line
        self._forget_old(line)
        if event.kind == "oom_kill" and event.pid is not None:
            previous = self._recent_oom.get(event.pid)
            self._recent_oom[event.pid] = line
            return previous is not None and line - previous <= DEDUPE_WINDOW_LINES
        pci = event.pci_bus_id
        if event.xid == FALLEN_OFF_BUS_XID and event.kind in ("xid", "fallen_off_bus") and pci:
            # One GPU falling off the bus is often logged twice or three times (Xid 79, then the
            # "GPU has fallen off the bus" line, sometimes the multi-line form too): one incident.
            previous = self._recent_lost.get(pci)
            self._recent_lost[pci] = line
            return previous is not None and line - previous <= DEDUPE_WINDOW_LINES
        if event.kind == "sxid" and event.xid is not None:
            key = (pci, event.xid)
            if sxid_is_detail(event):
                primary = self._recent_sxid.get(key)
                return primary is not None and line - primary <= SXID_DETAIL_WINDOW_LINES
            self._recent_sxid[key] = line
        return False

    def finish(self) -> list[KernelEvent]:
        """End of input: an unfinished multi-line message is dropped (it never said 'fallen off')."""
        self._pending = None
        return []


def parse_lines(lines: Iterable[str], catalogue: Catalogue | None = None) -> Iterator[KernelEvent]:
    """Every event in a sequence of lines, in order, with line numbers starting at 1."""
    parser = KernelLogParser(catalogue)
    for number, raw in enumerate(lines, start=1):
        yield from parser.feed(raw.rstrip("\r\n"), number)
    yield from parser.finish()


def parse_text(text: str, catalogue: Catalogue | None = None) -> list[KernelEvent]:
    """Every event in a block of kernel-log text."""
    return list(parse_lines(text.splitlines(), catalogue))
