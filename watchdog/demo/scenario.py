"""Demo scenarios: YAML files that script simulated GPUs and engines over simulated time.

A scenario (see ``scenarios/*.yaml`` and ``docs/demo.md``)::

    name: long-context-bomb
    description: ...
    profile: h100-sxm-8            # fake NVML GPU profile
    interval: 1s                   # one simulated step; knob values advance one token per step
    duration: 120s                 # how long `demo` runs unless --duration says otherwise
    engines:
      - job: vllm-llama
        model: meta-llama/Llama-3.1-70B-Instruct
        gpus: [0, 1, 2, 3]         # the engine's TP group (fake NVML compute processes)
        knobs:                     # promtool expanding notation, one value per step; last value holds
          arrival_rate: '4x30 4+0.5x60'
          kv_usage: '0.4x30 0.4+0.01x55'
    gpus:
      - gpu: 3
        knobs: {temperature: '62+0.5x60', power: '400+5x60', utilization: '0.9'}
    faults:
      - {at: 20s, gpu: 2, fault: xid, params: {xid: 79}}
    expect:                        # what the demo (and its test) must see fire within `within`
      within: 30s
      alerts: [EngineKvCacheNearFull]
      also: [EnginePreemptionStorm]  # what else it causes at some point of its run (no time bound)
      never: [GpuFallenOffBus]       # what must never fire

Every alert a scenario fires is in ``alerts`` or ``also`` (its test checks this), so the demo calls an
alert "not in the scenario's expectations" only when it is a real surprise.

Contract: :func:`load_scenario` validates every key and notation string and raises
:class:`ScenarioError` naming the file and key; :func:`knob_value` returns a knob's value at a step,
holding the last value after the series ends and skipping omitted (``_``) samples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from watchdog.infra.paths import asset_dirs
from watchdog.promtool.notation import SeriesNotationError, expand_values

ENGINE_KNOBS: dict[str, float] = {
    "arrival_rate": 2.0,  # finished requests per second
    "running": 8.0,  # requests decoding
    "waiting": 0.0,  # requests queued
    "kv_usage": 0.35,  # KV cache usage ratio 0..1
    "prompt_tokens": 1200.0,  # mean prompt tokens per request
    "generation_tokens": 300.0,  # mean generated tokens per request
    "ttft": 0.18,  # median time to first token, seconds
    "tpot": 0.025,  # median time per output token, seconds
    "queue_time": 0.02,  # median queue time, seconds
    "preemption_rate": 0.0,  # preemptions per second
    "prefix_hit_ratio": 0.55,  # prefix cache hit ratio of prompt tokens
    "abort_ratio": 0.0,  # share of finished requests that were aborted (client gave up)
    "generation_stall": 0.0,  # 1 = no tokens generated although requests run (collective hang)
    "up": 1.0,  # 0 = the endpoint refuses scrapes
    "max_num_seqs": 64.0,  # requests the simulated OpenAI API decodes at once (read at start)
}
GPU_KNOBS = ("utilization", "memory_utilization", "temperature", "memory_temperature", "power",
             "memory_used_ratio", "sm_clock_ratio")
FAULTS = ("xid", "gpu_lost", "pcie_downtrain", "nvlink_down", "nvlink_crc_burst", "ecc_uncorrectable",
          "row_remap_pending", "hw_slowdown", "thermal_throttle", "straggler", "oom_kill", "clear")

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


class ScenarioError(ValueError):
    """A scenario file problem, naming the file and the key."""


def _engine_args(raw: Any, where: str) -> tuple[str, ...]:
    """``engine_args``: a list of strings (flags such as ``--max-num-seqs``, ``256``)."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(a, (str, int, float)) for a in raw):
        raise ScenarioError(f"{where}: must be a list of strings")
    return tuple(str(a) for a in raw)


def parse_duration(text: str | int | float, where: str = "") -> float:
    """``'90s'``, ``'2m'``, ``'500ms'`` or a plain number of seconds → seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    match = _DURATION.match(str(text).strip())
    if match is None:
        raise ScenarioError(f"{where}: invalid duration {text!r} (use 30s, 2m, 500ms)")
    value, unit = float(match.group(1)), match.group(2) or "s"
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]


@dataclass(frozen=True)
class EngineSpec:
    """One simulated engine endpoint."""

    job: str
    model: str
    gpus: tuple[int, ...]
    knobs: dict[str, list[float | None]]
    kind: str = "vllm"
    engine_args: tuple[str, ...] = ()  # the real engine's flags it stands for (its command line shows them)


@dataclass(frozen=True)
class GpuSpec:
    """Knob timelines for one simulated GPU."""

    gpu: int
    knobs: dict[str, list[float | None]]


@dataclass(frozen=True)
class Fault:
    """A fault injected at ``at_seconds`` of simulated time."""

    at_seconds: float
    fault: str
    gpu: int | None
    params: dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    """A loaded, validated scenario."""

    name: str
    description: str
    profile: str
    interval_seconds: float
    duration_seconds: float
    engines: tuple[EngineSpec, ...]
    gpus: tuple[GpuSpec, ...]
    faults: tuple[Fault, ...]
    expect_alerts: tuple[str, ...] = ()
    expect_within_seconds: float = 30.0
    forbid_alerts: tuple[str, ...] = ()
    also_alerts: tuple[str, ...] = ()
    source: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def step_at(self, elapsed_seconds: float) -> int:
        """The simulated step index ``elapsed_seconds`` after start."""
        return max(0, int(elapsed_seconds / self.interval_seconds))


def knob_value(values: list[float | None], step: int, default: float) -> float:
    """The knob's value at ``step``: the last non-omitted value at or before it, else ``default``."""
    for index in range(min(step, len(values) - 1), -1, -1):
        value = values[index]
        if value is not None:
            return value
    return default


def _knobs(raw: Any, allowed: tuple[str, ...] | dict[str, float], where: str) -> dict[str, list[float | None]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: knobs must be a mapping")
    out: dict[str, list[float | None]] = {}
    for key, text in raw.items():
        if key not in allowed:
            raise ScenarioError(f"{where}.{key}: unknown knob (known: {', '.join(sorted(allowed))})")
        try:
            out[key] = expand_values(str(text))
        except SeriesNotationError as exc:
            raise ScenarioError(f"{where}.{key}: {exc}") from exc
    return out


def _require(mapping: dict[str, Any], key: str, where: str) -> Any:
    if key not in mapping:
        raise ScenarioError(f"{where}: missing key {key!r}")
    return mapping[key]


def parse_scenario(doc: Any, source: str) -> Scenario:
    """Validate a parsed scenario document; raises :class:`ScenarioError` naming ``source`` and the key."""
    if not isinstance(doc, dict):
        raise ScenarioError(f"{source}: a scenario must be a mapping")
    known = {"name", "description", "profile", "interval", "duration", "engines", "gpus", "faults", "expect"}
    for key in doc:
        if key not in known:
            raise ScenarioError(f"{source}: {key}: unknown key")
    engines = []
    for i, raw in enumerate(doc.get("engines") or []):
        where = f"{source}: engines[{i}]"
        engines.append(EngineSpec(
            job=str(_require(raw, "job", where)),
            model=str(raw.get("model", "demo/model")),
            gpus=tuple(int(g) for g in raw.get("gpus", [])),
            knobs=_knobs(raw.get("knobs"), ENGINE_KNOBS, f"{where}.knobs"),
            kind=str(raw.get("kind", "vllm")),
            engine_args=_engine_args(raw.get("engine_args"), f"{where}.engine_args"),
        ))
        if engines[-1].kind not in ("vllm", "sglang"):
            raise ScenarioError(f"{where}.kind: must be vllm or sglang")
    gpus = []
    for i, raw in enumerate(doc.get("gpus") or []):
        where = f"{source}: gpus[{i}]"
        gpus.append(GpuSpec(gpu=int(_require(raw, "gpu", where)),
                            knobs=_knobs(raw.get("knobs"), GPU_KNOBS, f"{where}.knobs")))
    faults = []
    for i, raw in enumerate(doc.get("faults") or []):
        where = f"{source}: faults[{i}]"
        name = str(_require(raw, "fault", where))
        if name not in FAULTS:
            raise ScenarioError(f"{where}.fault: unknown fault {name!r} (known: {', '.join(FAULTS)})")
        faults.append(Fault(parse_duration(_require(raw, "at", where), f"{where}.at"), name,
                            int(raw["gpu"]) if "gpu" in raw else None, dict(raw.get("params") or {})))
    expect = doc.get("expect") or {}
    return Scenario(
        name=str(_require(doc, "name", source)),
        description=str(doc.get("description", "")).strip(),
        profile=str(doc.get("profile", "h100-sxm-8")),
        interval_seconds=parse_duration(doc.get("interval", "1s"), f"{source}: interval"),
        duration_seconds=parse_duration(doc.get("duration", "120s"), f"{source}: duration"),
        engines=tuple(engines),
        gpus=tuple(gpus),
        faults=tuple(sorted(faults, key=lambda f: f.at_seconds)),
        expect_alerts=tuple(expect.get("alerts", [])),
        expect_within_seconds=parse_duration(expect.get("within", "30s"), f"{source}: expect.within"),
        forbid_alerts=tuple(expect.get("never", [])),
        also_alerts=tuple(expect.get("also", [])),
        source=source,
    )


def scenario_dirs() -> list[Path]:
    """Where named scenarios are looked up (see :mod:`watchdog.infra.paths`)."""
    return asset_dirs("scenarios")


def list_scenarios() -> list[str]:
    """Names of every scenario found in :func:`scenario_dirs`."""
    names = {p.stem for d in scenario_dirs() for p in d.glob("*.yaml")}
    return sorted(names)


def load_scenario(name_or_path: str) -> Scenario:
    """A scenario by name (``long-context-bomb``) or by path to a YAML file."""
    path = Path(name_or_path)
    if not path.suffix:
        for folder in scenario_dirs():
            candidate = folder / f"{name_or_path}.yaml"
            if candidate.is_file():
                path = candidate
                break
        else:
            from watchdog.infra.suggest import did_you_mean

            known = list_scenarios()
            raise ScenarioError(f"no scenario named {name_or_path!r}{did_you_mean(name_or_path, known)} "
                                f"(known: {', '.join(known)})")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: invalid YAML: {exc}") from exc
    return parse_scenario(doc, str(path))
