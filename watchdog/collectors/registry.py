"""The collector registry: every collector kind by name, and :func:`build_collectors`.

Contract: the name is the config section's name and the kind in logs; a factory gets the typed settings
and the :class:`~watchdog.collectors.base.CollectorContext` and returns zero or more collectors (none when
its section is disabled, one per endpoint for ``engines``). Adding a collector: a module with a factory,
one line here.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

from watchdog.collectors import engine_logs, engines, gpu_presence, host, kmsg, nvml, pod_resources, probe, processes
from watchdog.collectors.base import Collector, CollectorContext, NoData
from watchdog.config.settings import Settings

Factory = Callable[[Settings, CollectorContext], list[Collector]]

FACTORIES: dict[str, Factory] = {
    "engine_logs": engine_logs.engine_log_collectors,
    "engines": engines.engine_collectors,
    "gpu_presence": gpu_presence.gpu_presence_collectors,
    "host": host.host_collectors,
    "kmsg": kmsg.kmsg_collectors,
    "nvml": nvml.nvml_collectors,
    "pod_resources": pod_resources.pod_resources_collectors,
    "probes": probe.probe_collectors,
    "processes": processes.process_collectors,
}


def build_collectors(settings: Settings, context: CollectorContext) -> list[Collector]:
    """Every collector the settings enable, in registry-name order.

    All share one NVML module: the injected one (tests, the demo), else the real ``pynvml`` when it is
    importable (imported only; initialised by whoever first uses it). ``run`` injects none; without
    this the kernel-log collector could never map an Xid's PCI address to its GPU.
    """
    if context.nvml is None:
        with contextlib.suppress(NoData):  # no NVML on this node: each collector reports that its own way
            context = dataclasses.replace(context, nvml=nvml.import_pynvml())
    collectors: list[Collector] = []
    for _name, factory in sorted(FACTORIES.items()):
        collectors.extend(factory(settings, context))
    return collectors
