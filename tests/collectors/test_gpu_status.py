"""`gpu status`: every GPU in one table from the real NVML collector (here over the fake pynvml), and
`gpu smoke` as a subcommand (scripts/gpu-smoke is a thin wrapper over it)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

from watchdog.cli import main
from watchdog.collectors.nvml.smoke import gpu_rows, read_twice, status_table
from watchdog.fakes.pynvml import FakeNvml


def test_every_gpu_is_a_row_with_its_link_margin_and_flags() -> None:
    nvml = FakeNvml.from_profile("h100-sxm-8")
    for gpu in range(8):
        nvml.set_load(gpu, 90.0)
    nvml.set(3, temperature_celsius=89)  # 2 °C past its 87 °C gpu_max
    nvml.set(5, lost=True)
    rows = gpu_rows(read_twice(nvml, processes=False).samples)
    assert [r["gpu"] for r in rows] == list(range(8))  # not only the flagged ones
    assert all(r["uuid"].startswith("GPU-") and r["pci_bus_id"] for r in rows if r["gpu"] != 5)
    assert rows[0]["pcie_gen_max"] == 5 and rows[0]["pcie_width_max"] == 16
    assert rows[3]["slowdown_margin_celsius"] == -2
    assert rows[5]["flags"][:1] == ["LOST"]
    table = status_table(rows)
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["GPU", "NAME", "UUID", "PCI"] and len(lines) == 9
    assert "2 °C over" in lines[4]
    assert "(Gen5 x16)" in lines[1]


def test_the_commands_print_the_table_json_and_the_smoke_report() -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["gpu", "status", "--fake", "a100-sxm-8", "--json"]) == 0
    rows = json.loads(out.getvalue())
    assert len(rows) == 8 and rows[0]["name"]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["gpu", "smoke", "--fake", "a100-sxm-8", "--compact"]) == 0
    report = json.loads(out.getvalue())
    assert report["gpus"] == 8 and report["library"] == "fake:a100-sxm-8"
    assert main(["gpu", "status", "--fake", "z9000-sxm-1"]) == 2
