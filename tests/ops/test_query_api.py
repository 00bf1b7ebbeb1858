"""Prometheus' query API on the exporter's port: real ``promtool query`` against it over TLS and basic
auth, Grafana-style requests (form POSTs, query_range with step, labels, series with match[]), error
shapes and codes, rules and alerts, and ``inference-watchdog query`` asking it."""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import ssl
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from watchdog.cli import query_cmd
from watchdog.config.settings import ExporterSettings, section_settings
from watchdog.exporter.api import QueryAPI
from watchdog.exporter.server import ExporterServer, exporter_for_store
from watchdog.model import metric
from watchdog.rules.engine import RuleEngine
from watchdog.rules.loader import load_rule_text
from watchdog.store import Store

from .conftest import Cert, http_get, make_cert

NOW = 1_800_000_000.0  # the agent's clock in these tests; data runs up to it, one sample a second
PASSWORD = "correct-horse-battery-staple-7"
PROMTOOL = shutil.which("promtool")
RULES = """
groups:
  - name: engine
    rules:
      - record: engine:prompt_tokens:rate1m
        expr: sum by (job) (rate(engine:prompt_tokens_total[1m]))
      - alert: TokensFlowing
        expr: engine:prompt_tokens:rate1m > 5
        for: 10s
        labels: {severity: info}
        annotations: {summary: "{{ $labels.job }} at {{ $value }} tokens/s"}
"""


def _store_and_engine() -> tuple[Store, RuleEngine]:
    store = Store(retention_ms=900_000, max_points=1000)
    engine = RuleEngine(load_rule_text(RULES, "engine.yaml"), store)
    start = int(NOW) - 120
    for second in range(start, int(NOW) + 1):
        t_ms = second * 1000
        store.append(metric("engine:prompt_tokens_total", job="vllm", instance="a"), t_ms, 10.0 * (second - start))
        store.append(metric("up", job="vllm", instance="a"), t_ms, 1.0)
        store.append(metric("up", job="node", instance="b"), t_ms, 1.0 if second % 60 else 0.0)
        engine.evaluate(t_ms)
    return store, engine


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ExporterServer, Cert]]:
    cert = make_cert(tmp_path)
    store, engine = _store_and_engine()
    section = {"tls": {"cert_file": str(cert.cert), "key_file": str(cert.key)},
               "basic_auth": {"username": "grafana", "password_env": "EXPORTER_PASSWORD"}}
    server = exporter_for_store(store, "127.0.0.1:0", ready=lambda: True,
                                section=section_settings(ExporterSettings, "exporter", section),
                                clock=lambda: NOW, environ={"EXPORTER_PASSWORD": PASSWORD})
    server.api = QueryAPI(store, engine=lambda: engine, clock=lambda: NOW)
    server.start()
    yield server, cert
    server.stop()


def _call(server: ExporterServer, cert: Cert, endpoint: str, params: dict[str, Any] | list[tuple[str, str]],
          method: str = "GET", auth: bool = True) -> tuple[int, dict[str, Any]]:
    encoded = urllib.parse.urlencode(params)
    url = f"{server.url}/api/v1/{endpoint}"
    headers = {}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"grafana:{PASSWORD}".encode()).decode()
    if method == "GET":
        response = http_get(f"{url}?{encoded}", headers=headers, cafile=cert.cert)
        return response.status, json.loads(response.text) if response.text.startswith("{") else {}
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    request = urllib.request.Request(url, data=encoded.encode(), headers=headers, method="POST")
    context = ssl.create_default_context(cafile=str(cert.cert))
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_instant_query_get_and_post(served: tuple[ExporterServer, Cert]) -> None:
    server, cert = served
    for method in ("GET", "POST"):
        code, doc = _call(server, cert, "query", {"query": "rate(engine:prompt_tokens_total[1m])",
                                                  "time": str(NOW)}, method)
        assert code == 200 and doc["status"] == "success", doc
        (sample,) = doc["data"]["result"]
        assert sample["metric"] == {"instance": "a", "job": "vllm"}
        assert sample["value"] == [int(NOW), "10"]
    code, doc = _call(server, cert, "query", {"query": "1 + 1"})  # time defaults to the agent's now
    assert doc["data"] == {"resultType": "scalar", "result": [int(NOW), "2"]}


def test_query_range_as_grafana_sends_it(served: tuple[ExporterServer, Cert]) -> None:
    server, cert = served
    code, doc = _call(server, cert, "query_range", {"query": "up{job=\"node\"}", "start": str(NOW - 65),
                                                    "end": str(NOW - 55), "step": "5"}, "POST")
    assert code == 200, doc
    (series,) = doc["data"]["result"]
    assert series["metric"] == {"__name__": "up", "instance": "b", "job": "node"}
    assert [v for _, v in series["values"]] == ["1", "0", "1"]  # the 0 at a whole minute
    assert [t for t, _ in series["values"]] == [int(NOW) - 65, int(NOW) - 60, int(NOW) - 55]
    code, doc = _call(server, cert, "query_range", {"query": "time()", "start": "1800000000",
                                                    "end": "2027-01-15T08:00:02Z", "step": "1s"})
    assert code == 200 and doc["data"]["result"][0]["metric"] == {}


@pytest.mark.parametrize(("endpoint", "params", "code", "kind", "fragment"), [
    ("query", {"query": "sum(("}, 400, "bad_data", 'invalid parameter "query"'),
    ("query", {"query": "up", "time": "yesterday"}, 400, "bad_data", 'invalid parameter "time"'),
    ("query", {"query": "up + on() up"}, 422, "execution", "many-to-many"),
    ("query", {"query": "max_over_time(sum(rate(up[1m]))[2m:1ms])", "timeout": "50ms"}, 503, "timeout",
     "timed out"),
    ("query_range", {"query": "up", "start": "10", "end": "5", "step": "1"}, 400, "bad_data",
     "end timestamp must not be before start time"),
    ("query_range", {"query": "up", "start": "1", "end": "5", "step": "0"}, 400, "bad_data",
     "zero or negative query resolution step"),
    ("query_range", {"query": "up", "start": "0", "end": "100000", "step": "1"}, 400, "bad_data",
     "11,000 points"),
    ("query_range", {"query": "up[1m]", "start": "1", "end": "5", "step": "1"}, 400, "bad_data",
     'invalid expression type "range vector" for range query'),
    ("series", {}, 400, "bad_data", "no match[] parameter provided"),
    ("label/1x/values", {}, 400, "bad_data", "invalid label name"),
])
def test_errors_have_prometheus_shapes_and_codes(served: tuple[ExporterServer, Cert], endpoint: str,
                                                 params: dict[str, str], code: int, kind: str,
                                                 fragment: str) -> None:
    server, cert = served
    got_code, doc = _call(server, cert, endpoint, params)
    assert got_code == code, doc
    assert doc["status"] == "error" and doc["errorType"] == kind and fragment in doc["error"], doc


def test_metadata_endpoints(served: tuple[ExporterServer, Cert]) -> None:
    server, cert = served
    code, doc = _call(server, cert, "series", [("match[]", "up"), ("match[]", '{job="vllm"}'),
                                               ("start", str(NOW - 60)), ("end", str(NOW))])
    assert code == 200
    names = [(s["__name__"], s.get("job")) for s in doc["data"]]
    assert names == [("engine:prompt_tokens:rate1m", "vllm"), ("engine:prompt_tokens_total", "vllm"),
                     ("up", "node"), ("up", "vllm")] or ("ALERTS", "vllm") in names
    code, doc = _call(server, cert, "labels", {})
    assert {"__name__", "instance", "job", "alertname", "alertstate"} <= set(doc["data"])
    assert doc["data"] == sorted(doc["data"])
    code, doc = _call(server, cert, "label/job/values", [("match[]", "up")])
    assert doc["data"] == ["node", "vllm"]
    code, doc = _call(server, cert, "series", [("match[]", "up"), ("start", "0"), ("end", "10")])
    assert doc == {"status": "success", "data": []}  # nothing stored that long ago


def test_rules_and_alerts(served: tuple[ExporterServer, Cert]) -> None:
    server, cert = served
    code, doc = _call(server, cert, "rules", {})
    assert code == 200
    (group,) = doc["data"]["groups"]
    assert (group["name"], group["file"]) == ("engine", "engine.yaml")
    recording, alerting = group["rules"]
    assert recording["type"] == "recording" and recording["health"] == "ok"
    assert alerting["type"] == "alerting" and alerting["state"] == "firing" and alerting["duration"] == 10
    (alert,) = alerting["alerts"]
    assert alert["labels"] == {"alertname": "TokensFlowing", "job": "vllm", "severity": "info"}
    assert alert["annotations"] == {"summary": "vllm at 10 tokens/s"}
    assert alert["value"] == "1e+01"
    code, doc = _call(server, cert, "rules", {"type": "record"})
    assert [r["type"] for r in doc["data"]["groups"][0]["rules"]] == ["recording"]
    code, doc = _call(server, cert, "alerts", {})
    assert [a["state"] for a in doc["data"]["alerts"]] == ["firing"]


def test_auth_is_the_exporters(served: tuple[ExporterServer, Cert]) -> None:
    server, cert = served
    code, _ = _call(server, cert, "query", {"query": "up"}, auth=False)
    assert code == 401


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed")
def test_real_promtool_queries_it(served: tuple[ExporterServer, Cert]) -> None:
    """promtool 2.42 (Prometheus' own API client) over TLS, with the credentials in the URL."""
    server, cert = served
    assert PROMTOOL is not None
    base = server.url.replace("https://", f"https://grafana:{PASSWORD}@")
    env = {**os.environ, "SSL_CERT_FILE": str(cert.cert)}

    def promtool(*args: str) -> str:
        result = subprocess.run([PROMTOOL, "query", *args], capture_output=True, text=True, timeout=60,
                                env=env, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    out = promtool("instant", "--time", str(NOW), base, "sum by (job) (rate(engine:prompt_tokens_total[1m]))")
    assert out.strip() == f'{{job="vllm"}} => 10 @[{int(NOW)}]'
    out = promtool("range", "--start", str(NOW - 4), "--end", str(NOW), "--step", "2s", base, 'up{job="vllm"}')
    assert out.splitlines() == ['up{instance="a", job="vllm"} =>', f"1 @[{int(NOW) - 4}]",
                                f"1 @[{int(NOW) - 2}]", f"1 @[{int(NOW)}]"]
    out = promtool("series", "--match", 'up{job="node"}', "--start", str(NOW - 10), "--end", str(NOW), base)
    assert out.strip() == '{__name__="up", instance="b", job="node"}'
    out = promtool("labels", "--start", str(NOW - 10), "--end", str(NOW), base, "job")
    assert out.split() == ["vllm", "node"] or sorted(out.split()) == ["node", "vllm"]
    bad = subprocess.run([PROMTOOL, "query", "instant", base, "sum(("], capture_output=True, text=True,
                         timeout=60, env=env, check=False)
    assert bad.returncode == 1 and "bad_data" in bad.stderr


def test_query_command_asks_the_live_agent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, engine = _store_and_engine()
    server = exporter_for_store(store, "127.0.0.1:0", ready=lambda: True, clock=lambda: NOW)
    server.api = QueryAPI(store, engine=lambda: engine, clock=lambda: NOW)
    server.start()
    try:
        parser = argparse.ArgumentParser()
        query_cmd.register(parser.add_subparsers())
        args = parser.parse_args(["query", "--url", server.url, "--at", str(NOW),
                                  "rate(engine:prompt_tokens_total[1m])"])
        assert args.func(args) == 0
        assert capsys.readouterr().out.strip() == '{instance="a",job="vllm"} => 10'
        args = parser.parse_args(["query", "--url", server.url, "--at", str(NOW), "engine:nothing_here"])
        assert args.func(args) == 0
        assert "no engine:* series in the agent's store" in capsys.readouterr().err
        args = parser.parse_args(["query", "--url", server.url, "--json", "sum(("])
        assert args.func(args) == 1
        assert json.loads(capsys.readouterr().out)["errorType"] == "bad_data"
    finally:
        server.stop()


def test_the_daemon_serves_the_api_over_a_running_agent(tmp_path: Path) -> None:
    """The daemon's exporter (build_exporter) answers the API over the agent's store and rule engine."""
    from tests.support.agents import make_agent
    from watchdog.daemon.serve import build_exporter

    now = [NOW]
    agent = make_agent(tmp_path, "groups:\n  - name: gpu\n    rules:\n      - record: gpu:temperature:max\n"
                                 "        expr: max(watchdog_gpu_temperature_celsius)\n", clock=lambda: now[0])
    for _ in range(3):
        agent.tick()
        now[0] += 1
    exporter = build_exporter(agent, "127.0.0.1:0")
    exporter.start()
    try:
        response = http_get(f"{exporter.url}/api/v1/query?query=gpu:temperature:max")
        doc = json.loads(response.text)
        assert response.status == 200 and doc["data"]["result"][0]["metric"] == {"__name__": "gpu:temperature:max"}
        response = http_get(f"{exporter.url}/api/v1/rules")
        (group,) = json.loads(response.text)["data"]["groups"]
        assert group["name"] == "gpu" and group["rules"][0]["health"] == "ok" and group["interval"] == 1
    finally:
        exporter.stop()
        agent.close(timeout_seconds=1)


SUPPRESSION_RULES = """
groups:
  - name: node
    rules:
""" + "".join(f"""      - alert: {name}
        expr: vector(1)
        labels: {{severity: warning{extra}}}
        annotations: {{summary: s, description: d, runbook: gpu-xid}}
""" for name, extra in [("GpuFallenOffBus", ', gpu: "5"'), ("EngineDown", ", job: vllm"),
                        ("GpuThermalMarginLow", ', gpu: "3"')])


def test_alerts_show_alertmanagers_suppression_status(tmp_path: Path) -> None:
    """``/api/v1/alerts`` of a running agent: a silenced alert names its silence, an inhibited one the
    firing alert that inhibits it (the default inhibit rule: a lost GPU inhibits the engine alerts)."""
    from tests.support.agents import make_agent
    from watchdog.daemon.serve import build_exporter
    from watchdog.notify.decisions.silences import Matcher

    now = [NOW]
    agent = make_agent(tmp_path, SUPPRESSION_RULES, clock=lambda: now[0])
    silence = agent.dispatcher.muting.store.add([Matcher.parse("gpu=3")], int(NOW * 1000) - 1,
                                                int(NOW * 1000) + 3_600_000, "alice", "fan swap", int(NOW * 1000))
    agent.tick()
    fingerprints = {a.name: a.fingerprint for a in agent.rule_engine.alerts()}
    exporter = build_exporter(agent, "127.0.0.1:0")
    exporter.start()
    try:
        alerts = json.loads(http_get(f"{exporter.url}/api/v1/alerts").text)["data"]["alerts"]
        status = {a["labels"]["alertname"]: (a["state"], a["status"]) for a in alerts}
        assert status == {
            "GpuFallenOffBus": ("firing", {"state": "active", "silencedBy": [], "inhibitedBy": []}),
            "EngineDown": ("firing", {"state": "suppressed", "silencedBy": [],
                                      "inhibitedBy": [fingerprints["GpuFallenOffBus"]]}),
            "GpuThermalMarginLow": ("firing", {"state": "suppressed", "silencedBy": [silence.id], "inhibitedBy": []}),
        }
        agent.dispatcher.muting.store.expire(silence.id, int(NOW * 1000))
        alerts = json.loads(http_get(f"{exporter.url}/api/v1/alerts").text)["data"]["alerts"]
        assert {a["labels"]["alertname"]: a["status"]["state"] for a in alerts}["GpuThermalMarginLow"] == "active"
    finally:
        exporter.stop()
        agent.close(timeout_seconds=1)
