"""The catalogue's interconnects: how GPUs of a type reach each other, and the plan's warning when TP
spans more GPUs than the fast link joins (its all-reduce then crosses PCIe or the network)."""

from __future__ import annotations

import dataclasses

import pytest

from watchdog.capacity.catalogue import CatalogueError, Interconnect, default_catalogue, parse_catalogue
from watchdog.capacity.ledger import Parallelism
from watchdog.capacity.plan import Lengths, PlanInputs, Slo, make_plan

GPU = {"display": "Test GPU", "source": "https://example.invalid/", "memory_bytes": 80e9, "usable_bytes": 80e9,
       "bf16_tflops": 100, "fp8_tflops": None, "hbm_bytes_per_second": 1e12}


def test_shipped_baseboard_gpus_join_eight_over_nvlink_and_pcie_cards_none() -> None:
    gpus = default_catalogue().gpus
    for name in ("h100", "h200", "a100-80gb", "b200"):
        link = gpus[name].interconnect
        assert link is not None and link.peer_group == 8 and "NVLink" in link.link, name
    assert gpus["h100"].interconnect.peer_bytes_per_second == 900e9  # type: ignore[union-attr]
    assert gpus["h800"].interconnect.peer_bytes_per_second == 400e9  # type: ignore[union-attr]
    assert gpus["l40s"].interconnect == Interconnect("PCIe Gen4 x16 (no NVLink)", 64e9, 1)


@pytest.mark.parametrize(("raw", "message"), [
    ({"link": "x", "peer_bytes_per_second": 1e9}, "gpus.t.interconnect: peer_group"),
    ({"link": "x", "peer_bytes_per_second": 1e9, "peer_group": 0}, "peer_group: must be at least 1"),
    ({"link": "x", "peer_bytes_per_second": 1e9, "peer_group": 2, "bandwidth": 3}, "unknown key 'bandwidth'"),
    ("NVLink", "expected a mapping"),
])
def test_bad_interconnect_names_the_entry_and_key(raw: object, message: str) -> None:
    with pytest.raises(CatalogueError, match=message):
        parse_catalogue({"gpus": {"t": {**GPU, "interconnect": raw}}})


def test_interconnect_is_optional() -> None:
    assert parse_catalogue({"gpus": {"t": GPU}}).gpus["t"].interconnect is None


def plan_warnings(gpu_name: str, tp: int) -> list[str]:
    cat = default_catalogue()
    inputs = PlanInputs(model=cat.models["llama-3.1-8b"], gpu=cat.gpus[gpu_name], par=Parallelism(tp=tp),
                        lengths=Lengths(1000, 200, 1000, 200), slo=Slo(0.6, 0.03))
    return [w for w in make_plan(inputs).warnings if w.startswith(f"TP={tp},")]


def test_plan_warns_when_tp_crosses_the_fast_link() -> None:
    (warning,) = plan_warnings("l40s", 2)
    assert "meet only over PCIe Gen4 x16" in warning and "keep TP within 1" in warning
    assert plan_warnings("h100", 8) == []
    two_per_bridge = dataclasses.replace(default_catalogue().gpus["h100"],
                                         interconnect=Interconnect("NVLink bridge", 600e9, 2))
    inputs = PlanInputs(model=default_catalogue().models["llama-3.1-8b"], gpu=two_per_bridge,
                        par=Parallelism(tp=4), lengths=Lengths(1000, 200, 1000, 200), slo=Slo(0.6, 0.03))
    (bridged,) = [w for w in make_plan(inputs).warnings if w.startswith("TP=4,")]
    assert "NVLink bridge joins only 2" in bridged
