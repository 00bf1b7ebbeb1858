"""A real Alertmanager (Debian ``prometheus-alertmanager``) on loopback, for tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.polling import wait_until
from tests.support.ports import free_port
from tests.support.processes import stop_process

BINARY = shutil.which("alertmanager") or shutil.which("prometheus-alertmanager")
CONFIG = """
route:
  receiver: blackhole
  group_wait: 1s
receivers:
  - name: blackhole
"""


class RealAlertmanager:
    """One alertmanager process with its own config and storage, clustering off."""

    def __init__(self, workdir: Path, port: int | None = None, config: str = CONFIG) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.config = config
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RealAlertmanager:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "am.yml").write_text(self.config)
        assert BINARY is not None
        self._log = open(self.workdir / "am.log", "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [
                BINARY,
                f"--config.file={self.workdir / 'am.yml'}",
                f"--storage.path={self.workdir / 'data'}",
                "--cluster.listen-address=",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        try:
            wait_until(self._ready, timeout=30, what="alertmanager ready")
        except BaseException:
            self.stop()  # a test that fails here never reaches its own stop()
            raise
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError("alertmanager exited: " + (self.workdir / "am.log").read_text()[-2000:])
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def alerts(self, **params: str) -> list[dict[str, Any]]:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{query}", timeout=5) as r:
            data: list[dict[str, Any]] = json.load(r)
            return data

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, timeout=10)
            self.proc = None
            self._log.close()


