"""The NVML collector: per-GPU health through a pynvml-compatible module (real or fake).

Its files each hold one concern: :mod:`.collector` (one collection: the per-GPU threads, the deadline,
the counters part), :mod:`.session` (init and shutdown with backoff, handles, each call's error
contract), :mod:`.reads` (what one GPU's read reads, lost GPUs), :mod:`.fields` (the batched field-value
plan), :mod:`.labels` (the label sets of a GPU's series), :mod:`.abi` (NVML's constants) and
:mod:`.catalogue` (the series).

Contract:

- Series and labels are those of docs/nvml.md and :data:`~watchdog.collectors.nvml.catalogue.NVML_SERIES`; every
  series carries ``gpu`` (NVML index) and ``uuid``; values are in base units.
- Errors are per call and per GPU. ``NOT_SUPPORTED`` (and a function or field the driver lacks) makes that
  series absent, quietly, and the call is not repeated until NVML is initialised again.
  ``GPU_IS_LOST`` / ``RESET_REQUIRED`` make ``watchdog_gpu_lost 1`` for that GPU (its other series are
  dropped) and the other GPUs go on. Any other NVML error on a call is counted in
  ``watchdog_gpu_nvml_errors_total{call,error}`` and that value is skipped.
- NVML absent (``pynvml`` not importable, LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED at init) raises
  :class:`NoData`: quiet, and ``nvmlInit`` is retried with exponential backoff, not every tick. Other init
  failures, and a session that breaks (UNINITIALIZED, driver reloaded), fail the collector with the same
  backoff before the next ``nvmlInit``.
- GPUs are read in parallel, each on its own daemon thread (a
  :class:`~watchdog.infra.workers.DaemonPool` of one per GPU, not a thread per read), and the collector
  waits for them together, at most ``gpu_deadline`` (0.8 × ``timeout_seconds``). A GPU whose read has
  not returned by then (NVML blocked on a sick GPU, e.g. GSP RPC timeouts) gets
  ``watchdog_gpu_nvml_stalled 1`` and its other series are skipped; the other GPUs are reported as
  usual, and the stalled read is not started again while it hangs. A call that hangs outside a GPU
  (``nvmlDeviceGetCount``) is bounded by the runner's timeout.
- Calls are batched: the ECC, row-remap, replay, energy, HBM-temperature, recovery-action and NVLink
  values of one GPU come from one ``nvmlDeviceGetFieldValues`` call (8 GPUs × 18 links: 8 calls), and
  static attributes (name, thresholds, max clocks, max PCIe link) are read once per ``static_refresh``.
- The counters (NVLink states and error counters, PCIe replays, ECC mode and corrected counts, remapped
  rows and their pending/failed flags: :data:`~watchdog.collectors.nvml.fields.COUNTER_SCALAR_SLOTS` and
  the NVLink slots) are read every ``counters_interval_seconds`` of tick time (``counters_clock``, the agent's
  clock), not every call, for every GPU at the same call; a GPU's first read after NVML (re)initialised or
  after it was lost, or after its static attributes were (re)read, reads its own at once. The counters
  and the series of the static attributes (temperature thresholds, max clocks, max PCIe link) are the
  collector's part ``counters`` (see :class:`~watchdog.collectors.base.Collected`), stored under
  ``collector:nvml:counters``: :meth:`NvmlCollector.collect` reports it only at a call that read counters or that
  changed which GPUs it covers (a GPU lost, stalled or back), holding every GPU read whole at that call
  (lost and stalled GPUs' are left out, so they go stale at once, as the rest of those GPUs' series do).
  Between reports the stored part stays as last read: not stale, no new point. Whether a GPU is lost
  (``GPU_IS_LOST``/``RESET_REQUIRED`` on any call), its recovery action, uncorrectable ECC counts,
  utilization, memory, temperatures, power, clocks, clock events and PCIe link are read and reported at
  every call.
"""

from watchdog.collectors.nvml.collector import COUNTERS_PART, NvmlCollector, nvml_collectors
from watchdog.collectors.nvml.session import CallStats, NvmlUnavailable, gpu_processes, import_pynvml

__all__ = ["COUNTERS_PART", "CallStats", "NvmlCollector", "NvmlUnavailable", "gpu_processes", "import_pynvml",
           "nvml_collectors"]
