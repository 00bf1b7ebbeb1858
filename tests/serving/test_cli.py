"""``inference-watchdog engine list|drain|admit``: list reads a real loopback HTTP server serving the
documented JSON of real verdicts; drain and admit write manual states a new state database on the same
file reads back."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from watchdog.cli import main
from watchdog.cli.engine_cmd import table
from watchdog.infra.state import StateDB
from watchdog.serving.jsonview import verdict_from_json, verdicts_json
from watchdog.serving.manual import ManualStates
from watchdog.serving.model import EngineVerdict, ManualState, Reason, Scores, Verdict

NOW = 1_800_000_000.0
VERDICTS = [
    EngineVerdict("vllm-a", "127.0.0.1:8000", Verdict.DRAIN, 0, (Reason("gpu_lost", "GPU 1 lost (NVML)"),),
                  since_seconds=NOW - 125, updated_seconds=NOW,
                  scores=Scores(kv_free_ratio=0.7, requests_running=3.0, predicted_wait_seconds=0.4)),
    EngineVerdict("vllm-b", "127.0.0.1:8001", Verdict.ADMIT, 100,
                  (Reason("manual", "admit by bob (cli): after the reset"),), since_seconds=NOW - 5,
                  updated_seconds=NOW,
                  manual=ManualState("vllm-b", Verdict.ADMIT, "after the reset", "bob (cli)", NOW - 5),
                  proposed=Verdict.SHED),
]


class Source:
    def __init__(self, verdicts: list[EngineVerdict], trusted: bool) -> None:
        self._verdicts, self._trusted = verdicts, trusted

    def verdicts(self) -> list[EngineVerdict]:
        return list(self._verdicts)

    def verdict(self, job: str) -> EngineVerdict | None:
        return next((v for v in self._verdicts if v.job == job), None)

    def trusted(self) -> bool:
        return self._trusted


def _serve(document: dict[str, Any]) -> Iterator[str]:
    body = json.dumps(document).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/api/v1/engines":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture()
def agent_url() -> Iterator[str]:
    yield from _serve(verdicts_json(Source(VERDICTS, trusted=True)))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_jsonview_round_trip() -> None:
    document = json.loads(json.dumps(verdicts_json(Source(VERDICTS, trusted=False))))
    assert document["data"]["trusted"] is False
    assert [verdict_from_json(e) for e in document["data"]["engines"]] == VERDICTS


def test_list_prints_the_api_json_when_piped(agent_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "engine", "list", "--url", agent_url)
    assert code == 0
    document = json.loads(out)
    assert document == json.loads(json.dumps(verdicts_json(Source(VERDICTS, trusted=True))))
    assert [verdict_from_json(e).verdict for e in document["data"]["engines"]] == [Verdict.DRAIN, Verdict.ADMIT]


def test_table_is_readable() -> None:
    text = table(verdicts_json(Source(VERDICTS, trusted=True)), NOW)
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["JOB", "INSTANCE", "VERDICT", "WEIGHT"]
    assert lines[1].split()[:5] == ["vllm-a", "127.0.0.1:8000", "drain", "0", "%"]
    assert "2m05s" in lines[1] and "70 %" in lines[1] and "gpu_lost: GPU 1 lost (NVML)" in lines[1]
    assert "admit (proposed shed)" in lines[2] and "manual: admit by bob (cli)" in lines[2]
    assert "NOT trusted" not in text


def test_table_says_when_verdicts_are_not_trusted() -> None:
    text = table(verdicts_json(Source(VERDICTS, trusted=False)), NOW)
    assert text.splitlines()[0].startswith("verdicts NOT trusted")
    assert table(verdicts_json(Source([], trusted=True)), NOW) == "no engine configured"


def test_list_reports_an_unreachable_agent(capsys: pytest.CaptureFixture[str]) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()  # nothing listens there now
    code, _, err = _run(capsys, "engine", "list", "--url", f"http://127.0.0.1:{port}", "--timeout", "2")
    assert code == 2 and "cannot reach the agent" in err and "--url" in err


def test_list_reports_an_agent_without_the_endpoint(agent_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "engine", "list", "--url", agent_url + "/sub")
    assert code == 2 and "HTTP 404" in err


@pytest.fixture()
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"state_dir": str(tmp_path / "state"), "engines": [
        {"job": "vllm-a", "url": "http://127.0.0.1:8000/metrics"},
        {"job": "vllm-b", "url": "http://127.0.0.1:8001/metrics"}]}))
    return path


def test_drain_persists_and_says_what_was_set(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "engine", "drain", "vllm-a", "--reason", "kernel upgrade", "--for", "30m",
                        "--config", str(config))
    assert code == 0
    assert out.startswith("set manual drain on vllm-a until ") and "Reason: kernel upgrade" in out
    db = StateDB.in_dir(config.parent / "state")
    state = ManualStates(db).active(time.time())["vllm-a"]
    db.close()
    assert state.verdict is Verdict.DRAIN and state.reason == "kernel upgrade" and state.set_by.endswith("(cli)")
    assert state.until_seconds is not None
    assert state.until_seconds - state.set_at_seconds == pytest.approx(1800)


def test_admit_replaces_and_clear_removes(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "engine", "drain", "vllm-b", "--reason", "x", "--config", str(config))[0] == 0
    code, out, _ = _run(capsys, "engine", "admit", "vllm-b", "--config", str(config))
    assert code == 0 and "set manual admit on vllm-b until revoked" in out
    db = StateDB.in_dir(config.parent / "state")
    states = ManualStates(db)
    assert states.active(time.time())["vllm-b"].verdict is Verdict.ADMIT
    code, out, _ = _run(capsys, "engine", "admit", "vllm-b", "--clear", "--config", str(config))
    assert code == 0 and out.startswith("cleared the manual admit of vllm-b")
    assert states.active(time.time()) == {}
    db.close()
    code, _, err = _run(capsys, "engine", "admit", "vllm-b", "--clear", "--config", str(config))
    assert code == 1 and "has no manual state" in err


def test_unknown_engine_and_bad_duration_are_refused(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "engine", "drain", "vllm-c", "--reason", "x", "--config", str(config))
    assert code == 1 and "no engine has job 'vllm-c'" in err and "vllm-a, vllm-b" in err
    code, _, err = _run(capsys, "engine", "drain", "vllm-a", "--reason", "x", "--for", "soon", "--config",
                        str(config))
    assert code == 2 and err.startswith("error: --for:")


def test_manual_states_persist_across_databases_and_expire(tmp_path: Path) -> None:
    db = StateDB.in_dir(tmp_path)
    ManualStates(db).set(ManualState("vllm-a", Verdict.DRAIN, "r", "alice", NOW, NOW + 60))
    ManualStates(db).set(ManualState("vllm-b", Verdict.ADMIT, "r", "bob", NOW))
    db.close()
    reopened = StateDB.in_dir(tmp_path)
    states = ManualStates(reopened)
    assert set(states.active(NOW + 30)) == {"vllm-a", "vllm-b"}
    assert set(states.active(NOW + 60)) == {"vllm-b"}
    assert [s.job for s in states.expire(NOW + 61)] == ["vllm-a"]
    assert states.expire(NOW + 62) == [] and set(states.active(NOW)) == {"vllm-b"}
    reopened.close()
