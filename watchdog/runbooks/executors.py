"""Action executors: the only code that acts on the node. One class per action kind, same shape.

Every executor takes a :class:`~watchdog.runbooks.steps.RenderedAction` (plain strings, already
validated and allowed by the planner), a timeout and an output cap, and returns an :class:`ExecResult`;
it never raises for the action's own failure (missing program, timeout, HTTP error, no such process):
that is data in the result.

- command: ``subprocess`` with an argv list (never a shell), stdin closed, a minimal environment
  (no secrets inherited), its own process group killed on timeout, output capped while reading.
- systemd: ``systemctl --no-ask-password <verb> <unit>`` through an injected runner (tests pass a fake).
- http: ``http.client``, no proxies, no redirects (a redirect could leave the allowlist), one deadline
  for the whole exchange.
- signal: the unit's MainPID (``systemctl show``, through the runner), then ``os.kill``; PIDs 0, 1 and
  the agent's own are refused.
- notify: nothing to execute; the text is the output.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

from watchdog.infra.httpdeadline import Cutoff, UnsupportedURL, connection
from watchdog.runbooks.steps import RenderedAction, signal_number

SAFE_ENV_KEYS = ("PATH", "LANG", "LC_ALL", "TZ")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_READ_CHUNK = 65536


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one execution. ``exit_code`` is None when it did not complete (``error`` says
    why: not found, timed out, refused); ``output`` holds at most the cap, ``truncated`` tells."""

    exit_code: int | None
    output: bytes = b""
    duration_s: float = 0.0
    error: str = ""
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """True for a completed run with exit code 0."""
        return self.exit_code == 0


Runner = Callable[[Sequence[str], float, int], ExecResult]
"""``(argv, timeout_s, max_output_bytes) -> ExecResult``: how systemd and signal reach systemctl."""


class Executor(Protocol):
    """Executes one kind of rendered action."""

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        """Run ``action``; never raises for the action's own failure."""
        ...


def _minimal_env() -> dict[str, str]:
    """PATH (with the agent's own bin directory first, so ``inference-watchdog`` resolves inside its
    virtual environment), locale and TZ; nothing else, so no secret in the agent's environment leaks."""
    env = {k: os.environ[k] for k in SAFE_ENV_KEYS if k in os.environ}
    own_bin = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in (own_bin, env.get("PATH", DEFAULT_PATH)) if p)
    env.setdefault("LC_ALL", "C.UTF-8")
    return env


def _drain(stream: IO[bytes], limit: int, sink: list[bytes], flags: dict[str, bool]) -> None:
    kept = 0
    while True:
        chunk = stream.read(_READ_CHUNK)
        if not chunk:
            break
        if kept < limit:
            take = chunk[: limit - kept]
            sink.append(take)
            kept += len(take)
            if len(take) < len(chunk):
                flags["truncated"] = True
        else:
            flags["truncated"] = True


def run_argv(argv: Sequence[str], timeout_s: float, max_output_bytes: int) -> ExecResult:
    """Run ``argv`` without a shell; stdout and stderr merged and capped; the process group is killed
    at the timeout. A missing program is reported (exit_code None), not raised."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(  # argv list, never a shell; validated by the planner
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=_minimal_env(),
            start_new_session=True,
            close_fds=True,
        )
    except FileNotFoundError:
        return ExecResult(None, b"", time.monotonic() - started, f"{argv[0]}: command not found")
    except PermissionError:
        return ExecResult(None, b"", time.monotonic() - started, f"{argv[0]}: permission denied")
    except OSError as exc:
        return ExecResult(None, b"", time.monotonic() - started, f"{argv[0]}: {exc.strerror or exc}")
    assert proc.stdout is not None
    chunks: list[bytes] = []
    flags = {"truncated": False}
    reader = threading.Thread(target=_drain, args=(proc.stdout, max_output_bytes, chunks, flags),
                              daemon=True)
    reader.start()
    error = ""
    try:
        code: int | None = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.wait()
        code = None
        error = f"timed out after {timeout_s:g}s"
    reader.join(timeout=5)
    proc.stdout.close()
    return ExecResult(code, b"".join(chunks), time.monotonic() - started, error, flags["truncated"])


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        return
    except PermissionError:
        proc.kill()


class CommandExecutor:
    """Runs ``command`` steps through :func:`run_argv` (or an injected runner)."""

    def __init__(self, runner: Runner = run_argv) -> None:
        self.runner = runner

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        """Run the argv."""
        return self.runner(action.argv, timeout_s, max_output_bytes)


class SystemdExecutor:
    """Runs ``systemctl --no-ask-password <verb> <unit>`` through the injected runner."""

    def __init__(self, runner: Runner = run_argv, systemctl: str = "systemctl") -> None:
        self.runner = runner
        self.systemctl = systemctl

    def argv(self, action: RenderedAction) -> list[str]:
        """The exact argv it runs for ``action``."""
        return [self.systemctl, "--no-ask-password", action.verb, action.unit]

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        """Ask systemd to act on the unit."""
        return self.runner(self.argv(action), timeout_s, max_output_bytes)


class HttpExecutor:
    """Sends ``http`` steps with http.client: no proxies, no redirects (a redirect could leave the
    allowlist); the timeout covers the whole exchange (:mod:`watchdog.infra.httpdeadline`: a server that drips
    its answer cannot hold a worker past it); 2xx is success (exit code 0), any other status is the exit
    code, a connection failure or the deadline has exit code None."""

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        """Send the request and read at most ``max_output_bytes`` of the response."""
        started = time.monotonic()
        headers = dict(action.headers)
        if action.body is not None:
            headers.setdefault("Content-Type", "application/json")
        headers.setdefault("User-Agent", "inference-watchdog-runbook")
        try:
            conn, path = connection(action.url, timeout_s)
        except UnsupportedURL as exc:
            return ExecResult(None, b"", 0.0, f"{action.method} failed: {exc}")
        with Cutoff(conn, timeout_s) as cutoff:
            try:
                conn.request(action.method, path, body=action.body, headers=headers)
                response = conn.getresponse()
                body = b""
                while len(body) <= max_output_bytes:
                    chunk = response.read1(max_output_bytes + 1 - len(body))
                    if not chunk:
                        break
                    body += chunk
                status = int(response.status)
                if cutoff.expired:
                    raise TimeoutError
            except (OSError, http.client.HTTPException, ValueError) as exc:
                reason = f"timed out after {timeout_s:g}s" if cutoff.expired else f"{type(exc).__name__}: {exc}"
                return ExecResult(None, b"", time.monotonic() - started, f"{action.method} failed: {reason}")
        truncated = len(body) > max_output_bytes
        code = 0 if 200 <= status < 300 else status
        error = "" if code == 0 else f"HTTP {status}"
        return ExecResult(code, body[:max_output_bytes], time.monotonic() - started, error, truncated)


class SignalExecutor:
    """Signals the main process of a systemd unit (its MainPID, read through the runner)."""

    def __init__(self, runner: Runner = run_argv, kill: Callable[[int, int], None] = os.kill,
                 systemctl: str = "systemctl") -> None:
        self.runner = runner
        self.kill = kill
        self.systemctl = systemctl

    def main_pid(self, unit: str, timeout_s: float) -> tuple[int | None, str]:
        """The unit's MainPID, or None and why."""
        result = self.runner([self.systemctl, "show", "--property=MainPID", "--value", unit], timeout_s, 256)
        if not result.ok:
            return None, result.error or f"systemctl show exited {result.exit_code}"
        text = result.output.decode("ascii", "replace").strip()
        if text.startswith("MainPID="):
            text = text.split("=", 1)[1]
        if not text.isdigit():
            return None, f"unexpected MainPID {text[:40]!r}"
        return int(text), ""

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        """Resolve the PID and send the signal."""
        started = time.monotonic()
        pid, why = self.main_pid(action.unit, timeout_s)
        if pid is None:
            return ExecResult(None, b"", time.monotonic() - started, why)
        if pid <= 1 or pid == os.getpid():
            return ExecResult(None, b"", time.monotonic() - started,
                              f"refused: {action.unit} has no main process (MainPID={pid})")
        try:
            self.kill(pid, signal_number(action.signal))
        except ProcessLookupError:
            return ExecResult(None, b"", time.monotonic() - started, f"no process {pid}")
        except PermissionError:
            return ExecResult(None, b"", time.monotonic() - started, f"not permitted to signal {pid}")
        text = f"sent {action.signal} to PID {pid} ({action.unit})"
        return ExecResult(0, text.encode(), time.monotonic() - started)


class NotifyExecutor:
    """Notify steps execute nothing: the text is the output, posted to the alert's thread."""

    def execute(self, action: RenderedAction, timeout_s: float, max_output_bytes: int) -> ExecResult:
        """Return the text."""
        return ExecResult(0, action.text.encode()[:max_output_bytes])


def default_executors(runner: Runner = run_argv) -> dict[str, Executor]:
    """One executor per action kind; ``runner`` is how systemctl is reached (inject it in tests)."""
    return {
        "command": CommandExecutor(),
        "systemd": SystemdExecutor(runner),
        "http": HttpExecutor(),
        "signal": SignalExecutor(runner),
        "notify": NotifyExecutor(),
    }


def describe(result: ExecResult) -> str:
    """``exit 0 in 1.2s`` / ``timed out after 10s`` / ``nvidia-smi: command not found``."""
    head = f"exit {result.exit_code}" if result.exit_code is not None else "did not complete"
    tail = f": {result.error}" if result.error else ""
    return f"{head} in {result.duration_s:.1f}s{tail}"


def executors_from(mapping: Mapping[str, Executor] | None, runner: Runner = run_argv) -> dict[str, Executor]:
    """``mapping`` completed with the defaults for any kind it lacks."""
    out = default_executors(runner)
    out.update(mapping or {})
    return out
