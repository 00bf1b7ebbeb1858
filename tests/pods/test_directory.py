"""The pod directory: labels for exported series and alerts (joined for shared GPUs, frozen per alert)."""

from __future__ import annotations

from watchdog.model import Alert, AlertState, metric
from watchdog.pods.directory import AlertPodLabels, PodDirectory, holder_labels
from watchdog.pods.podresources import PodRef

GPU0, GPU1 = "GPU-0000", "GPU-1111"
VLLM = PodRef("inference", "vllm-0", "engine")


def directory() -> PodDirectory:
    pods = PodDirectory()
    pods.update({GPU0: [VLLM], GPU1: [PodRef("b", "small-2", "m"), PodRef("a", "small-1", "m")]},
                {("vllm", "10.0.0.5:8000"): VLLM})
    return pods


def test_holder_labels_join_shared_gpus_sorted() -> None:
    assert holder_labels([VLLM]) == {"namespace": "inference", "pod": "vllm-0", "container": "engine"}
    assert holder_labels([PodRef("b", "p2", "m"), PodRef("a", "p1", "m")]) == {
        "namespace": "a,b", "pod": "p1,p2", "container": "m"}
    assert holder_labels([]) == {}


def test_relabel_adds_gpu_and_engine_pods_and_keeps_own_labels() -> None:
    pods = directory()
    gpu = metric("watchdog_gpu_temperature_celsius", gpu="0", uuid=GPU0)
    assert dict(pods.relabel(gpu)) == {**dict(gpu), "namespace": "inference", "pod": "vllm-0", "container": "engine"}
    shared = dict(pods.relabel(metric("watchdog_gpu_power_watts", gpu="1", uuid=GPU1)))
    assert (shared["namespace"], shared["pod"]) == ("a,b", "small-1,small-2")
    engine = metric("watchdog_engine_process_up", job="vllm", instance="10.0.0.5:8000")
    assert dict(pods.relabel(engine))["pod"] == "vllm-0"
    unknown = metric("watchdog_gpu_power_watts", gpu="2", uuid="GPU-2222")
    assert pods.relabel(unknown) is unknown
    own = metric("watchdog_gpu_power_watts", gpu="0", uuid=GPU0, pod="mine")
    assert dict(pods.relabel(own))["pod"] == "mine"


def test_relabel_keys_returns_the_same_list_while_nothing_changed() -> None:
    pods = directory()
    keys = [metric("watchdog_gpu_power_watts", gpu="0", uuid=GPU0)]
    first = pods.relabel_keys(keys)
    assert pods.relabel_keys(keys) is first
    pods.update({GPU0: [PodRef("other", "p", "c")]}, {})
    again = pods.relabel_keys(keys)
    assert again is not first and dict(again[0])["pod"] == "p"
    pods.update({}, {})
    assert pods.relabel_keys(keys) is keys  # nothing known: exported as stored


def _alert(fingerprint: str, state: AlertState = AlertState.FIRING, **labels: str) -> Alert:
    return Alert(name="GpuFallenOffBus", labels={"alertname": "GpuFallenOffBus", **labels}, annotations={},
                 state=state, value=1.0, fingerprint=fingerprint, active_at_ms=1)


def test_alert_labels_are_frozen_while_the_alert_lives() -> None:
    pods = directory()
    labeller = AlertPodLabels(pods)
    [first] = labeller.label([_alert("f1", gpu="0", uuid=GPU0)])
    assert (first.labels["pod"], first.fingerprint) == ("vllm-0", "f1")
    pods.update({GPU0: [PodRef("inference", "vllm-1", "engine")]}, {})  # the pod was rescheduled
    [still] = labeller.label([_alert("f1", gpu="0", uuid=GPU0)])
    assert still.labels["pod"] == "vllm-0"  # the pod that held the GPU when the fault began
    [resolved] = labeller.label([_alert("f1", AlertState.RESOLVED, gpu="0", uuid=GPU0)])
    assert resolved.labels["pod"] == "vllm-0"
    [again] = labeller.label([_alert("f1", gpu="0", uuid=GPU0)])  # a new episode reads the directory again
    assert again.labels["pod"] == "vllm-1"
    [plain] = labeller.label([_alert("f2", gpu="3", uuid="GPU-3333")])
    assert "pod" not in plain.labels


def test_alerts_wait_for_the_first_refresh() -> None:
    pods = PodDirectory()
    labeller = AlertPodLabels(pods)
    [early] = labeller.label([_alert("f1", gpu="0", uuid=GPU0)])
    assert "pod" not in early.labels  # nothing known yet, and nothing frozen
    pods.update({GPU0: [VLLM]}, {})
    [later] = labeller.label([_alert("f1", gpu="0", uuid=GPU0)])
    assert later.labels["pod"] == "vllm-0"
