"""Drives the fake NVML from a scenario: per-GPU knobs, engine load and processes, faults, kernel log.

Each tick (:meth:`GpuSimulator.advance`, called by the agent before collecting) sets simulated time,
applies the knob values of the current step, lets the fake apply due faults, and appends the kernel-log
lines those faults print (Xid, fallen off the bus) plus scenario OOM kills to the file the kernel-log
collector follows. GPUs in an engine's TP group run busy under traffic and carry the engine process as a
compute process; the others idle (and, like real GPUs, drop their PCIe link to Gen1).
"""

from __future__ import annotations

from pathlib import Path

from watchdog.demo.scenario import ENGINE_KNOBS, Scenario, knob_value
from watchdog.fakes.pynvml import FakeNvml

BUSY_UTILIZATION = 92.0  # percent, a decoding TP group
ENGINE_MEMORY_RATIO = 0.9  # gpu_memory_utilization: weights + KV pool
NVML_FAULTS = {"xid", "gpu_lost", "pcie_downtrain", "nvlink_down", "nvlink_crc_burst", "ecc_uncorrectable",
               "row_remap_pending", "hw_slowdown", "thermal_throttle", "straggler", "clear"}


def profile_nvml(profile: str) -> FakeNvml:
    """A simulated node's NVML with the GPU profile ``profile`` (``h100-sxm-8``), at rest: what
    ``gpu status --fake`` and ``gpu smoke --fake`` read; raises ValueError naming the known profiles."""
    return FakeNvml.from_profile(profile)


def oom_kill_line(pid: int, process: str) -> str:
    """The kernel's OOM-killer line for a killed process (as printed by Linux 5.x/6.x)."""
    return (f"Out of memory: Killed process {pid} ({process}) total-vm:104857600kB, "
            f"anon-rss:94371840kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:190000kB oom_score_adj:0")


class GpuSimulator:
    """The demo's simulated GPUs; ``nvml`` is the fake module handed to the collectors."""

    def __init__(self, scenario: Scenario, kmsg_path: Path, start: float,
                 engine_pids: dict[str, int]) -> None:
        self.scenario = scenario
        self.kmsg_path = kmsg_path
        self.start = start
        self.nvml = FakeNvml.from_profile(scenario.profile)
        self.engine_pids = engine_pids
        self._oom_done: set[int] = set()
        self.nvml.schedule([
            {"at_seconds": f.at_seconds, "gpu": f.gpu, "fault": f.fault, "params": f.params}
            for f in scenario.faults if f.fault in NVML_FAULTS
        ])
        for engine in scenario.engines:
            pid = engine_pids.get(engine.job)
            for gpu in engine.gpus:
                total = self.nvml.gpus[gpu].memory_total_bytes
                if pid is not None:
                    self.nvml.set_processes(gpu, [(pid, int(total * ENGINE_MEMORY_RATIO))])

    def engine_busy(self, gpu: int, step: int) -> bool:
        """Whether the engine holding ``gpu`` (if any) is serving traffic at ``step``."""
        for engine in self.scenario.engines:
            if gpu in engine.gpus:
                arrival = knob_value(engine.knobs.get("arrival_rate", [None]), step, ENGINE_KNOBS["arrival_rate"])
                running = knob_value(engine.knobs.get("running", [None]), step, ENGINE_KNOBS["running"])
                stalled = knob_value(engine.knobs.get("generation_stall", [None]), step, 0.0) >= 0.5
                return (arrival > 0 or running > 0) and not stalled
        return False

    def advance(self, now: float) -> None:
        """Bring the simulated GPUs to wall-clock ``now`` (seconds since the epoch)."""
        elapsed = max(0.0, now - self.start)
        step = self.scenario.step_at(elapsed)
        knobs_by_gpu = {g.gpu: g.knobs for g in self.scenario.gpus}
        for index in range(len(self.nvml.gpus)):
            knobs = knobs_by_gpu.get(index, {})
            default_util = BUSY_UTILIZATION if self.engine_busy(index, step) else 0.0
            util = knob_value(knobs.get("utilization", [None]), step, default_util / 100) * 100
            mem_util = knob_value(knobs.get("memory_utilization", [None]), step, util * 0.6 / 100) * 100
            self.nvml.set_load(index, util, mem_util)
            values: dict[str, float | None] = {}
            if "temperature" in knobs:
                values["temperature_celsius"] = knob_value(knobs["temperature"], step, 0.0)
            if "memory_temperature" in knobs:
                values["memory_temperature_celsius"] = knob_value(knobs["memory_temperature"], step, 0.0)
            if "power" in knobs:
                values["power_watts"] = knob_value(knobs["power"], step, 0.0)
            if "memory_used_ratio" in knobs:
                ratio = knob_value(knobs["memory_used_ratio"], step, 0.0)
                values["memory_used_bytes"] = int(self.nvml.gpus[index].memory_total_bytes * ratio)
            if "sm_clock_ratio" in knobs:
                ratio = knob_value(knobs["sm_clock_ratio"], step, 1.0)
                values["sm_clock_mhz"] = int(self.nvml.gpus[index].sm_clock_max_mhz * ratio)
            if values:
                self.nvml.set(index, **values)
        self.nvml.set_time(elapsed)
        lines = self.nvml.drain_kmsg()
        for number, fault in enumerate(self.scenario.faults):
            if fault.fault == "oom_kill" and fault.at_seconds <= elapsed and number not in self._oom_done:
                self._oom_done.add(number)
                lines.append(oom_kill_line(int(fault.params.get("pid", 4242)),
                                           str(fault.params.get("process", "python3"))))
        if lines:
            with self.kmsg_path.open("a", encoding="utf-8") as handle:
                for line in lines:
                    handle.write(line + "\n")
