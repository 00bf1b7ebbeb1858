"""The Node API client over real HTTPS on loopback, against a server that answers like the API server."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.apiserver import FakeApiServer, make_node, serving
from watchdog.kube.api import (
    ApiEndpoint,
    ForeignNodeRefused,
    KubeApiError,
    NodeApi,
    NotInCluster,
    in_cluster_endpoint,
)

TOKEN = "eyJhbGciOiJSUzI1NiJ9.service-account-token"


@pytest.fixture
def account(tmp_path: Path) -> Path:
    """A service-account directory (token, ca.crt) and the server's key beside it."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the API server's certificate")
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(tmp_path / "server.key"), "-out", str(folder / "ca.crt"), "-days", "2",
                    "-subj", "/CN=kubernetes", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    (folder / "token").write_text(TOKEN + "\n")
    return folder


@pytest.fixture
def https(account: Path) -> Iterator[tuple[FakeApiServer, str]]:
    api = FakeApiServer(TOKEN, {"gpu-node-7": make_node("gpu-node-7"), "gpu-node-8": make_node("gpu-node-8")})
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(account / "ca.crt", account.parent / "server.key")
    with serving(api, tls) as url:
        yield api, url


def client(url: str, account: Path, node: str = "gpu-node-7") -> NodeApi:
    host, port = url.removeprefix("https://").rsplit(":", 1)
    endpoint = in_cluster_endpoint({"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}, account)
    return NodeApi(endpoint, node, timeout=5)


def test_the_three_requests_are_exactly_what_the_api_server_expects(https: tuple[FakeApiServer, str],
                                                                     account: Path) -> None:
    api, url = https
    nodes = client(url, account)
    node = nodes.get_node("gpu-node-7")
    assert node["metadata"]["resourceVersion"] == "1000"
    cond = {"type": "GpuUnhealthy", "status": "True", "reason": "GpuXidFatal", "message": "GPU 3: fatal Xid 48",
            "lastHeartbeatTime": "2026-12-06T04:00:00Z", "lastTransitionTime": "2026-12-06T04:00:00Z"}
    after = nodes.set_condition("gpu-node-7", cond)
    assert [c["type"] for c in after["status"]["conditions"]] == ["Ready", "GpuUnhealthy"]  # Ready kept
    taints = [{"key": "inference-watchdog.io/gpu-unhealthy", "value": "GpuXidFatal", "effect": "NoSchedule"}]
    after = nodes.replace_taints("gpu-node-7", after["metadata"]["resourceVersion"], taints)
    assert after["spec"]["taints"] == taints
    assert [(s.method, s.path, s.content_type) for s in api.seen] == [
        ("GET", "/api/v1/nodes/gpu-node-7", ""),
        ("PATCH", "/api/v1/nodes/gpu-node-7/status", "application/strategic-merge-patch+json"),
        ("PATCH", "/api/v1/nodes/gpu-node-7", "application/json-patch+json"),
    ]
    assert {s.authorization for s in api.seen} == {f"Bearer {TOKEN}"}
    assert api.seen[1].body == {"status": {"conditions": [cond]}}
    assert api.seen[2].body == [{"op": "test", "path": "/metadata/resourceVersion", "value": "1001"},
                                {"op": "add", "path": "/spec/taints", "value": taints}]


def test_a_stale_resource_version_fails_instead_of_overwriting(https: tuple[FakeApiServer, str],
                                                                account: Path) -> None:
    api, url = https
    nodes = client(url, account)
    with pytest.raises(KubeApiError) as caught:
        nodes.replace_taints("gpu-node-7", "999", [])
    assert caught.value.status == 422 and "testing value /metadata/resourceVersion failed" in str(caught.value)
    assert "taints" not in api.nodes["gpu-node-7"]["spec"]


def test_another_node_is_refused_before_anything_is_sent(https: tuple[FakeApiServer, str], account: Path) -> None:
    api, url = https
    nodes = client(url, account)
    with pytest.raises(ForeignNodeRefused):
        nodes.get_node("gpu-node-8")
    with pytest.raises(ForeignNodeRefused):
        nodes.set_condition("gpu-node-8", {"type": "GpuUnhealthy", "status": "True"})
    with pytest.raises(ForeignNodeRefused):
        nodes.replace_taints("gpu-node-8", "1000", [])
    assert api.seen == []
    with pytest.raises(ValueError, match="not a Kubernetes node name"):
        NodeApi(ApiEndpoint(url, "t", None), "../nodes/gpu-node-8")


def test_errors_carry_the_api_message_never_the_token(https: tuple[FakeApiServer, str], account: Path) -> None:
    api, url = https
    (account / "token").write_text("rotated-token")  # the kubelet rotated it; the client reads it again
    with pytest.raises(KubeApiError) as caught:
        client(url, account).get_node("gpu-node-7")
    assert caught.value.status == 401 and "Unauthorized" in str(caught.value)
    assert api.seen[-1].authorization == "Bearer rotated-token"
    api.nodes.pop("gpu-node-7")
    (account / "token").write_text(TOKEN)
    with pytest.raises(KubeApiError) as caught:
        client(url, account).get_node("gpu-node-7")
    assert caught.value.status == 404 and 'nodes "gpu-node-7" not found' in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_the_server_certificate_is_checked_against_the_service_account_ca(
        https: tuple[FakeApiServer, str], account: Path, tmp_path: Path) -> None:
    api, url = https
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(other / "k"), "-out", str(other / "ca.crt"), "-days", "2",
                    "-subj", "/CN=impostor"], check=True, capture_output=True)
    (other / "token").write_text(TOKEN)
    with pytest.raises(KubeApiError) as caught:
        client(url, other).get_node("gpu-node-7")
    assert caught.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
    assert api.seen == []


def test_outside_a_pod_there_is_no_endpoint(account: Path, tmp_path: Path) -> None:
    with pytest.raises(NotInCluster, match="KUBERNETES_SERVICE_HOST"):
        in_cluster_endpoint({}, account)
    with pytest.raises(NotInCluster, match="token is missing"):
        in_cluster_endpoint({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                            tmp_path / "nothing")
    endpoint = in_cluster_endpoint({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
                                   account)
    assert endpoint.base_url == "https://[fd00::1]:443"
    assert endpoint.ca_file == str(account / "ca.crt")
