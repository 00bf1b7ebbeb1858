"""Item 5: ``config check`` and ``run`` agree. Each config ``run`` refuses at start-up, ``config check``
refuses first with the same message and exit code 2, and neither shows a traceback."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from watchdog.cli import main

ENGINE = {"url": "http://127.0.0.1:1/metrics", "job": "vllm"}
BAD_CONFIGS: dict[str, dict[str, Any]] = {
    "non-finite interval": {"tick_interval_seconds": float("nan")},
    "bad process regex": {"engines": [{**ENGINE, "process": {"match": "vllm(["}}]},
    "missing rule file": {"rules": {"paths": ["/nonexistent/rules.yaml"]}},
    "state dir is a file": {"state_dir": "FILE"},
    "bad listen address": {"listen": "localhost"},
    "bad listen port": {"listen": "127.0.0.1:70000"},
    "duplicate job": {"engines": [ENGINE, {**ENGINE, "url": "http://127.0.0.1:2/metrics"}]},
    "scrape timeout past WatchdogSec": {"engines": [{**ENGINE, "scrape_timeout_seconds": 59}]},
}


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_config_check_rejects_what_run_rejects(tmp_path: Path, name: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    overrides = dict(BAD_CONFIGS[name])
    if overrides.get("state_dir") == "FILE":
        (tmp_path / "file").write_text("not a directory\n")
        overrides["state_dir"] = str(tmp_path / "file")
    config = {"state_dir": str(tmp_path / "state"), "rules": {"paths": []}, **overrides}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    previous = signal.getsignal(signal.SIGHUP)
    try:
        check_code = main(["config", "check", str(path)])
        check_err = capsys.readouterr().err
        run_code = main(["run", "--config", str(path), "--listen", "127.0.0.1:0"])
        run_err = capsys.readouterr().err
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert check_code == run_code == 2
    first = [line for line in check_err.splitlines() if line.startswith("error:")]
    assert first and first[0] in run_err and str(path) in first[0]
    assert "Traceback" not in check_err + run_err
