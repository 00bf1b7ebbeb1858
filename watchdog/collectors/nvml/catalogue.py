"""The series the NVML collector exports: type, help and labels of each (docs/nvml.md lists the same)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SeriesInfo:
    """One exported series: Prometheus type, help text and labels beyond ``gpu`` and ``uuid``."""

    type: str
    help: str
    labels: tuple[str, ...] = ()


#: Every series the NVML collector can emit (all carry ``gpu`` and ``uuid``).
NVML_SERIES: Mapping[str, SeriesInfo] = {
    "watchdog_gpu_info": SeriesInfo(
        "gauge", "GPU attributes; value 1.", ("name", "pci_bus_id", "driver_version", "serial")),
    "watchdog_gpu_lost": SeriesInfo("gauge", "1 when NVML reports the GPU lost or requiring a reset."),
    "watchdog_gpu_reset_required": SeriesInfo("gauge", "1 when NVML reports the GPU requires a reset."),
    "watchdog_gpu_nvml_stalled": SeriesInfo(
        "gauge", "1 while reading this GPU through NVML does not return within the collector's deadline."),
    "watchdog_gpu_utilization_ratio": SeriesInfo("gauge", "Fraction of the sample period a kernel ran."),
    "watchdog_gpu_memory_utilization_ratio": SeriesInfo(
        "gauge", "Fraction of the sample period device memory was read or written."),
    "watchdog_gpu_memory_used_bytes": SeriesInfo("gauge", "Device memory in use."),
    "watchdog_gpu_memory_total_bytes": SeriesInfo("gauge", "Device memory installed."),
    "watchdog_gpu_memory_reserved_bytes": SeriesInfo("gauge", "Device memory reserved by the driver."),
    "watchdog_gpu_temperature_celsius": SeriesInfo("gauge", "GPU core temperature."),
    "watchdog_gpu_memory_temperature_celsius": SeriesInfo("gauge", "HBM temperature."),
    "watchdog_gpu_temperature_threshold_celsius": SeriesInfo(
        "gauge", "Temperature thresholds: shutdown, slowdown, gpu_max, mem_max.", ("kind",)),
    "watchdog_gpu_power_watts": SeriesInfo("gauge", "Power draw."),
    "watchdog_gpu_power_limit_watts": SeriesInfo("gauge", "Enforced power limit."),
    "watchdog_gpu_energy_joules_total": SeriesInfo("counter", "Energy consumed since the driver loaded."),
    "watchdog_gpu_sm_clock_hertz": SeriesInfo("gauge", "Current SM clock."),
    "watchdog_gpu_sm_clock_max_hertz": SeriesInfo("gauge", "Maximum SM clock."),
    "watchdog_gpu_memory_clock_hertz": SeriesInfo("gauge", "Current memory clock."),
    "watchdog_gpu_memory_clock_max_hertz": SeriesInfo("gauge", "Maximum memory clock."),
    "watchdog_gpu_clock_event_active": SeriesInfo(
        "gauge", "1 while a clock event reason (throttle) is active.", ("reason",)),
    "watchdog_gpu_pcie_link_generation": SeriesInfo(
        "gauge", "PCIe link generation: current, max (of the link), gpu_max (of the GPU).", ("kind",)),
    "watchdog_gpu_pcie_link_width": SeriesInfo("gauge", "PCIe link width in lanes: current, max.", ("kind",)),
    "watchdog_gpu_pcie_replays_total": SeriesInfo("counter", "PCIe replay counter."),
    "watchdog_gpu_nvlink_up": SeriesInfo("gauge", "1 when the NVLink is active.", ("link",)),
    "watchdog_gpu_nvlink_errors_total": SeriesInfo(
        "counter", "NVLink data-link error counters: replay, recovery, crc_flit, crc_data.",
        ("link", "type")),
    "watchdog_gpu_ecc_mode_enabled": SeriesInfo("gauge", "1 when ECC is enabled (current mode)."),
    "watchdog_gpu_ecc_errors_total": SeriesInfo(
        "counter", "ECC error counts.", ("type", "scope")),
    "watchdog_gpu_remapped_rows": SeriesInfo(
        "gauge", "Rows remapped because of correctable or uncorrectable errors.", ("kind",)),
    "watchdog_gpu_row_remap_pending": SeriesInfo("gauge", "1 when a row remap awaits a GPU reset."),
    "watchdog_gpu_row_remap_failed": SeriesInfo("gauge", "1 when a row remap failed."),
    "watchdog_gpu_persistence_mode_enabled": SeriesInfo("gauge", "1 when persistence mode is on."),
    "watchdog_gpu_recovery_action": SeriesInfo(
        "gauge", "1 for the recovery action the driver asks for (state set).", ("action",)),
    "watchdog_gpu_processes": SeriesInfo("gauge", "Compute processes on the GPU."),
    "watchdog_gpu_process_memory_used_bytes": SeriesInfo(
        "gauge", "Device memory used by one compute process.", ("pid",)),
    "watchdog_gpu_nvml_errors_total": SeriesInfo(
        "counter", "NVML calls that failed other than NOT_SUPPORTED, per call and error.", ("call", "error")),
}
