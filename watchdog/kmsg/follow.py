"""Reading the kernel log: ``/dev/kmsg``, journald, or a file followed like ``tail -F``. No parsing here.

Contract shared by every reader (:class:`LogSource`):
- :meth:`read` returns the complete lines that appeared since the previous call (at most ``max_bytes``
  worth per call; the rest comes next time) and never blocks.
- :meth:`cursor` is a JSON-able position *after the lines returned so far*. A reader built with that
  cursor after a restart neither re-reads those lines nor skips lines logged while the agent was down.
  The caller persists the cursor in the same transaction as what it derived from the lines.

Readers:
- :class:`KmsgReader`: ``/dev/kmsg`` opened non-blocking. Every record carries a sequence number; the
  cursor is ``(boot_id, seq)`` and records with ``seq <= cursor`` of the same boot are skipped (the ring
  buffer is read from its start on open). A new boot starts over (sequence numbers restart at 0). Records
  overwritten before we read them are counted in :attr:`KmsgReader.lost_records`.
- :class:`JournalReader`: ``journalctl -k -o short-precise --cursor-file F`` run on each poll; journald
  keeps the position in ``F`` (written when the command exits, so a crash of the agent loses nothing).
  Polling rather than ``-f`` because a ``-f`` process writes its cursor only when it exits cleanly.
- :class:`FileFollower`: a plain file followed like ``tail -F``: survives rotation (rename + new file:
  the rest of the old file is read first) and truncation (copytruncate: restart at 0); a partial last
  line is buffered until its newline. The cursor is ``(inode, offset)`` of the last complete line.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
MAX_LINE_BYTES = 16 * 1024
"""A longer line is cut; bytes with no newline in sight past it are returned as a line of their own."""
KMSG_PATH = "/dev/kmsg"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


class LogSource(Protocol):
    """A kernel-log reader: new complete lines per call, and a cursor to persist."""

    name: str

    def read(self) -> list[str]:
        """Complete lines logged since the previous call (non-blocking)."""
        ...

    def cursor(self) -> dict[str, Any]:
        """Position after the lines returned so far (JSON-able)."""
        ...

    def close(self) -> None:
        """Release the file descriptor or process."""
        ...


def read_boot_id(path: str | Path = BOOT_ID_PATH) -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``); ``"unknown"`` where there is none."""
    try:
        return Path(path).read_text(encoding="ascii").strip() or "unknown"
    except OSError:
        return "unknown"


def _decode(raw: bytes) -> str:
    """One line as text, cut to ``MAX_LINE_BYTES`` (the parser never sees an unbounded line)."""
    return raw[:MAX_LINE_BYTES].decode("utf-8", "replace").rstrip("\r")


class FileFollower:
    """Follow a plain file like ``tail -F``. See the module docstring for the cursor contract."""

    def __init__(self, path: str | Path, cursor: dict[str, Any] | None = None,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = Path(path)
        self.name = f"file:{self.path}"
        self.max_bytes = max_bytes
        self._file: Any = None
        self._inode: int | None = None
        self._offset = 0  # file offset just after the last complete line returned
        self._buffer = b""  # bytes after that offset (a partial line)
        self._missed: list[str] = []  # tail of a file rotated away while the agent was down
        self._resume = cursor if cursor and cursor.get("kind") == "file" else None

    def _open(self) -> bool:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - kept open across calls on purpose
        except FileNotFoundError:
            return False
        stat = os.fstat(handle.fileno())
        self._file, self._inode, self._offset, self._buffer = handle, stat.st_ino, 0, b""
        resume, self._resume = self._resume, None
        if resume and resume.get("inode") == stat.st_ino and int(resume.get("offset", 0)) <= stat.st_size:
            self._offset = int(resume["offset"])
            handle.seek(self._offset)
        elif resume and resume.get("inode") is not None:
            self._missed = self._rotated_remainder(int(resume["inode"]), int(resume.get("offset", 0)))
        return True

    def _rotated_remainder(self, inode: int, offset: int) -> list[str]:
        """Lines the agent missed at the end of a file rotated away while it was down (``kern.log.1``)."""
        for sibling in sorted(self.path.parent.glob(self.path.name + ".*")):
            try:
                if sibling.stat().st_ino != inode:
                    continue
                with open(sibling, "rb") as old:
                    old.seek(offset)
                    data = old.read(self.max_bytes)
            except OSError:
                continue
            return [_decode(raw) for raw in data.split(b"\n") if raw]
        return []

    def _drain(self, budget: int) -> tuple[list[str], int]:
        """Read what is there (up to ``budget`` bytes) from the open file; return lines and bytes used."""
        assert self._file is not None
        if os.fstat(self._file.fileno()).st_size < self._offset + len(self._buffer):
            self._file.seek(0)  # truncated in place (copytruncate): start over
            self._offset, self._buffer = 0, b""
        data = self._file.read(budget)
        if not data:
            return [], 0
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        for raw in complete:
            self._offset += len(raw) + 1
        if len(self._buffer) > MAX_LINE_BYTES:  # no newline in sight: the piece so far is a line
            complete.append(self._buffer)
            self._offset += len(self._buffer)
            self._buffer = b""
        return [_decode(raw) for raw in complete], len(data)

    def _rotated(self) -> bool:
        try:
            return os.stat(self.path).st_ino != self._inode
        except FileNotFoundError:
            return False  # renamed away and not yet recreated: keep reading the old one

    def read(self) -> list[str]:
        """New complete lines; follows rotation and truncation."""
        if self._file is None and not self._open():
            return []
        missed, self._missed = self._missed, []
        lines, used = self._drain(self.max_bytes)
        lines[:0] = missed
        if used < self.max_bytes and self._rotated():
            if self._buffer:  # the old file will not grow any more: its last line is complete
                lines.append(_decode(self._buffer))
            self._file.close()
            self._file = None
            if self._open():
                more, _ = self._drain(self.max_bytes - used)
                lines.extend(more)
        return lines

    def cursor(self) -> dict[str, Any]:
        """``{"kind": "file", "path", "inode", "offset"}`` of the last complete line returned."""
        if self._inode is None and self._resume:
            return dict(self._resume)
        return {"kind": "file", "path": str(self.path), "inode": self._inode, "offset": self._offset}

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None


def split_kmsg_header(record: str) -> int | None:
    """The sequence number of a ``/dev/kmsg`` record (``prio,seq,usec,flags;text``), or ``None``."""
    head, sep, _ = record.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3 or not fields[1].strip().isdigit():
        return None
    return int(fields[1])


class KmsgReader:
    """Read ``/dev/kmsg`` (or a file in its record format) without re-reading records after a restart."""

    def __init__(self, boot_id: str, cursor: dict[str, Any] | None = None, path: str | Path = KMSG_PATH,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = str(path)
        self.name = f"kmsg:{self.path}"
        self.boot_id = boot_id
        self.max_bytes = max_bytes
        self.lost_records = 0
        self._fd: int | None = None
        self._partial = b""
        same_boot = cursor is not None and cursor.get("kind") == "kmsg" and cursor.get("boot_id") == boot_id
        self._last_seq = int(cursor["seq"]) if same_boot and cursor is not None else -1

    def open(self) -> None:
        """Open the device now (raises ``OSError`` if it cannot be read: no permission, no device)."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)

    def _records(self, chunk: bytes) -> list[str]:
        """Split what one read returned into records (the device: one; a file: many, maybe partial)."""
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        if len(self._partial) > MAX_LINE_BYTES:  # no newline in sight: the piece so far is a record
            complete.append(self._partial)
            self._partial = b""
        records: list[str] = []
        for raw in complete:
            if raw.startswith(b" ") and records:
                continue  # dictionary line (" SUBSYSTEM=pci") belonging to the previous record
            if raw:
                records.append(_decode(raw))
        return records

    def read(self) -> list[str]:
        """New records as lines (``prio,seq,usec,flags;message``), oldest first."""
        self.open()
        assert self._fd is not None
        lines: list[str] = []
        used = 0
        while used < self.max_bytes:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                break  # nothing more for now
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the ring buffer overwrote records we had not read
                    self.lost_records += 1
                    continue
                raise
            if not chunk:
                break  # end of a regular file
            used += len(chunk)
            for record in self._records(chunk):
                seq = split_kmsg_header(record)
                if seq is not None:
                    if seq <= self._last_seq:
                        continue
                    self._last_seq = seq
                lines.append(record)
        return lines

    def cursor(self) -> dict[str, Any]:
        """``{"kind": "kmsg", "boot_id", "seq"}`` of the last record returned."""
        return {"kind": "kmsg", "boot_id": self.boot_id, "seq": self._last_seq}

    def close(self) -> None:
        """Close the device."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class JournalReader:
    """Poll ``journalctl -k`` (or another ``selector``, e.g. ``-u UNIT``) with a cursor file. ``command`` is
    injectable (tests use a stub script)."""

    def __init__(self, cursor_file: str | Path, command: Sequence[str] | None = None,
                 timeout_seconds: float = 10.0, selector: Sequence[str] = ("-k",)) -> None:
        self.cursor_file = Path(cursor_file)
        self.name = "journal"
        self.command = list(command) if command else ["journalctl"]
        self.timeout_seconds = timeout_seconds
        self.selector = list(selector)

    @staticmethod
    def available() -> bool:
        """True when ``journalctl`` is on the PATH."""
        return shutil.which("journalctl") is not None

    def argv(self) -> list[str]:
        """The command line of one poll (``--boot`` only on the very first one: no cursor yet)."""
        argv = [*self.command, *self.selector, "-o", "short-precise", "--no-pager", "-q",
                f"--cursor-file={self.cursor_file}"]
        if not self.cursor_file.exists():
            argv.append("--boot")
        return argv

    def read(self) -> list[str]:
        """Entries after the cursor (journald moves the cursor file itself)."""
        self.cursor_file.parent.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(  # fixed argv, no shell
            self.argv(), capture_output=True, timeout=self.timeout_seconds, check=False
        )
        if result.returncode != 0:
            raise OSError(f"journalctl exited {result.returncode}: {_decode(result.stderr[-500:]).strip()}")
        return [line for line in result.stdout.decode("utf-8", "replace").splitlines()
                if line and not line.startswith("-- ")]

    def cursor(self) -> dict[str, Any]:
        """``{"kind": "journal", "cursor_file"}``: journald keeps the position itself."""
        return {"kind": "journal", "cursor_file": str(self.cursor_file)}

    def close(self) -> None:
        """Nothing to release (one process per poll)."""
