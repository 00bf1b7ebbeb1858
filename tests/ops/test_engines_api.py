"""The serving endpoints on the real exporter: TLS and basic auth like the rest of /api/v1, the status
codes a health check reads, the list, the not-ready answers, and the request counter's handler label."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.verdicts import SettableVerdicts
from watchdog.config.settings import ExporterSettings, section_settings
from watchdog.exporter.server import ExporterServer, exporter_for_store
from watchdog.serving.model import Verdict, VerdictSource
from watchdog.store import Store

from .conftest import http_get, make_cert, parse_metrics

PASSWORD = "engines-api-password-41"


@pytest.fixture
def source() -> SettableVerdicts:
    return SettableVerdicts(["vllm-a", "vllm-b"])


@pytest.fixture
def secured(tmp_path: Path, source: SettableVerdicts) -> Iterator[tuple[ExporterServer, Path]]:
    cert = make_cert(tmp_path)
    section = section_settings(ExporterSettings, "exporter", {
        "tls": {"cert_file": str(cert.cert), "key_file": str(cert.key)},
        "basic_auth": {"username": "haproxy", "password_env": "PW"}})
    server = exporter_for_store(Store(), "127.0.0.1:0", ready=lambda: True, section=section,
                                environ={"PW": PASSWORD})
    holder: list[VerdictSource | None] = [source]
    server.verdicts = lambda: holder[0]
    server.start()
    yield server, cert.cert
    server.stop()


def test_health_and_list_behind_tls_and_auth(secured: tuple[ExporterServer, Path], source: SettableVerdicts) -> None:
    server, ca = secured
    health = server.url + "/api/v1/engines/vllm-a/health"
    assert http_get(health, cafile=ca).status == 401
    assert http_get(health, cafile=ca, user="haproxy", password="wrong").status == 401
    assert http_get(health, cafile=ca, user="haproxy", password=PASSWORD).status == 200
    for verdict, code in ((Verdict.SHED, 429), (Verdict.DRAIN, 503), (Verdict.DOWN, 503),
                          (Verdict.SHORT_ONLY, 200), (Verdict.ADMIT, 200)):
        source.set("vllm-a", verdict)
        answer = http_get(health, cafile=ca, user="haproxy", password=PASSWORD)
        assert answer.status == code, verdict
        assert answer.headers["content-type"] == "application/json"
        assert json.loads(answer.body)["verdict"] == verdict.value
    listing = http_get(server.url + "/api/v1/engines", cafile=ca, user="haproxy", password=PASSWORD)
    assert listing.status == 200
    assert [e["job"] for e in json.loads(listing.body)["data"]["engines"]] == ["vllm-a", "vllm-b"]
    assert http_get(server.url + "/api/v1/engines/nope/health", cafile=ca, user="haproxy",
                    password=PASSWORD).status == 404
    metrics = parse_metrics(http_get(server.url + "/metrics", cafile=ca, user="haproxy", password=PASSWORD).text)
    assert metrics['watchdog_exporter_requests_total{code="429",handler="engines"}'] == 1.0
    assert metrics['watchdog_exporter_requests_total{code="503",handler="engines"}'] == 2.0
    assert metrics['watchdog_exporter_requests_total{code="401",handler="engines"}'] == 2.0


def test_post_is_refused(secured: tuple[ExporterServer, Path]) -> None:
    server, ca = secured
    request = urllib.request.Request(server.url + "/api/v1/engines", data=b"x", method="POST", headers={
        "Authorization": "Basic " + base64.b64encode(f"haproxy:{PASSWORD}".encode()).decode()})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10, context=ssl.create_default_context(cafile=str(ca)))
    assert caught.value.code == 405


def test_without_a_source_the_list_is_unavailable_and_health_fails_open() -> None:
    server = exporter_for_store(Store(), "127.0.0.1:0", ready=lambda: False)
    server.verdicts = lambda: None
    server.start()
    try:
        listing = http_get(server.url + "/api/v1/engines")
        assert listing.status == 503
        assert json.loads(listing.body)["errorType"] == "unavailable"
        health = http_get(server.url + "/api/v1/engines/vllm-a/health")
        assert health.status == 200
        assert json.loads(health.body)["verdict"] == "unknown"
    finally:
        server.stop()


def test_without_verdicts_wired_the_paths_are_the_query_apis_404() -> None:
    server = exporter_for_store(Store(), "127.0.0.1:0", ready=lambda: True)
    server.start()
    try:
        assert http_get(server.url + "/api/v1/engines").status == 404
    finally:
        server.stop()
