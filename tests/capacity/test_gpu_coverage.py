"""`plan` knows the GPUs inference fleets run (H100 PCIe and NVL, GH200, MI300X, L4 beside the SXM parts),
and calls a TP x PP group a replica in what it prints."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import pytest

from watchdog.capacity.catalogue import default_catalogue
from watchdog.cli import main


@pytest.mark.parametrize(("gpu", "bf16", "bandwidth"), [
    ("h100-pcie", 756, 2.0e12), ("h100-nvl", 835, 3.9e12), ("gh200", 989, 4.0e12),
    ("mi300x", 1307, 5.3e12), ("l4", 121, 300e9)])
def test_the_catalogue_has_the_gpu_with_dense_figures(gpu: str, bf16: float, bandwidth: float) -> None:
    spec = default_catalogue().gpus[gpu]
    assert spec.bf16_tflops == bf16 and spec.hbm_bytes_per_second == bandwidth
    assert spec.usable_bytes <= spec.memory_bytes * 1.1


def test_plan_output_counts_replicas() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["plan", "--model", "llama-3.1-70b", "--gpu", "h100-nvl", "--tp", "2", "--rate", "5",
                     "--prompt-tokens", "1000", "--output-tokens", "200"])
    assert code == 0
    text = out.getvalue()
    assert "(2 GPUs per replica)" in text and "B_max per replica" in text
    assert "replicas                   1 = ceil(" in text
    assert " nodes" not in text and "per node" not in text
