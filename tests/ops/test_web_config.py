"""The exporter accepts the Prometheus exporter-toolkit web-config.yml (TLS + bcrypt basic_auth_users)."""

from __future__ import annotations

from pathlib import Path

import bcrypt
import pytest
import yaml

from watchdog.config.settings import ExporterSettings, section_settings
from watchdog.exporter.access import ExporterConfigError
from watchdog.exporter.security import load_security
from watchdog.exporter.server import ExporterServer, exporter_for_store
from watchdog.store import Store

from .conftest import http_get, make_cert

PASSWORD = "s3cret-scrape-pass"


def _settings(section: dict[str, object]) -> ExporterSettings:
    return section_settings(ExporterSettings, "exporter", section)


def _web_config(tmp_path: Path, doc: dict[str, object]) -> Path:
    path = tmp_path / "web-config.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_tls_and_bcrypt_users_from_web_config(tmp_path: Path) -> None:
    cert = make_cert(tmp_path)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)
    path = _web_config(tmp_path, {
        "tls_server_config": {"cert_file": cert.cert.name, "key_file": cert.key.name},  # relative to the file
        "basic_auth_users": {"prometheus": hashed}})
    server = exporter_for_store(Store(), "127.0.0.1:0", ready=lambda: True,
                                section=_settings({"web_config_file": str(path)}), environ={})
    server.start()
    try:
        _check_access(server, cert.cert)
    finally:
        server.stop()


def _check_access(server: ExporterServer, cafile: Path) -> None:
    assert server.url.startswith("https://")
    url = server.url + "/metrics"
    assert http_get(url, cafile=cafile).status == 401
    assert http_get(url, cafile=cafile, user="prometheus", password="wrong").status == 401
    assert http_get(url, cafile=cafile, user="prometheus", password=PASSWORD).status == 200
    assert http_get(url, cafile=cafile, user="prometheus", password=PASSWORD).status == 200  # cached
    assert http_get(server.url + "/-/healthy", cafile=cafile).status == 200


@pytest.mark.parametrize(("doc", "words"), [
    ({"http_server_config": {"http2": True}}, "http_server_config: not supported here"),
    ({"basic_auth_users": {"alice": "plaintext"}}, "basic_auth_users.alice: not a bcrypt hash"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "min_version": "TLS10"}}, "is not TLS12 or TLS13"),
    ({"tls_server_config": {"cert_file": "c", "key_file": "k", "client_auth_type": "RequireAndVerifyClientCert"}},
     "RequireAndVerifyClientCert and client_ca_file go together"),
])
def test_bad_web_configs_name_the_key(tmp_path: Path, doc: dict[str, object], words: str) -> None:
    with pytest.raises(ExporterConfigError, match=words):
        load_security(_settings({"web_config_file": str(_web_config(tmp_path, doc))}))


def test_web_config_and_basic_auth_are_exclusive(tmp_path: Path) -> None:
    with pytest.raises(ExporterConfigError, match="not both"):
        load_security(_settings({"web_config_file": str(_web_config(tmp_path, {})),
                                 "basic_auth": {"username": "x"}}))
