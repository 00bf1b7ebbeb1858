"""The agent's verdict on itself: is it watching what it should? Health as data, never "ok" by default.

Contract:

- :func:`assess` is pure: from the rule count and one round of :class:`CollectResult` it returns the
  :class:`Problem` list (severity, check, what is wrong, what to do). No rules, no collectors, an engine
  that cannot be scraped (an engine scraped but over a store limit, its new series dropped, is a warning),
  NVIDIA GPUs whose driver is not loaded (or not installed for the running
  kernel), NVML that does not load on a GPU host, and NVML seeing fewer GPUs than expected are
  *unwatched* problems: critical, and ``/-/ready`` answers 503 while one lasts. Another failing
  collector is a warning. A host without NVIDIA hardware and without NVML is not a problem.
- :class:`Severity` carries the Nagios/Icinga plugin codes: 0 ok, 1 warning, 2 critical, 3 unknown.
- :func:`health_samples` exports ``watchdog_health`` (the worst code) and ``watchdog_health_problem
  {check,severity}`` (1 per current problem).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from watchdog.collectors.base import CollectResult
from watchdog.collectors.engines import NO_ENGINE_METRICS
from watchdog.model import Sample, metric, metric_name


class Severity(IntEnum):
    """Nagios/Icinga plugin exit codes; the order is the escalation order."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3

    @property
    def word(self) -> str:
        """``ok``, ``warning``, ``critical``, ``unknown``."""
        return self.name.lower()


@dataclass(frozen=True)
class Problem:
    """One thing the agent cannot vouch for, and what an operator does about it."""

    severity: Severity
    check: str
    message: str
    fix: str
    unwatched: bool = False  # something the agent should watch is not watched at all

    def to_json(self) -> dict[str, object]:
        """The ``check --json`` shape of a problem (docs/cli.md)."""
        return {"severity": self.severity.word, "check": self.check, "message": self.message,
                "fix": self.fix, "unwatched": self.unwatched}


def _value(result: CollectResult | None, name: str) -> float | None:
    if result is None:
        return None
    for sample in result.samples:
        if metric_name(sample.labels) == name:
            return sample.value
    return None


def _engine_problems(result: CollectResult) -> list[Problem]:
    job = result.name.split(":", 1)[1]
    # One ``up`` per scrape, among its last samples (engines.scrape_result_samples): look from the end.
    up = next((s for s in reversed(result.samples) if metric_name(s.labels) == "up"), None)
    if result.success and up is not None and up.value == 1.0:
        return []
    instance = dict(up.labels).get("instance", "") if up is not None else ""
    where = f" at {instance}" if instance else ""
    if up is not None and up.value == 1.0 and result.error.startswith(NO_ENGINE_METRICS):
        return [Problem(Severity.CRITICAL, result.name, f"engine {job}{where} {result.error}",
                        f"point engines[].url for job {job!r} at the engine's own metrics page (vLLM serves "
                        "/metrics on its API port; SGLang needs --enable-metrics)", unwatched=True)]
    if up is not None and up.value == 1.0:  # scraped and stored, less the series a store limit dropped
        return [Problem(Severity.WARNING, result.name, f"engine {job}{where} is scraped, but {result.error}",
                        f"stop the engine from putting per-request values in a label; raise "
                        f"max_label_values_per_metric or max_series_per_source only if "
                        f"{job!r} really serves that many series")]
    reason = result.error or "the scrape failed (up 0)"
    return [Problem(Severity.CRITICAL, result.name, f"engine {job}{where} cannot be scraped: {reason}",
                    f"check that the engine runs and serves /metrics (curl the URL in engines[] for job "
                    f"{job!r}); fix engines[].url if it moved", unwatched=True)]


def _gpu_problems(presence: CollectResult | None, nvml: CollectResult | None) -> list[Problem]:
    pci = _value(presence, "watchdog_gpu_pci_devices")
    loaded = _value(presence, "watchdog_gpu_driver_loaded")
    installed = _value(presence, "watchdog_gpu_driver_installed")
    expected = _value(presence, "watchdog_gpu_expected")
    gpus_on_bus = int(pci or 0)
    if gpus_on_bus and loaded == 0.0:
        if installed == 1.0:
            return [Problem(Severity.CRITICAL, "gpu_driver",
                            f"{gpus_on_bus} NVIDIA GPU(s) on the PCI bus, but the nvidia kernel module is not "
                            "loaded (often a kernel update whose module did not build or load)",
                            "read `dmesg | grep -i nvidia`, then `modprobe nvidia`; if the module does not "
                            "match the running kernel, rebuild it (`dkms autoinstall`) or boot the previous "
                            "kernel", unwatched=True)]
        return [Problem(Severity.CRITICAL, "gpu_driver",
                        f"{gpus_on_bus} NVIDIA GPU(s) on the PCI bus, but no nvidia kernel module is installed "
                        "for the running kernel",
                        "install the NVIDIA driver for this kernel (DKMS or the distribution's package), or "
                        "boot the kernel the driver was built for", unwatched=True)]
    if nvml is None:
        return []
    nvml_absent = nvml.success and nvml.error == "no data"
    wanted = int(expected or 0)
    if not nvml.success:
        return [Problem(Severity.CRITICAL, "nvml", f"NVML does not work: {nvml.error}",
                        "run `nvidia-smi`; a driver/library version mismatch needs the matching "
                        "libnvidia-ml or a reboot into the new driver", unwatched=True)]
    if nvml_absent and (gpus_on_bus or wanted):
        return [Problem(Severity.CRITICAL, "nvml",
                        f"this host should have {max(gpus_on_bus, wanted)} GPU(s) but NVML does not load",
                        "install nvidia-ml-py in the agent's environment and check that libnvidia-ml.so.1 "
                        "is on the library path (`nvidia-smi` uses it too)", unwatched=True)]
    seen = _value(nvml, "watchdog_gpu_nvml_devices")
    if seen is not None and seen < wanted:
        return [Problem(Severity.CRITICAL, "gpu_count",
                        f"NVML sees {int(seen)} GPU(s), {wanted} expected: a GPU vanished",
                        "compare `nvidia-smi -L` with `lspci -d 10de:`; a missing GPU needs a reset or a "
                        "reboot, then a hardware ticket if it stays missing", unwatched=True)]
    return []


def assess(rule_count: int, alerting_rule_count: int, results: Sequence[CollectResult]) -> list[Problem]:
    """Every current problem of the agent itself (see the module docstring); [] means healthy."""
    problems: list[Problem] = []
    if rule_count == 0:
        problems.append(Problem(Severity.CRITICAL, "rules", "no rules are loaded: nothing can alert",
                                "leave rules.paths empty to load the rule pack shipped with the package (plus "
                                "/etc/inference-watchdog/rules/*.yaml), or point it at rule files that exist; "
                                "check them with `inference-watchdog rules check`", unwatched=True))
    elif alerting_rule_count == 0:
        problems.append(Problem(Severity.WARNING, "rules", "only recording rules are loaded: nothing can alert",
                                "add alerting rules to rules.paths, or leave it empty for the shipped rule pack"))
    if not results:
        problems.append(Problem(Severity.CRITICAL, "collectors", "every collector is disabled: nothing is "
                                "collected", "enable collectors or add engines in the config", unwatched=True))
    by_name = {r.name: r for r in results}
    problems.extend(_gpu_problems(by_name.get("gpu_presence"), by_name.get("nvml")))
    gpus = (_value(by_name.get("nvml"), "watchdog_gpu_nvml_devices") or 0) + (
        _value(by_name.get("gpu_presence"), "watchdog_gpu_pci_devices") or 0)
    if results and not gpus and not any(r.name.startswith("engine:") for r in results):
        problems.append(Problem(Severity.WARNING, "scope", "no GPU and no engine to watch: only the host is "
                                "watched", "add the engines this node serves under engines[] (and check that "
                                "the NVIDIA driver is installed if this is a GPU host)"))
    for result in results:
        if result.name.startswith("engine:"):
            problems.extend(_engine_problems(result))
        elif not result.success and result.name != "nvml":
            problems.append(Problem(Severity.WARNING, result.name,
                                    f"collector {result.name} failed: {result.error}",
                                    "see the agent's log for this collector; its series are stale"))
    return problems


def worst(problems: Iterable[Problem]) -> Severity:
    """The most severe problem's severity; OK for none."""
    return max((p.severity for p in problems), default=Severity.OK)


def health_samples(problems: Sequence[Problem]) -> list[Sample]:
    """``watchdog_health`` (0/1/2/3, the worst) and one ``watchdog_health_problem`` per problem."""
    out = [Sample(metric("watchdog_health"), float(worst(problems)))]
    seen: set[tuple[str, str]] = set()
    for problem in problems:
        key = (problem.check, problem.severity.word)
        if key not in seen:
            seen.add(key)
            out.append(Sample(metric("watchdog_health_problem", check=problem.check,
                                     severity=problem.severity.word), 1.0))
    return out
