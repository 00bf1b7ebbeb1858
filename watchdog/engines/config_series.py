"""Numeric series from engine configuration that engines publish only as label values.

vLLM exposes its KV cache configuration as an info-style gauge, ``vllm:cache_config_info`` (value 1),
with ``num_gpu_blocks``, ``block_size`` and ``gpu_memory_utilization`` as *labels*. PromQL cannot turn a
label value into a sample value, so capacity rules could not use them. The engine collector therefore
adds one numeric series per such label, next to the verbatim info series:

    watchdog_engine_kv_cache_blocks              num_gpu_blocks
    watchdog_engine_kv_cache_block_size_tokens   block_size
    watchdog_engine_gpu_memory_utilization_ratio gpu_memory_utilization

They keep the sample's target labels (``job``, ``instance``, configured extra labels) and ``engine`` /
``model_name`` where present, and drop every other config label. Values that are not finite numbers
(``None`` before the cache is profiled) produce no series. Pure: samples in, samples out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from watchdog.model import METRIC_NAME, Sample, make_labels

INFO_SERIES = "vllm:cache_config_info"

# label on the info series -> derived series name
DERIVED: dict[str, str] = {
    "num_gpu_blocks": "watchdog_engine_kv_cache_blocks",
    "block_size": "watchdog_engine_kv_cache_block_size_tokens",
    "gpu_memory_utilization": "watchdog_engine_gpu_memory_utilization_ratio",
}

KEPT_SOURCE_LABELS = ("engine", "model_name")


def config_series(samples: Iterable[Sample], target_label_names: Iterable[str]) -> list[Sample]:
    """Derived numeric series for every ``vllm:cache_config_info`` sample in ``samples``."""
    keep = set(KEPT_SOURCE_LABELS) | set(target_label_names)
    out: list[Sample] = []
    marker = (METRIC_NAME, INFO_SERIES)
    for sample in samples:
        # Labels are sorted: ``__name__`` comes first unless a label name sorts before it (upper case)
        first = sample.labels[0] if sample.labels else ("", "")
        if first[0] == METRIC_NAME:
            if first[1] != INFO_SERIES:
                continue
        elif marker not in sample.labels:
            continue
        labels = dict(sample.labels)
        base = {k: v for k, v in labels.items() if k in keep}
        for source, name in DERIVED.items():
            raw = labels.get(source, "")
            try:
                value = float(raw)
            except ValueError:
                continue
            if math.isfinite(value):
                out.append(Sample(make_labels({**base, METRIC_NAME: name}), value))
    return out
