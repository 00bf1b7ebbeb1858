"""/var/log/containers names to namespace, pod and container."""

from __future__ import annotations

from pathlib import Path

from watchdog.pods.containers import container_index, parse_container_log_name, read_container_index
from watchdog.pods.podresources import PodRef

CID = "ab12" * 16


def test_log_name_splits_into_pod_namespace_container_and_id() -> None:
    name = f"vllm-llama-70b-7d9f8c6b5-x2k4q_inference_vllm-{CID}.log"
    assert parse_container_log_name(name) == (CID, PodRef("inference", "vllm-llama-70b-7d9f8c6b5-x2k4q", "vllm"))


def test_names_that_are_not_container_logs_are_ignored() -> None:
    assert parse_container_log_name("kube-proxy.log") is None
    assert parse_container_log_name(f"pod_ns_container-{CID[:-1]}.log") is None  # id too short
    assert container_index(["x.log", f"a_b_c-{CID}.log"]) == {CID: PodRef("b", "a", "c")}


def test_read_container_index_lists_a_directory(tmp_path: Path) -> None:
    (tmp_path / f"sglang-0_serving_engine-{CID}.log").symlink_to(tmp_path / "missing-target")
    assert read_container_index(tmp_path) == {CID: PodRef("serving", "sglang-0", "engine")}
    assert read_container_index(tmp_path / "absent") == {}
