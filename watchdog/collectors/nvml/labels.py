"""The labels of one GPU's series: every sample carries ``gpu`` (the NVML index) and ``uuid``.

A :class:`SampleSink` builds one GPU's samples; the label sets it makes are kept in that GPU's
:class:`GpuLabels` across calls (the same series at every call), so that a steady call builds no new
label set. A GPU whose index comes back with another uuid gets new ones (the caller's part).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from watchdog.collectors.nvml.fields import Convert, SlotKey, field_series
from watchdog.model import METRIC_NAME, Labels, Sample, make_labels, metric

FieldSeries = tuple[tuple[Labels, Convert], ...]  # the series one value becomes, with its conversion


@dataclass
class GpuLabels:
    """The label sets of one GPU's series, kept across calls (for one ``uuid`` only)."""

    uuid: str
    samples: dict[Any, Labels] = field(default_factory=dict)
    """Per name and extra labels: the labels of one sample."""
    fields: dict[Any, FieldSeries] = field(default_factory=dict)
    """Per field-slot key (and per flag set): its series."""


def info_labels(index: int, identity: tuple[str, str, str, str], driver_version: str) -> Labels:
    """The labels of ``watchdog_gpu_info`` for GPU ``index`` of ``identity`` (name, uuid, serial, PCI bus)."""
    name, uuid, serial, pci = identity
    return make_labels({METRIC_NAME: "watchdog_gpu_info", "gpu": str(index), "uuid": uuid, "name": name,
                        "pci_bus_id": pci, "driver_version": driver_version, "serial": serial})


class SampleSink:
    """Collects samples of one GPU, adding ``gpu`` and ``uuid`` to each, with label sets from ``labels``
    (which must belong to this GPU)."""

    def __init__(self, gpu: int, labels: GpuLabels) -> None:
        self.gpu = str(gpu)
        self.labels = labels
        self.samples: list[Sample] = []

    def add(self, name: str, value: float | None, **labels: str) -> None:
        """Append one sample unless ``value`` is None (not read)."""
        if value is None:
            return
        key = (name, *labels.items()) if labels else name
        known = self.labels.samples.get(key)
        if known is None:
            known = self.labels.samples[key] = metric(name, gpu=self.gpu, uuid=self.labels.uuid, **labels)
        self.samples.append(Sample(known, float(value)))

    def add_flags(self, name: str, label: str, flags: dict[str, float]) -> None:
        """Append one sample per ``flags`` item, ``label`` set to its key."""
        key = (name, label, *flags)
        series = self.labels.fields.get(key)
        if series is None:
            series = self.labels.fields[key] = tuple(
                (metric(name, gpu=self.gpu, uuid=self.labels.uuid, **{label: value}), None) for value in flags)
        self.samples.extend(Sample(labels, value) for (labels, _), value in zip(series, flags.values(), strict=True))

    def add_field(self, key: SlotKey, value: float) -> None:
        """Append the samples of one field-slot value (see :func:`field_series`)."""
        series = self.labels.fields.get(key)
        if series is None:
            series = self.labels.fields[key] = tuple(
                (metric(name, gpu=self.gpu, uuid=self.labels.uuid, **labels), convert)
                for name, labels, convert in field_series(key))
        for labels, convert in series:
            self.samples.append(Sample(labels, float(value if convert is None else convert(value))))
