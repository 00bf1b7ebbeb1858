"""The two long-running processes of the lane: a real vLLM engine and the real agent.

Both run in their own session (process group), so the lane can kill, freeze (SIGSTOP) and thaw the
whole tree, and both are always stopped when the lane ends.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def http_get(url: str, timeout: float = 2.0) -> str | None:
    """Body of ``GET url``, or None on any HTTP or connection failure."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body: bytes = resp.read()
            return body.decode("utf-8", "replace")
    except (OSError, urllib.error.URLError):
        return None


def wait_until(predicate: object, timeout_s: float, interval_s: float = 1.0) -> bool:
    """Poll ``predicate()`` until it is true or *timeout_s* passes; return whether it became true."""
    assert callable(predicate)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())


@dataclass(frozen=True)
class EngineSpec:
    """How the lane serves its model with vLLM."""

    model_dir: Path
    port: int
    num_blocks: int = 16
    block_size: int = 128
    max_model_len: int = 1920
    served_name: str = "tiny"
    memory_fraction: float = 0.1

    def argv(self) -> list[str]:
        """The ``vllm serve`` command line (through ``serve.py``, see there why)."""
        return [
            sys.executable,
            str(HERE / "serve.py"),
            "serve",
            str(self.model_dir),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            str(self.max_model_len),
            "--block-size",
            str(self.block_size),
            "--num-gpu-blocks-override",
            str(self.num_blocks),
            "--gpu-memory-utilization",
            str(self.memory_fraction),
        ]


class Engine:
    """A ``vllm serve`` process tree on loopback."""

    def __init__(self, spec: EngineSpec, log_path: Path) -> None:
        self.spec = spec
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.spec.port}"

    def start(self, timeout_s: float = 600.0) -> float:
        """Start the engine and wait until ``/health`` answers; return the seconds it took."""
        started = time.monotonic()
        env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.spec.argv(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.starts += 1
        ok = wait_until(lambda: self.exited() or http_get(self.base_url + "/health") is not None, timeout_s, 2.0)
        if not ok or self.exited():
            raise RuntimeError(f"vLLM did not become healthy in {timeout_s:.0f}s; see {self.log_path}")
        return time.monotonic() - started

    def exited(self) -> bool:
        """Whether the engine's root process has ended."""
        return self.proc is None or self.proc.poll() is not None

    def signal_group(self, sig: signal.Signals) -> None:
        """Send *sig* to the engine's whole process group."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole tree (a crash, as the agent sees it) and reap the root."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def core_pids(self) -> list[int]:
        """The engine core process(es) of the tree (vLLM titles them ``VLLM::EngineCore...``), not the API server."""
        if self.proc is None:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            pgrp = int(stat.rsplit(")", 1)[1].split()[2])
            if pgrp == self.proc.pid and b"EngineCore" in cmdline:
                pids.append(int(entry.name))
        return pids

    def signal_core(self, sig: signal.Signals) -> int:
        """Send *sig* to the engine core process(es) only; return how many got it."""
        pids = self.core_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return len(pids)

    def stop(self) -> None:
        """Thaw, then SIGTERM the tree; SIGKILL after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal_group(signal.SIGCONT)
        self.signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()

    def metrics(self) -> str | None:
        """The engine's ``/metrics`` page, or None."""
        return http_get(self.base_url + "/metrics", timeout=5.0)


@dataclass(frozen=True)
class AlertEvent:
    """One line of the agent's log notifier: an alert fired or resolved."""

    at: float  # time.time() when the lane read the line
    kind: str  # "firing" | "resolved"
    alertname: str
    labels: dict[str, str]
    fired_at: str = ""  # the agent's evaluation time of the firing (ISO): one evaluation, one value

    @property
    def evaluated_at(self) -> float:
        """The evaluation that fired it (epoch seconds), or when the lane read the line if the log lacks it."""
        try:
            return dt.datetime.fromisoformat(self.fired_at.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return self.at


@dataclass
class AgentLog:
    """Alert transitions read from the agent's stdout (JSON lines), appended by a reader thread."""

    events: list[AlertEvent] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[AlertEvent]:
        """A copy of the events so far."""
        with self.lock:
            return list(self.events)


def parse_log_line(line: str, now: float) -> AlertEvent | None:
    """An alert transition from one log-notifier JSON line, or None for any other line (pure)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        fields = json.loads(line)
    except json.JSONDecodeError:
        return None
    event = str(fields.get("event", ""))
    if event not in ("alert_firing", "alert_resolved"):
        return None
    labels = {str(k): str(v) for k, v in dict(fields.get("labels") or {}).items()}
    return AlertEvent(now, event.removeprefix("alert_"), str(fields.get("alertname", "")), labels,
                      str(fields.get("fired_at", "")))


def agent_config(engine_url: str, listen: str, state_dir: Path, engine_port: int, model: str,
                 engine_scrape_interval: float | None = None) -> str:
    """The agent's config file for the lane: the shipped rules and runbooks, one vLLM endpoint with its
    canary probe (every 5 s, default timeout and prompt). *engine_scrape_interval* sets
    ``engine_scrape_interval_seconds``; None keeps the agent's default."""
    extra = [] if engine_scrape_interval is None else [f"engine_scrape_interval_seconds: {engine_scrape_interval:g}"]
    return "\n".join(
        [
            "tick_interval_seconds: 1",
            *extra,
            f"state_dir: {state_dir}",
            f"listen: {listen}",
            "rules:",
            "  paths:",
            f"    - {REPO / 'rules'}/*.yaml",
            "runbooks:",
            "  paths:",
            f"    - {REPO / 'runbooks'}",
            "engines:",
            "  - job: vllm",
            f"    url: {engine_url}/metrics",
            "    kind: vllm",
            "    scrape_timeout_seconds: 2",
            f"    process: {{port: {engine_port}, match: 'serve\\.py serve'}}",
            f"    probe: {{url: {engine_url}/v1/completions, model: {model}, interval_seconds: 5}}",
            "kmsg: {enabled: false}",
            "remediation: {mode: suggest}",
            "notifiers:",
            "  log: {enabled: true}",
            "",
        ]
    )


class Agent:
    """``inference-watchdog run --config FILE``: its log notifier's lines are parsed as they come."""

    def __init__(self, config_path: Path, listen: str, log_path: Path) -> None:
        self.config_path = config_path
        self.listen = listen
        self.log_path = log_path
        self.log = AgentLog()
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        """Start the agent and wait until its exporter answers."""
        exe = Path(sys.executable).with_name("inference-watchdog")
        self.proc = subprocess.Popen(
            [str(exe), "run", "--config", str(self.config_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not wait_until(lambda: self.metrics() is not None, timeout_s):
            raise RuntimeError(f"the agent's exporter did not answer in {timeout_s:.0f}s; see {self.log_path}")

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log_path.open("a") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                event = parse_log_line(line, time.time())
                if event is not None:
                    with self.log.lock:
                        self.log.events.append(event)

    def metrics(self) -> str | None:
        """The agent's ``/metrics`` page, or None."""
        return http_get(f"http://{self.listen}/metrics", timeout=5.0)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
