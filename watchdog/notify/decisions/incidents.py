"""One incident, one cause: alerts that happen together on the same GPUs and engines become one incident.

A GPU that falls off the bus fires its own alert, and then every engine on it stalls, queues and burns
its SLO: six alerts about one fault. :func:`correlate` joins active alerts that touch the same GPU or
engine (directly, or through the engine's TP group in ``watchdog_engine_gpu_info``) and became active
within ``window_ms`` of each other, and ranks each group's alerts by :data:`CAUSES`: hardware faults
first (lost GPU, uncorrectable memory errors, fatal Xid, down or downtrained links), then slowdowns and
stragglers, then engine failures; everything else (queue, SLO, KV, retries) is a symptom. The top-ranked
alert is the probable cause, the others its symptoms, and the evidence lists what supports the cause.

:func:`render_incident` writes the message cause first (the first line names the GPU or link) with the
symptoms folded under it; :func:`inhibit_rules` gives Alertmanager the matching inhibition (a cause alert
mutes the symptom alerts of the same node and, where the cause names an engine, the same engine). Pure:
alerts and topology in, data out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from watchdog.model import Alert, AlertState

DEFAULT_WINDOW_MS = 10 * 60 * 1000

# alertname -> (rank, what it says as a cause; {labels} are filled from the alert). Higher rank wins.
CAUSES: dict[str, tuple[int, str]] = {
    "GpuFallenOffBus": (100, "GPU {gpu} fell off the bus"),
    "GpuEccUncorrectable": (95, "GPU {gpu} has uncorrectable ECC errors"),
    "GpuRowRemapFailed": (94, "GPU {gpu} failed a row remap"),
    "GpuXidFatal": (90, "GPU {gpu} reported fatal Xid {xid}"),
    "GpuNvlinkDown": (85, "NVLink {link} of GPU {gpu} is down"),
    "GpuPcieLinkDegraded": (80, "PCIe link of GPU {gpu} is downtrained"),
    "GpuNvlinkErrorsHigh": (75, "NVLink errors on GPU {gpu}"),
    "GpuPcieReplaysHigh": (70, "PCIe replays on GPU {gpu}"),
    "GpuRowRemapPending": (65, "GPU {gpu} needs a reset for a pending row remap"),
    "GpuHwSlowdown": (60, "GPU {gpu} is in hardware slowdown"),
    "GpuXidBurst": (55, "GPU {gpu} repeats Xid {xid}"),
    "GpuThermalMarginLow": (50, "GPU {gpu} is near its thermal limit"),
    "EngineNcclTimeout": (45, "NCCL timeout on rank {rank} of {job}"),
    "TpStraggler": (40, "GPU {gpu} straggles in the TP group of {job}"),
    "HostCpuContention": (35, "CPU contention on the host"),
    "HostNumaMismatch": (30, "{job} runs on the wrong NUMA node for GPU {gpu}"),
    "HostOomKill": (28, "the kernel OOM-killed {process}"),
    "EngineWedged": (25, "{job} is wedged"),
    "TpCollectiveHang": (20, "a collective of {job} hangs"),
    "EngineDown": (15, "{job} is down"),
}


@dataclass(frozen=True)
class Incident:
    """A probable cause, the symptoms it explains, and the evidence for the ranking."""

    cause: Alert
    symptoms: tuple[Alert, ...]
    gpus: tuple[str, ...]
    engines: tuple[str, ...]
    evidence: tuple[str, ...] = field(default=())

    @property
    def title(self) -> str:
        """What the cause says, with its labels filled in."""
        return cause_text(self.cause)


class NamedAlert(Protocol):
    """What :func:`cause_text` reads: a rule-engine :class:`Alert` or a notifier's snapshot of one."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> dict[str, str]: ...

    @property
    def annotations(self) -> dict[str, str]: ...


def is_known_cause(name: str) -> bool:
    """True for an alertname :data:`CAUSES` ranks as a probable cause."""
    return name in CAUSES


def cause_text(alert: NamedAlert) -> str:
    """The cause sentence of ``alert`` (its summary when it is not a known cause)."""
    known = CAUSES.get(alert.name)
    if known is None:
        return alert.annotations.get("summary", alert.name)
    labels = _Labels(alert.labels)
    return known[1].format_map(labels)


class _Labels(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "?"


def _rank(alert: Alert) -> tuple[int, int, int]:
    severity = {"critical": 2, "warning": 1}.get(alert.severity, 0)
    return (CAUSES.get(alert.name, (0, ""))[0], severity, -alert.active_at_ms)


def _keys(alert: Alert, engine_gpus: Mapping[tuple[str, str], frozenset[str]]) -> set[tuple[str, ...]]:
    """What the alert touches: its GPU, its engine, and the engine's GPUs."""
    labels = alert.labels
    keys: set[tuple[str, ...]] = set()
    if labels.get("gpu"):
        keys.add(("gpu", labels["gpu"]))
    job, instance = labels.get("job", ""), labels.get("instance", "")
    if job:
        matches = [k for k in engine_gpus if k[0] == job and (not instance or k[1] == instance)]
        keys.add(("engine", job))
        for key in matches:
            keys.update(("gpu", gpu) for gpu in engine_gpus[key])
    return keys


def correlate(alerts: Iterable[Alert], engine_gpus: Mapping[tuple[str, str], Iterable[str]],
              window_ms: int = DEFAULT_WINDOW_MS) -> list[Incident]:
    """Group active alerts into incidents (see the module docstring); strongest cause first.

    ``engine_gpus`` maps ``(job, instance)`` to the GPU indexes of the engine's TP group. Info-level
    alerts (findings, not failures) and alerts touching no GPU or engine stay out of incidents.
    """
    topology = {k: frozenset(v) for k, v in engine_gpus.items()}
    active = [a for a in alerts if a.state in (AlertState.PENDING, AlertState.FIRING) and a.severity != "info"]
    touched = [(a, _keys(a, topology)) for a in active]
    touched = [(a, k) for a, k in touched if k]
    parent = list(range(len(touched)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, (a, ka) in enumerate(touched):
        for j in range(i):
            b, kb = touched[j]
            if ka & kb and abs(a.active_at_ms - b.active_at_ms) <= window_ms:
                parent[find(i)] = find(j)
    groups: dict[int, list[tuple[Alert, set[tuple[str, ...]]]]] = {}
    for i, item in enumerate(touched):
        groups.setdefault(find(i), []).append(item)
    incidents = [_incident(members) for members in groups.values()]
    return sorted(incidents, key=lambda inc: _rank(inc.cause), reverse=True)


def _incident(members: Sequence[tuple[Alert, set[tuple[str, ...]]]]) -> Incident:
    ordered = sorted((a for a, _ in members), key=_rank, reverse=True)
    cause, symptoms = ordered[0], tuple(ordered[1:])
    keys = set().union(*(k for _, k in members))
    gpus = tuple(sorted({k[1] for k in keys if k[0] == "gpu"}, key=lambda g: (len(g), g)))
    engines = tuple(sorted({k[1] for k in keys if k[0] == "engine"}))
    rank = CAUSES.get(cause.name, (0, ""))[0]
    evidence = [f"{cause.name} ({cause.severity}) ranks highest: cause rank {rank} of 100 (hardware faults, "
                f"then slowdowns and stragglers, then engine failures; queue, SLO and KV alerts are symptoms)"]
    for alert in symptoms:
        where = alert.labels.get("job") or (f"GPU {alert.labels['gpu']}" if alert.labels.get("gpu") else "")
        lead = (alert.active_at_ms - cause.active_at_ms) / 1000
        evidence.append(f"{alert.name} on {where} began {lead:+.0f}s after the cause")
    return Incident(cause, symptoms, gpus, engines, tuple(evidence))


def symptom_causes(incidents: Iterable[Incident]) -> dict[str, str]:
    """Symptom fingerprint -> cause fingerprint, for notifiers that fold symptoms under their cause."""
    return {s.fingerprint: inc.cause.fingerprint for inc in incidents for s in inc.symptoms}


def incident_causes(alerts: Sequence[Alert],
                    engine_gpus: Callable[[], Mapping[tuple[str, str], Iterable[str]]]) -> dict[str, str]:
    """:func:`symptom_causes` of this tick's alerts, given the engines' TP groups.

    ``engine_gpus`` is called only when two alerts could form an incident (two active, non-info alerts
    that touch a GPU or an engine): a symptom needs a cause, so with fewer there is none, and the usual
    tick (no alert, or one) does not read the TP groups (a query over 15 minutes of the store)."""
    candidates = [a for a in alerts if a.state in (AlertState.PENDING, AlertState.FIRING)
                  and a.severity != "info" and (a.labels.get("gpu") or a.labels.get("job"))]
    if len(candidates) < 2:
        return {}
    return symptom_causes(correlate(alerts, engine_gpus()))


def render_incident(incident: Incident, node: str) -> str:
    """Plain text: the cause first (its first line names the GPU or link), symptoms folded below."""
    cause = incident.cause
    lines = [f"{incident.title} on {node} ({cause.severity}): probable cause of {len(incident.symptoms)} "
             f"related alert(s)",
             cause.annotations.get("summary", ""), ""]
    if incident.symptoms:
        lines.append("Symptoms:")
        lines += [f"- {a.name}: {a.annotations.get('summary', '')}" for a in incident.symptoms]
        lines.append("")
    lines.append("Evidence:")
    lines += [f"- {line}" for line in incident.evidence]
    if incident.engines:
        lines.append(f"- engines: {', '.join(incident.engines)}; GPUs: {', '.join(incident.gpus)}")
    return "\n".join(lines) + "\n"


INHIBITING_RANK = 80  # GPU-level causes that take an engine down for sure (not slowdowns or thermal warnings)


def inhibit_rules() -> list[dict[str, Any]]:
    """Alertmanager ``inhibit_rules``: causes mute the symptoms of the same node (and engine, if named).

    Symptoms are every non-info alert that is not a known cause. GPU-level causes (no ``job`` label) of
    rank :data:`INHIBITING_RANK` or more mute the symptoms of the same ``node``: a lost GPU, uncorrectable
    memory, a fatal Xid or a broken link take every engine of its TP group down, and the agent runs one
    node. Engine-level causes (straggler, NCCL timeout, hang, wedged, down) mute the same ``node`` and
    ``job``. Slowdowns, thermal and host warnings mute nothing: they may be unrelated to a symptom.
    """
    gpu_causes = sorted(n for n, (rank, _) in CAUSES.items() if n.startswith("Gpu") and rank >= INHIBITING_RANK)
    engine_causes = sorted(n for n in CAUSES if not n.startswith(("Gpu", "Host")))
    causes = "|".join(sorted(CAUSES))
    symptoms = [f'alertname!~"{causes}"', 'severity!="info"', 'alertname!~"Watchdog.*"']
    return [
        {"source_matchers": [f'alertname=~"{"|".join(gpu_causes)}"'], "target_matchers": symptoms,
         "equal": ["node"]},
        {"source_matchers": [f'alertname=~"{"|".join(engine_causes)}"'], "target_matchers": symptoms,
         "equal": ["node", "job"]},
    ]
