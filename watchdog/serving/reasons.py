"""The closed set of reason codes a verdict carries (:class:`watchdog.serving.model.Reason`.code).

Contract: every code the verdict engine emits is a key of :data:`REASON_CODES` (a test holds the engine to
it, and ``docs/routing.md`` lists them); the value says what the code means for an operator. A gateway may
act on the codes; new codes are added here, never invented at the call site.
"""

from __future__ import annotations

REASON_CODES: dict[str, str] = {
    # Capacity (the engine is healthy but full).
    "kv_free_low": "free KV cache below the verdict's band (short-only or shed)",
    "predicted_wait_over_ttft": "predicted queue wait above the engine's TTFT objective: shed rather than queue",
    # Unsafe faults (drain at once).
    "gpu_lost": "a GPU of the engine's tensor-parallel group fell off the bus or is lost to NVML",
    "gpu_needs_reset": "a GPU of the engine is flagged as needing a reset or reboot",
    "xid_fatal": "a fatal or critical Xid on a GPU of the engine",
    "engine_wedged": "the engine answers /metrics but not the canary completion",
    "collective_hang": "a collective (NCCL) of the engine hangs or timed out",
    "output_corrupt": "the canary's greedy output changed after an ECC Xid on its GPUs",
    "engine_restarting": "the engine process is crash-looping",
    # Unsafe faults that drain only where the drain guard allows.
    "canary_failing": "the canary's greedy output changed (no Xid): wrong weights or wrong results",
    "ecc_uncorrectable": "uncorrectable ECC errors on a GPU of the engine",
    "row_remap_failed": "a GPU of the engine could not remap a failing memory row",
    # Degraded but alive (reduced weight while the latency objectives burn).
    "degraded_link": "a degraded PCIe or NVLink link on a GPU of the engine",
    "thermal_slowdown": "hardware/thermal slowdown or a low thermal margin on a GPU of the engine",
    "tp_straggler": "one tensor-parallel rank of the engine straggles",
    "probe_slow": "the canary is slow while the engine is idle",
    # Not serving, or no data.
    "not_answering": "the engine's metrics endpoint does not answer (up 0)",
    "stale_data": "no reading of the engine newer than the staleness bound: the balancer keeps its own view",
    "agent_unhealthy": "the agent itself is unhealthy (ticks stalled, NVML or rules missing): fail open",
    # Decisions about the verdict itself.
    "manual": "an operator's manual state (engine drain / engine admit)",
    "drain_guard": "a drain was held back: too many engines out, or the rest cannot absorb the load",
    "hysteresis": "the readings propose another verdict, held until it persists",
}
