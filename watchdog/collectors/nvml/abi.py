"""NVML's C ABI as data: return codes and their classes, call enums, field ids, label vocabularies, and
the decoding of what NVML hands back (field values, strings, error codes).

Everything here is pure: no NVML calls. The numeric constants are NVML's C ABI (``nvml.h``) and equal
the same-named constants of ``pynvml`` (nvidia-ml-py); a test checks every one of them against the
installed ``pynvml`` and against :mod:`watchdog.fakes.pynvml`. They are kept here rather than read from the
injected module so that an older ``pynvml`` lacking a newer name still works.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# --- return codes (nvmlReturn_t) --------------------------------------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

#: The GPU itself is gone or unusable until reset: ``watchdog_gpu_lost 1``, the other GPUs go on.
GPU_GONE_CODES = frozenset({NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED})
#: NVML cannot work on this host at all (no driver, no library): "no data", quietly.
NVML_ABSENT_CODES = frozenset({NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED})
#: The session is broken (driver reloaded or upgraded under us): shut down and initialise again.
SESSION_BROKEN_CODES = frozenset(
    {NVML_ERROR_UNINITIALIZED, NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIB_RM_VERSION_MISMATCH}
)
#: The function or field does not exist here: the series is absent, quietly, and not asked again.
UNSUPPORTED_CODES = frozenset(
    {NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)

#: Short label values for error codes (``watchdog_gpu_nvml_errors_total{error}``).
ERROR_NAMES: Mapping[int, str] = {
    NVML_ERROR_UNINITIALIZED: "uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "invalid_argument",
    NVML_ERROR_NOT_SUPPORTED: "not_supported",
    NVML_ERROR_NO_PERMISSION: "no_permission",
    NVML_ERROR_NOT_FOUND: "not_found",
    NVML_ERROR_INSUFFICIENT_SIZE: "insufficient_size",
    NVML_ERROR_DRIVER_NOT_LOADED: "driver_not_loaded",
    NVML_ERROR_TIMEOUT: "timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "library_not_found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "function_not_found",
    NVML_ERROR_GPU_IS_LOST: "gpu_is_lost",
    NVML_ERROR_RESET_REQUIRED: "reset_required",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "lib_rm_version_mismatch",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "argument_version_mismatch",
    NVML_ERROR_UNKNOWN: "unknown",
}


def error_name(code: int | None) -> str:
    """A stable label value for an NVML return code (``code_<n>`` for codes we do not name)."""
    if code is None:
        return "unknown"
    return ERROR_NAMES.get(code, f"code_{code}")


# --- enums used as call arguments -------------------------------------------------------------------
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
#: ``nvmlMemory_v2``: the version tag that makes ``nvmlDeviceGetMemoryInfo`` report ``reserved``.
NVML_MEMORY_V2 = 0x02000028
#: Links probed by the legacy per-link calls when NVML cannot tell the link count (18 on Hopper).
LEGACY_MAX_LINKS = 18

#: Temperature thresholds: label ``kind`` → ``nvmlTemperatureThresholds_t``.
TEMPERATURE_THRESHOLDS: Mapping[str, int] = {
    "shutdown": NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
    "slowdown": NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    "mem_max": NVML_TEMPERATURE_THRESHOLD_MEM_MAX,
    "gpu_max": NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
}

# --- clock event ("throttle") reasons ----------------------------------------------------------------
#: Bit of ``nvmlDeviceGetCurrentClocksEventReasons`` → label ``reason``. The older throttle-reasons call
#: uses the same bits and adds ``board_limit`` and ``reliability``.
CLOCK_EVENT_REASONS: Mapping[int, str] = {
    0x0001: "gpu_idle",
    0x0002: "applications_clocks_setting",
    0x0004: "sw_power_cap",
    0x0008: "hw_slowdown",
    0x0010: "sync_boost",
    0x0020: "sw_thermal",
    0x0040: "hw_thermal",
    0x0080: "hw_power_brake",
    0x0100: "display_clock_setting",
    0x0200: "board_limit",
    0x0400: "reliability",
}


def clock_event_flags(active_mask: int, supported_mask: int | None) -> dict[str, float]:
    """``reason → 0/1`` for every reason the GPU supports (every known reason when that is unknown)."""
    out: dict[str, float] = {}
    for bit, reason in CLOCK_EVENT_REASONS.items():
        if supported_mask is not None and not supported_mask & bit:
            continue
        out[reason] = 1.0 if active_mask & bit else 0.0
    return out


# --- GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) ----------------------------------------
RECOVERY_ACTIONS: Mapping[int, str] = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}

# --- field values -------------------------------------------------------------------------------------
NVML_FI_DEV_ECC_CURRENT = 1
NVML_FI_DEV_ECC_SBE_VOL_TOTAL = 3
NVML_FI_DEV_ECC_DBE_VOL_TOTAL = 4
NVML_FI_DEV_ECC_SBE_AGG_TOTAL = 5
NVML_FI_DEV_ECC_DBE_AGG_TOTAL = 6
NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0 = 32  # L0..L5 = 32..37, L6..L11 = 96..101
NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0 = 39  # L0..L5 = 39..44, L6..L11 = 102..107
NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0 = 46  # L0..L5 = 46..51, L6..L11 = 108..113
NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0 = 53  # L0..L5 = 53..58, L6..L11 = 114..119
NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6 = 96
NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6 = 102
NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6 = 108
NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6 = 114
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_PCIE_REPLAY_COUNTER = 94
NVML_FI_DEV_REMAPPED_COR = 142
NVML_FI_DEV_REMAPPED_UNC = 143
NVML_FI_DEV_REMAPPED_PENDING = 144
NVML_FI_DEV_REMAPPED_FAILURE = 145
NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY = 161
NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY = 162
NVML_FI_DEV_NVLINK_ERROR_DL_CRC = 163
NVML_FI_DEV_NVLINK_GET_STATE = 165
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230

#: The per-link field ids with an ``_L<n>`` suffix exist for links 0..11 only.
LEGACY_PER_LINK_FIELDS = 12

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

_UNION_MEMBER: Mapping[int, str] = {
    NVML_VALUE_TYPE_DOUBLE: "dVal",
    NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def legacy_link_field(base_l0: int, base_l6: int, link: int) -> int | None:
    """The ``..._L<link>`` field id of a per-link counter family, or None for links past 11."""
    if link < 6:
        return base_l0 + link
    if link < LEGACY_PER_LINK_FIELDS:
        return base_l6 + link - 6
    return None


def decode_field_value(entry: Any) -> float:
    """The numeric value of one ``nvmlFieldValue_t`` whose ``nvmlReturn`` is success."""
    member = _UNION_MEMBER.get(int(entry.valueType), "ullVal")
    return float(getattr(entry.value, member))


def text(value: Any) -> str:
    """An NVML string: str (pynvml on Python 3) or bytes (structure fields, old pynvml)."""
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(value)


def error_code(exc: BaseException) -> int | None:
    """The ``nvmlReturn_t`` of an ``NVMLError`` (None when it carries none)."""
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) else None
