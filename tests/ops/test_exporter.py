"""The exporter over real loopback HTTP(S): TLS, basic auth, health/ready, gzip, cardinality caps, secrets."""

from __future__ import annotations

import logging
import socket
import ssl
import time
import urllib.error
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.loopback import page_handler, serving
from watchdog.collectors.base import CollectorRunner, ingest_results
from watchdog.collectors.engines import EngineCollector
from watchdog.config.settings import EngineSettings, ExporterSettings, section_settings
from watchdog.exporter.access import ExporterConfigError
from watchdog.exporter.collector import SeriesLimiter
from watchdog.exporter.security import BasicAuth, load_security
from watchdog.exporter.server import ExporterServer, accepts_gzip, exporter_for_store
from watchdog.infra.logs import JsonFormatter
from watchdog.model import Sample, metric
from watchdog.store import Store

from .conftest import http_get, make_cert, parse_metrics

NOW = 1_800_000_000.0
PASSWORD = "correct-horse-battery-staple-7"


def clock() -> float:
    return NOW


def store_with(samples: list[Sample]) -> Store:
    store = Store()
    store.ingest("test", samples, int(NOW * 1000))
    return store


BASE_SAMPLES = [
    Sample(metric("watchdog_gpu_temperature_celsius", gpu="0", uuid="GPU-0"), 61.0),
    Sample(metric("watchdog_ticks_total"), 12.0),
    Sample(metric("vllm:num_requests_running", job="vllm", instance="127.0.0.1:8000", model_name="m"), 3.0),
]


@pytest.fixture
def servers() -> Iterator[list[ExporterServer]]:
    started: list[ExporterServer] = []
    yield started
    for server in started:
        server.stop()


def exporter_settings(section: Mapping[str, Any] | None) -> ExporterSettings:
    """An ``exporter`` section with the config schema's defaults for what it leaves out."""
    return section_settings(ExporterSettings, "exporter", section)


def start(servers: list[ExporterServer], store: Store, section: Mapping[str, Any] | None = None,
          environ: dict[str, str] | None = None, ready: bool = True) -> ExporterServer:
    server = exporter_for_store(store, "127.0.0.1:0", ready=lambda: ready, section=exporter_settings(section),
                                clock=clock,
                                environ=environ or {})
    server.start()
    servers.append(server)
    return server


def test_plain_http_endpoints(servers: list[ExporterServer]) -> None:
    server = start(servers, store_with(BASE_SAMPLES), ready=False)
    metrics = http_get(server.url + "/metrics")
    assert metrics.status == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    values = parse_metrics(metrics.text)
    assert values['watchdog_gpu_temperature_celsius{gpu="0",uuid="GPU-0"}'] == 61.0
    assert values['vllm:num_requests_running{instance="127.0.0.1:8000",job="vllm",model_name="m"}'] == 3.0
    assert "# TYPE watchdog_ticks_total counter" in metrics.text  # typed from the catalogue
    assert http_get(server.url + "/-/healthy").status == 200
    assert http_get(server.url + "/-/ready").status == 503  # no completed tick yet
    assert http_get(server.url + "/nope").status == 404
    counted = parse_metrics(http_get(server.url + "/metrics").text)
    assert counted['watchdog_exporter_requests_total{code="503",handler="ready"}'] == 1.0
    assert counted['watchdog_exporter_requests_total{code="404",handler="other"}'] == 1.0


def test_stop_is_prompt_and_frees_the_port() -> None:
    """The accept loop sleeps until a connection comes (no polling), and stop wakes it at once."""
    started = time.monotonic()
    for _ in range(5):
        server = exporter_for_store(store_with(BASE_SAMPLES), "127.0.0.1:0", ready=lambda: True, clock=clock)
        server.start()
        assert http_get(f"{server.url}/-/healthy").status == 200
        port = server.port
        server.stop()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert time.monotonic() - started < 1.0  # polling every 0.5 s took about 2.5 s for these five


def test_ready_follows_the_agent(servers: list[ExporterServer]) -> None:
    state = {"ready": False}
    server = exporter_for_store(store_with([]), "127.0.0.1:0", ready=lambda: state["ready"], clock=clock)
    server.start()
    servers.append(server)
    assert http_get(server.url + "/-/ready").status == 503
    state["ready"] = True
    assert http_get(server.url + "/-/ready").status == 200


def test_gzip_when_accepted(servers: list[ExporterServer]) -> None:
    many = [Sample(metric("watchdog_host_cpu_seconds_total", cpu=str(i), mode="user"), float(i)) for i in range(200)]
    server = start(servers, store_with(many))
    plain = http_get(server.url + "/metrics")
    zipped = http_get(server.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in plain.headers
    assert zipped.headers["content-encoding"] == "gzip"
    assert len(zipped.body) < len(plain.body) / 3
    cpu = [k for k in parse_metrics(plain.text) if k.startswith("watchdog_host_cpu")]
    assert len(cpu) == 200
    assert [k for k in parse_metrics(zipped.text) if k.startswith("watchdog_host_cpu")] == cpu


def test_accept_encoding_parsing() -> None:
    assert accepts_gzip("gzip")
    assert accepts_gzip("deflate, gzip;q=0.5")
    assert accepts_gzip("*")
    assert not accepts_gzip("gzip;q=0")
    assert not accepts_gzip("identity")
    assert not accepts_gzip(None)


def test_tls_serves_https_only(servers: list[ExporterServer], tmp_path: Path) -> None:
    cert = make_cert(tmp_path)
    server = start(servers, store_with(BASE_SAMPLES),
                   {"tls": {"cert_file": str(cert.cert), "key_file": str(cert.key)}})
    assert server.url.startswith("https://")
    response = http_get(server.url + "/metrics", cafile=cert.cert)
    assert response.status == 200
    assert "watchdog_gpu_temperature_celsius" in response.text
    with pytest.raises((urllib.error.URLError, ssl.SSLError)):  # certificate not trusted
        http_get(server.url + "/metrics")
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP to a TLS port
        http_get(server.url.replace("https:", "http:") + "/metrics")
    # The server survived the failed handshakes.
    assert http_get(server.url + "/-/healthy", cafile=cert.cert).status == 200


def test_mutual_tls(servers: list[ExporterServer], tmp_path: Path) -> None:
    server_cert = make_cert(tmp_path, "server")
    client_cert = make_cert(tmp_path, "prometheus")
    server = start(servers, store_with(BASE_SAMPLES), {"tls": {
        "cert_file": str(server_cert.cert), "key_file": str(server_cert.key),
        "client_ca_file": str(client_cert.cert)}})
    ok = http_get(server.url + "/metrics", cafile=server_cert.cert, client_cert=client_cert)
    assert ok.status == 200
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        http_get(server.url + "/metrics", cafile=server_cert.cert)


def test_basic_auth(servers: list[ExporterServer], tmp_path: Path) -> None:
    cert = make_cert(tmp_path)
    section = {"tls": {"cert_file": str(cert.cert), "key_file": str(cert.key)},
               "basic_auth": {"username": "prometheus", "password_env": "EXPORTER_PASSWORD"}}
    server = start(servers, store_with(BASE_SAMPLES), section, environ={"EXPORTER_PASSWORD": PASSWORD})
    url = server.url + "/metrics"
    missing = http_get(url, cafile=cert.cert)
    assert missing.status == 401
    assert missing.headers["www-authenticate"].startswith("Basic ")
    assert http_get(url, cafile=cert.cert, user="prometheus", password="wrong").status == 401
    assert http_get(url, cafile=cert.cert, user="grafana", password=PASSWORD).status == 401
    good = http_get(url, cafile=cert.cert, user="prometheus", password=PASSWORD)
    assert good.status == 200
    assert http_get(url, cafile=cert.cert, user="prometheus", password=PASSWORD).status == 200  # cached path
    assert http_get(url, cafile=cert.cert, user="prometheus", password=PASSWORD + "x").status == 401
    # Probes stay open; the root page does not.
    assert http_get(server.url + "/-/healthy", cafile=cert.cert).status == 200
    assert http_get(server.url + "/-/ready", cafile=cert.cert).status == 200
    assert http_get(server.url + "/", cafile=cert.cert).status == 401
    final = http_get(url, cafile=cert.cert, user="prometheus", password=PASSWORD).text
    assert parse_metrics(final)['watchdog_exporter_requests_total{code="401",handler="metrics"}'] == 4.0
    assert PASSWORD not in final


def test_basic_auth_header_forms() -> None:
    auth = BasicAuth.from_password("u", "p4ss")
    assert PASSWORD not in repr(auth) and "p4ss" not in repr(auth)
    assert not auth.check(None)
    assert not auth.check("Bearer abc")
    assert not auth.check("Basic not-base64!!")
    assert not auth.check("Basic dTpw")  # u:p
    assert auth.check("Basic dTpwNHNz")  # u:p4ss


def test_password_file_reload_and_broken_reload(servers: list[ExporterServer], tmp_path: Path) -> None:
    secret = tmp_path / "exporter-password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    section = {"basic_auth": {"username": "prom", "password_file": str(secret)}}
    server = start(servers, store_with(BASE_SAMPLES), section)
    assert http_get(server.url + "/metrics", user="prom", password=PASSWORD).status == 200
    secret.write_text("rotated-password-2\n")
    server.reload(exporter_settings(section))
    assert http_get(server.url + "/metrics", user="prom", password=PASSWORD).status == 401
    assert http_get(server.url + "/metrics", user="prom", password="rotated-password-2").status == 200
    broken = {**section, "tls": {"cert_file": str(tmp_path / "missing.crt"), "key_file": str(tmp_path / "k")}}
    with pytest.raises(ExporterConfigError, match=r"exporter\.tls: cannot load certificate .*missing\.crt"):
        server.reload(exporter_settings(broken))
    assert server.url.startswith("http://")  # the running settings stayed
    assert http_get(server.url + "/metrics", user="prom", password="rotated-password-2").status == 200


@pytest.mark.parametrize(("section", "message"), [
    ({"tls": {"cert_file": "/x.crt"}}, r"exporter\.tls\.key_file: required"),
    ({"basic_auth": {"username": "u"}}, r"set password_env or password_file"),
    ({"basic_auth": {"password_env": "X"}}, r"exporter\.basic_auth\.username: required"),
    ({"basic_auth": {"username": "u", "password_env": "UNSET_VAR"}}, r"environment variable UNSET_VAR\) is empty"),
    ({"basic_auth": {"username": "u", "password_file": "/nonexistent/pw"}}, r"cannot read secret file /nonexistent/pw"),
    ({"basic_auth": {"username": "a:b", "password_env": "X"}}, r"must not contain ':'"),
])
def test_config_errors_name_the_key(section: dict[str, object], message: str) -> None:
    with pytest.raises(ExporterConfigError, match=message):
        load_security(exporter_settings(section), environ={})


def test_cardinality_cap_per_metric(servers: list[ExporterServer]) -> None:
    """An engine floods new label values (passed through): the exported series stay bounded and the drops
    are counted."""
    store = Store()
    server = start(servers, store, {"max_series_per_metric": 50, "pass_through_engine_series": True})

    def flood(first: int, count: int) -> None:
        samples = [Sample(metric("vllm:lora_requests_info", job="vllm", instance="h:8000", adapter=f"a{i:05d}"),
                          1.0) for i in range(first, first + count)]
        store.ingest("collector:engine:vllm", [*BASE_SAMPLES, *samples], int(NOW * 1000))

    flood(0, 500)
    first = parse_metrics(http_get(server.url + "/metrics").text)
    exported = {k for k in first if k.startswith("vllm:lora_requests_info")}
    assert len(exported) == 50
    assert first['watchdog_exporter_dropped_series_total{limit="per_metric"}'] == 450.0
    assert first['watchdog_ticks_total'] == 12.0  # other metrics unaffected
    # New values keep arriving (the old ones stay too): the same 50 series keep their slots.
    flood(0, 1000)
    second = parse_metrics(http_get(server.url + "/metrics").text)
    assert {k for k in second if k.startswith("vllm:lora_requests_info")} == exported
    assert second['watchdog_exporter_dropped_series_total{limit="per_metric"}'] == 450.0 + 950.0
    assert second["watchdog_exporter_series"] == 50 + len(BASE_SAMPLES)
    # The flood ends: its series go stale, the slots free up, nothing more is dropped.
    store.ingest("collector:engine:vllm", BASE_SAMPLES, int(NOW * 1000))
    third = parse_metrics(http_get(server.url + "/metrics").text)
    assert not any(k.startswith("vllm:lora_requests_info") for k in third)
    assert third['watchdog_exporter_dropped_series_total{limit="per_metric"}'] == 1400.0


def test_cardinality_cap_per_job() -> None:
    limiter = SeriesLimiter(max_per_metric=1000, max_per_job=30)
    series = [(metric(f"vllm:m{i % 5}", job="noisy", instance="h:1", k=str(i)), 1.0) for i in range(100)]
    series += [(metric("vllm:m0", job="calm", instance="h:2"), 1.0), (metric("watchdog_ticks_total"), 1.0)]
    kept = limiter.admit(series)
    jobs = [dict(labels).get("job") for labels, _ in kept]
    assert jobs.count("noisy") == 30
    assert jobs.count("calm") == 1
    assert None in jobs  # series without a job are not counted against any job
    assert limiter.dropped_total == {"per_metric": 0, "per_job": 70}


def test_limiter_memory_is_bounded() -> None:
    limiter = SeriesLimiter(max_per_metric=10, max_per_job=10_000)
    for round_ in range(20):
        limiter.admit([(metric("x", v=f"{round_}-{i}"), 1.0) for i in range(1000)])
    assert len(limiter._admitted) == 10


def test_no_secret_in_metrics_or_logs(servers: list[ExporterServer], tmp_path: Path,
                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = start(servers, store_with(BASE_SAMPLES),
                   {"basic_auth": {"username": "prom", "password_env": "PW"}}, environ={"PW": PASSWORD})
    for password in (PASSWORD, "wrong"):
        http_get(server.url + "/metrics", user="prom", password=password)
    body = http_get(server.url + "/metrics", user="prom", password=PASSWORD).text
    assert PASSWORD not in body
    formatter = JsonFormatter()
    logged = "\n".join(formatter.format(record) for record in caplog.records)
    assert PASSWORD not in logged
    record = logging.LogRecord("t", logging.ERROR, __file__, 1, f"oops {PASSWORD}", (), None)
    assert PASSWORD not in formatter.format(record)  # registered for redaction when it was read


ENGINE_PAYLOAD = b"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 7
"""


def exported_names(server: ExporterServer) -> set[str]:
    return {key.partition("{")[0] for key in parse_metrics(http_get(server.url + "/metrics").text)}


def test_engine_series_pass_through_is_opt_in_and_scrape_series_never_exported(
        servers: list[ExporterServer]) -> None:
    """A real engine collector scrapes a loopback vLLM page into the store, next to rule outputs: by
    default the exporter leaves out the engine's own series and always Prometheus' up/scrape_* names;
    ``pass_through_engine_series`` (applied by reload, like the other exporter settings) adds the former."""
    store = Store()
    with serving(page_handler(ENGINE_PAYLOAD)) as base:
        endpoint = section_settings(EngineSettings, "engines[]", {"url": base + "/metrics", "job": "vllm"})
        engine = EngineCollector(endpoint)
        runner = CollectorRunner([engine])
        ingest_results(store, runner.run_once(), int(NOW * 1000))
        runner.close()
    instance = base.removeprefix("http://")
    store.ingest("rules:serving/0", [
        Sample(metric("engine:requests_running", job="vllm", instance=instance, model_name="m"), 7.0),
        Sample(metric("ALERTS", alertname="EngineDown", alertstate="firing", job="vllm", instance=instance), 1.0),
    ], int(NOW * 1000))
    assert {"up", "scrape_duration_seconds", "vllm:num_requests_running"} <= set(store.names())  # rules read them
    server = start(servers, store)
    agent_and_rules = {"watchdog_engine_up", "watchdog_engine_scrape_duration_seconds",
                       "watchdog_engine_scrape_samples_scraped", "watchdog_engine_info", "engine:requests_running",
                       "ALERTS", "watchdog_collector_success"}
    prometheus_own = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
    names = exported_names(server)
    assert agent_and_rules <= names
    assert not names & (prometheus_own | {"vllm:num_requests_running"})
    assert parse_metrics(http_get(server.url + "/metrics").text)[
        f'watchdog_engine_up{{instance="{instance}",job="vllm"}}'] == 1.0

    server.reload(exporter_settings({"pass_through_engine_series": True}))
    names = exported_names(server)
    assert agent_and_rules | {"vllm:num_requests_running"} <= names
    assert not names & prometheus_own
    server.reload(exporter_settings({}))
    assert "vllm:num_requests_running" not in exported_names(server)


def test_a_port_in_use_is_an_os_error_naming_it() -> None:
    """A failed bind closes what the server opened and reports the OS error (not a half-built server's)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        exporter = exporter_for_store(Store(), f"127.0.0.1:{port}", ready=lambda: True)
        with pytest.raises(OSError) as info:
            exporter.start()
        assert info.value.errno is not None and "in use" in str(info.value).lower()
