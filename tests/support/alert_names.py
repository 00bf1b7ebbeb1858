"""The alert names fixed by issue 5 (docs, dashboards, runbooks and the rule pack use them)."""

ISSUE_5_ALERTS: tuple[str, ...] = (
    "GpuFallenOffBus", "GpuXidFatal", "GpuXidBurst", "GpuPcieLinkDegraded", "GpuPcieReplaysHigh",
    "GpuNvlinkDown", "GpuNvlinkErrorsHigh", "GpuEccUncorrectable", "GpuRowRemapPending", "GpuRowRemapFailed",
    "GpuHwSlowdown", "GpuThermalMarginLow", "EngineDown", "EngineKvCacheNearFull", "EnginePreemptionStorm",
    "EnginePrefixCacheThrashing", "EngineQueueBuildup", "EngineTtftSloBurn", "EngineTpotSloBurn",
    "EngineGoodputCollapse", "EngineRetryStorm", "EngineHeadroomLow", "TpStraggler", "TpCollectiveHang",
    "HostCpuContention", "HostNumaMismatch", "HostOomKill",
)

# Issue 13: GPUs that are not there or not usable until someone acts (rules/gpu-presence.yaml).
GPU_PRESENCE_ALERTS: tuple[str, ...] = ("GpuDriverNotLoaded", "GpuMissing", "GpuRecoveryRequired")
# Issue 15's alerts (the forecast in rules/engines.yaml, ...), kept apart from the issue-5 pack.
ISSUE_15_ALERTS: tuple[str, ...] = (
    "EngineKvExhaustionPredicted", "EngineWedged", "EngineProbeSlowWhileIdle", "EngineOutputChanged",
    "EngineConfigGpuMemoryUtilizationHigh", "EngineConfigMaxNumSeqsAboveBmax", "EngineConfigChunkedPrefillOff",
    "EngineConfigMaxModelLenOversized", "EngineConfigPrefixCachingOff", "EngineConfigNcclTimeoutsUnset",
    "EngineNcclTimeout",
)
# Issue 26: serving verdicts (rules/serving-verdicts.yaml): the drain/readmit notification and the drain guard's page.
SERVING_VERDICT_ALERTS: tuple[str, ...] = ("EngineDrained", "EngineDrainGuardHeld")
