"""What Grafana's Prometheus data source asks at connect and while a query is edited, answered by the
agent's query API exactly as a real Prometheus (Debian's 2.42) answers it about the same series.

One store is served two ways: by the exporter's ``/metrics``, which a real Prometheus scrapes every
second (``honor_labels: true``, so series that carry ``job``/``instance`` keep them), and by the agent's
own ``/api/v1/*``. ``status/buildinfo``, ``metadata`` (every parameter), ``labels``,
``label/<name>/values``, ``series`` (``match[]``, ``start``, ``end``; GET, and form POST: answered
where Prometheus answers it, 405 where it does not) and ``query_exemplars`` must give the same JSON from
both, and the same error shapes for bad parameters. The agent side runs behind the exporter's TLS and
basic auth, as a Grafana data source would reach it.
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.support.polling import wait_until
from tests.support.processes import stop_process
from watchdog.config.settings import ExporterSettings, section_settings
from watchdog.exporter.api import QueryAPI
from watchdog.exporter.server import ExporterServer, exporter_for_store
from watchdog.model import metric
from watchdog.store import Store

from .conftest import Cert, free_port, http_get, make_cert

PROMETHEUS = shutil.which("prometheus")
PASSWORD = "grafana-reads-this-node-42"
ENGINE = {"job": "vllm-llama", "instance": "gpu-node-01:8000"}

pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus (Debian package) is not installed")


def fill(store: Store, t_ms: int) -> None:
    """Series with the engine's job/instance (kept as they are by honor_labels), of several types."""
    store.append(metric("watchdog_engine_up", **ENGINE), t_ms, 1.0)
    store.append(metric("watchdog_engine_up", job="sglang-qwen", instance="gpu-node-01:30000"), t_ms, 0.0)
    store.append(metric("watchdog_engine_process_restarts_total", **ENGINE), t_ms, 2.0)
    store.append(metric("engine:requests_running", model_name="llama", **ENGINE), t_ms, 7.0)
    store.append(metric("watchdog_engine_gpu_info", gpu="0", uuid="GPU-a", **ENGINE), t_ms, 1.0)


@dataclass
class Sides:
    agent: ExporterServer
    cert: Cert
    prometheus: str


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sides]:
    tmp = tmp_path_factory.mktemp("grafana")
    store = Store(retention_ms=900_000, max_points=1000)
    fill(store, int(time.time() * 1000))
    # What Prometheus scrapes: the same store on a plain exporter (no auth) ...
    plain = exporter_for_store(store, "127.0.0.1:0", ready=lambda: True,
                               section=section_settings(ExporterSettings, "exporter", {}))
    plain.start()
    # ... and what Grafana asks: the agent's API behind TLS and basic auth.
    cert = make_cert(tmp)
    section = {"tls": {"cert_file": str(cert.cert), "key_file": str(cert.key)},
               "basic_auth": {"username": "grafana", "password_env": "EXPORTER_PASSWORD"}}
    agent = exporter_for_store(store, "127.0.0.1:0", ready=lambda: True,
                               section=section_settings(ExporterSettings, "exporter", section),
                               environ={"EXPORTER_PASSWORD": PASSWORD})
    agent.api = QueryAPI(store)
    agent.start()
    port = free_port()
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
              "scrape_configs": [{"job_name": "inference-watchdog", "honor_labels": True,
                                  "static_configs": [{"targets": [plain.url.removeprefix("http://")]}]}]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = (tmp / "prometheus.log").open("wb")
    process = subprocess.Popen([str(PROMETHEUS), f"--config.file={tmp / 'prometheus.yml'}",
                                f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def scraped() -> bool:
        assert process.poll() is None, (tmp / "prometheus.log").read_text()[-3000:]
        try:
            answer = json.loads(http_get(f"{url}/api/v1/metadata?metric=watchdog_engine_up", timeout=2).text)
            series = json.loads(http_get(f"{url}/api/v1/series?match[]=watchdog_engine_gpu_info", timeout=2).text)
        except (OSError, ValueError):
            return False
        return bool(answer.get("data")) and bool(series.get("data"))

    try:
        wait_until(scraped, 60, "Prometheus to scrape the exporter")
        fill(store, int(time.time() * 1000))  # a point after Prometheus' first scrape too
        yield Sides(agent, cert, url)
    finally:
        stop_process(process)
        log.close()
        agent.stop()
        plain.stop()


def ask(url: str, endpoint: str, params: list[tuple[str, str]], method: str = "GET",
        cert: Cert | None = None) -> tuple[int, Any]:
    encoded = urllib.parse.urlencode(params)
    headers = {}
    context = None
    if cert is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"grafana:{PASSWORD}".encode()).decode()
        context = ssl.create_default_context(cafile=str(cert.cert))
    if method == "GET":
        request = urllib.request.Request(f"{url}/api/v1/{endpoint}?{encoded}", headers=headers)
    else:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        request = urllib.request.Request(f"{url}/api/v1/{endpoint}", data=encoded.encode(), headers=headers,
                                         method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        body = err.read()
        return err.code, json.loads(body) if body.startswith(b"{") else body.decode()


def both(sides: Sides, endpoint: str, params: list[tuple[str, str]], method: str = "GET") -> tuple[Any, Any]:
    agent = ask(sides.agent.url, endpoint, params, method, sides.cert)
    prometheus = ask(sides.prometheus, endpoint, params, method)
    return agent, prometheus


WINDOW = [("start", str(time.time() - 600)), ("end", str(time.time() + 600))]


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize(("endpoint", "params"), [
    ("series", [("match[]", "watchdog_engine_up")]),
    ("series", [("match[]", 'watchdog_engine_up{job="vllm-llama"}'), ("match[]", "engine:requests_running"),
                *WINDOW]),
    ("series", [("match[]", '{__name__=~"watchdog_engine_.*", job=~"vllm.*"}')]),
    ("series", [("match[]", "watchdog_engine_up"), ("start", "0"), ("end", "10")]),  # before any sample
    ("labels", [("match[]", "watchdog_engine_gpu_info")]),
    ("labels", [("match[]", "watchdog_engine_up"), ("match[]", "engine:requests_running"), *WINDOW]),
    ("label/job/values", [("match[]", "watchdog_engine_up")]),
    ("label/instance/values", [("match[]", '{job="vllm-llama"}'), *WINDOW]),
    ("label/uuid/values", [("match[]", "watchdog_engine_gpu_info")]),
    ("label/__name__/values", [("match[]", '{job="vllm-llama"}')]),
    ("metadata", [("metric", "watchdog_engine_up")]),
    ("metadata", [("metric", "watchdog_engine_process_restarts_total")]),
    ("metadata", [("metric", "watchdog_engine_process_restarts_total"), ("limit_per_metric", "1")]),
    ("metadata", [("metric", "engine:requests_running")]),
    ("metadata", [("metric", "no_such_metric")]),
    ("metadata", [("limit", "0")]),
    ("query_exemplars", [("query", "watchdog_engine_up"), *WINDOW]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_same_answer_as_prometheus(sides: Sides, endpoint: str, params: list[tuple[str, str]], method: str) -> None:
    agent, prometheus = both(sides, endpoint, params, method)
    assert agent == prometheus
    # Prometheus 2.42 takes form POSTs for series, labels and exemplars; label values and metadata are
    # GET only (405), and so they are on the agent.
    assert prometheus[0] == (405 if method == "POST" and endpoint.startswith(("label/", "metadata")) else 200)


def test_metadata_of_every_stored_name_is_what_prometheus_read_from_the_page(sides: Sides) -> None:
    (code, ours), (_, theirs) = both(sides, "metadata", [])
    assert code == 200 and ours["status"] == "success"
    assert set(ours["data"]) == {"watchdog_engine_up", "watchdog_engine_process_restarts_total",
                                 "engine:requests_running", "watchdog_engine_gpu_info"}
    for name, entries in ours["data"].items():
        assert entries == theirs["data"][name], name
    (_, limited), _ = both(sides, "metadata", [("limit", "2")])
    assert len(limited["data"]) == 2


def test_buildinfo_has_prometheus_fields(sides: Sides) -> None:
    (code, ours), (_, theirs) = both(sides, "status/buildinfo", [])
    assert code == 200 and ours["status"] == "success"
    assert set(ours["data"]) == set(theirs["data"])
    assert ours["data"]["version"] == "2.42.0" and ours["data"]["revision"].startswith("inference-watchdog ")
    assert theirs["data"]["version"].startswith("2.")  # the Prometheus whose API the agent follows


@pytest.mark.parametrize(("endpoint", "params"), [
    ("series", []),
    ("series", [("match[]", "up{")]),
    ("series", [("match[]", "watchdog_engine_up"), ("start", "yesterday")]),
    ("label/1x/values", []),
    ("metadata", [("limit", "many")]),
    ("query_exemplars", [("query", "sum(")]),
])
def test_same_errors_as_prometheus(sides: Sides, endpoint: str, params: list[tuple[str, str]]) -> None:
    (code, ours), (their_code, theirs) = both(sides, endpoint, params)
    assert (code, ours["errorType"]) == (their_code, theirs["errorType"]), (ours, theirs)
    assert ours["status"] == "error"


def test_grafana_without_the_password_is_refused(sides: Sides) -> None:
    response = http_get(f"{sides.agent.url}/api/v1/status/buildinfo", cafile=sides.cert.cert)
    assert response.status == 401
    response = http_get(f"{sides.agent.url}/api/v1/metadata", cafile=sides.cert.cert, user="grafana", password="no")
    assert response.status == 401
