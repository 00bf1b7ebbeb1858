"""The field plan: which values one GPU is asked for through batched ``nvmlDeviceGetFieldValues`` calls,
and what their answers become.

A value is a :class:`FieldSlot` with the field requests that can answer it, best first; a
:class:`FieldPlanner` per GPU learns from the answers which request answers each slot (or that none
can) and sends only those. :func:`field_series` names the series each value becomes. Pure but for
:func:`field_batches`, which makes the calls through a :class:`~watchdog.collectors.nvml.session.GpuCalls`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from watchdog.collectors.nvml import abi as A
from watchdog.collectors.nvml.session import GpuCalls, GpuGone

FieldRequest = tuple[int, int]  # (fieldId, scopeId)
SlotKey = tuple[Any, ...]  # names one value: ("ecc", "corrected", "volatile"), ("nvlink", 3, "replay")


@dataclass(frozen=True)
class FieldSlot:
    """One value we want, with the field requests that can provide it, best first.

    ``key`` names the value (``("ecc", "corrected", "volatile")``, ``("nvlink", 3, "replay")``). The
    collector asks every candidate on its first pass, then only the first one the GPU answered.
    """

    key: SlotKey
    candidates: tuple[FieldRequest, ...]


#: Per-GPU scalar slots read through ``nvmlDeviceGetFieldValues`` every tick: values that move with
#: load (HBM temperature, energy), the driver's recovery action (part of the lost-GPU path) and the
#: uncorrectable ECC counts (GpuEccUncorrectable pages without a hold).
FAST_SCALAR_SLOTS: tuple[FieldSlot, ...] = (
    FieldSlot(("memory_temperature",), ((A.NVML_FI_DEV_MEMORY_TEMP, 0),)),
    FieldSlot(("energy_mj",), ((A.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, 0),)),
    FieldSlot(("ecc", "uncorrected", "volatile"), ((A.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, 0),)),
    FieldSlot(("ecc", "uncorrected", "aggregate"), ((A.NVML_FI_DEV_ECC_DBE_AGG_TOTAL, 0),)),
    FieldSlot(("recovery_action",), ((A.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 0),)),
)

#: Per-GPU scalar slots read every ``collectors.nvml.counters_interval_seconds``: error counters and
#: memory-health states that the rules read over minutes-long windows or behind holds (corrected ECC
#: errors are not alerted on).
COUNTER_SCALAR_SLOTS: tuple[FieldSlot, ...] = (
    FieldSlot(("pcie_replays",), ((A.NVML_FI_DEV_PCIE_REPLAY_COUNTER, 0),)),
    FieldSlot(("ecc_mode",), ((A.NVML_FI_DEV_ECC_CURRENT, 0),)),
    FieldSlot(("ecc", "corrected", "volatile"), ((A.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, 0),)),
    FieldSlot(("ecc", "corrected", "aggregate"), ((A.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, 0),)),
    FieldSlot(("remapped", "correctable"), ((A.NVML_FI_DEV_REMAPPED_COR, 0),)),
    FieldSlot(("remapped", "uncorrectable"), ((A.NVML_FI_DEV_REMAPPED_UNC, 0),)),
    FieldSlot(("remap_pending",), ((A.NVML_FI_DEV_REMAPPED_PENDING, 0),)),
    FieldSlot(("remap_failed",), ((A.NVML_FI_DEV_REMAPPED_FAILURE, 0),)),
)

#: Every per-GPU scalar slot read through ``nvmlDeviceGetFieldValues``.
SCALAR_SLOTS: tuple[FieldSlot, ...] = FAST_SCALAR_SLOTS + COUNTER_SCALAR_SLOTS

#: Read once per GPU (static): how many NVLinks it has.
LINK_COUNT_SLOT = FieldSlot(("nvlink_count",), ((A.NVML_FI_DEV_NVLINK_LINK_COUNT, 0),))


def nvlink_slots(link: int) -> tuple[FieldSlot, ...]:
    """The field slots of one NVLink: state and the four error counters.

    Newer drivers answer the scoped data-link fields (``scopeId`` = link) for every link; older ones only
    the ``_L<n>`` fields of links 0..11. Hopper reports no data-CRC counter, Blackwell none of the
    data-link counters: those slots are absent, quietly.
    """
    def legacy(base_l0: int, base_l6: int) -> tuple[FieldRequest, ...]:
        fid = A.legacy_link_field(base_l0, base_l6, link)
        return () if fid is None else ((fid, 0),)

    return (
        FieldSlot(("nvlink", link, "state"), ((A.NVML_FI_DEV_NVLINK_GET_STATE, link),)),
        FieldSlot(
            ("nvlink", link, "replay"),
            ((A.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, link),
             *legacy(A.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L0, A.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L6)),
        ),
        FieldSlot(
            ("nvlink", link, "recovery"),
            ((A.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY, link),
             *legacy(A.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L0, A.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_L6)),
        ),
        FieldSlot(
            ("nvlink", link, "crc_flit"),
            ((A.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, link),
             *legacy(A.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L0, A.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L6)),
        ),
        FieldSlot(
            ("nvlink", link, "crc_data"),
            legacy(A.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L0, A.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_L6),
        ),
    )


@functools.lru_cache(maxsize=8)
def all_slots(links: int) -> tuple[FieldSlot, ...]:
    """Every slot of a GPU with ``links`` NVLinks: the scalar ones, then each link's (a table per link
    count, built once)."""
    return SCALAR_SLOTS + tuple(slot for link in range(links) for slot in nvlink_slots(link))


#: Legacy per-link error-counter enum (``nvmlDeviceGetNvLinkErrorCounter``) per error type.
NVLINK_LEGACY_COUNTERS: Mapping[str, int] = {
    "replay": A.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": A.NVML_NVLINK_ERROR_DL_RECOVERY,
    "crc_flit": A.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    "crc_data": A.NVML_NVLINK_ERROR_DL_CRC_DATA,
}


@functools.lru_cache(maxsize=8)
def legacy_nvlink_keys(links: int) -> tuple[SlotKey, ...]:
    """The NVLink value keys of the per-link calls, in call order (per link: state, then counters)."""
    return tuple(("nvlink", link, kind) for link in range(links) for kind in ("state", *NVLINK_LEGACY_COUNTERS))

#: Largest number of field requests sent in one ``nvmlDeviceGetFieldValues`` call.
FIELD_BATCH_MAX = 128


def chunked(requests: list[FieldRequest], size: int = FIELD_BATCH_MAX) -> list[list[FieldRequest]]:
    """``requests`` split into batches of at most ``size``."""
    return [requests[i:i + size] for i in range(0, len(requests), size)]


#: Memo key of the field-values call as a whole (a driver without it answers FUNCTION_NOT_FOUND).
FIELD_VALUES_MEMO: tuple[str, ...] = ("nvmlDeviceGetFieldValues",)

#: Field-slot keys read at every call; every other slot is a counter.
FAST_KEYS = frozenset(slot.key for slot in FAST_SCALAR_SLOTS)

Convert = Callable[[float], float] | None  # None: the value as it is
Answers = dict[FieldRequest, tuple[int, float]]  # request -> (nvmlReturn, value)


def _is_code(code: int, value: float) -> float:
    return float(int(value) == code)


def field_series(key: SlotKey) -> list[tuple[str, dict[str, str], Convert]]:
    """The series one field-slot value becomes: (name, labels beyond gpu/uuid, value conversion or None
    for the value as it is) each."""
    head = key[0]
    if head == "memory_temperature":
        return [("watchdog_gpu_memory_temperature_celsius", {}, None)]
    if head == "energy_mj":
        return [("watchdog_gpu_energy_joules_total", {}, lambda v: v / 1000.0)]
    if head == "pcie_replays":
        return [("watchdog_gpu_pcie_replays_total", {}, None)]
    if head == "ecc_mode":
        return [("watchdog_gpu_ecc_mode_enabled", {}, lambda v: float(v == A.NVML_FEATURE_ENABLED))]
    if head == "ecc":
        return [("watchdog_gpu_ecc_errors_total", {"type": key[1], "scope": key[2]}, None)]
    if head == "remapped":
        return [("watchdog_gpu_remapped_rows", {"kind": key[1]}, None)]
    if head == "remap_pending":
        return [("watchdog_gpu_row_remap_pending", {}, lambda v: float(v != 0))]
    if head == "remap_failed":
        return [("watchdog_gpu_row_remap_failed", {}, lambda v: float(v != 0))]
    if head == "recovery_action":
        return [("watchdog_gpu_recovery_action", {"action": action},
                 functools.partial(_is_code, code))
                for code, action in A.RECOVERY_ACTIONS.items()]
    if head == "nvlink" and key[2] == "state":
        # 1 = active (field and legacy call alike), 2 = sleep (idle power saving, still trained).
        return [("watchdog_gpu_nvlink_up", {"link": str(key[1])}, lambda v: float(int(v) in (1, 2)))]
    if head == "nvlink":
        return [("watchdog_gpu_nvlink_errors_total", {"link": str(key[1]), "type": key[2]}, None)]
    return []


def field_batches(calls: GpuCalls, handle: Any, requests: list[FieldRequest]) -> list[Any] | None:
    """The entries of each batched ``nvmlDeviceGetFieldValues`` call for ``requests`` (None for a batch
    whose call failed: counted as an error, its values skipped this tick); None when the call itself is
    unavailable (old driver)."""
    batches: list[Any] = []
    for batch in chunked(requests):
        entries = calls.call("fields", "nvmlDeviceGetFieldValues", handle, batch, memo=FIELD_VALUES_MEMO)
        if entries is None and FIELD_VALUES_MEMO in calls.unsupported:
            return None
        batches.append(entries)
    return batches


def answers(batches: list[Any]) -> Answers:
    """(nvmlReturn, value) per request answered in ``batches`` (see :func:`field_batches`)."""
    out: Answers = {}
    decode = A.decode_field_value
    for entries in batches:
        for entry in entries or ():
            ret = int(entry.nvmlReturn)
            out[(int(entry.fieldId), int(entry.scopeId))] = (ret, decode(entry) if ret == 0 else 0.0)
    return out


def field_answers(calls: GpuCalls, handle: Any, requests: list[FieldRequest]) -> Answers | None:
    """The answers to ``requests`` from batched calls; None when the call itself is unavailable."""
    batches = field_batches(calls, handle, requests)
    return None if batches is None else answers(batches)


class FieldPlanner:
    """Which field requests to send for one GPU, learning from the answers.

    A slot whose candidates are all unsupported is dropped; a slot answered by one candidate keeps only
    that one. Pure bookkeeping; the caller makes the NVML calls.
    """

    def __init__(self) -> None:
        self.chosen: dict[SlotKey, FieldRequest | None] = {}
        """Per slot: the request that answers it, or None when none can."""

    def requests(self, slots: Sequence[FieldSlot]) -> list[FieldRequest]:
        """Unique requests, in slot order, for every slot still worth asking."""
        out: dict[FieldRequest, None] = {}
        for slot in slots:
            if slot.key not in self.chosen:
                out.update(dict.fromkeys(slot.candidates))
            elif (choice := self.chosen[slot.key]) is not None:
                out[choice] = None
        return list(out)

    def resolve(self, slots: Sequence[FieldSlot], answers: Answers,
                ) -> tuple[dict[SlotKey, float], list[FieldRequest]]:
        """Values per slot key from ``answers``, and the requests that failed with an unexpected error.
        Raises :class:`GpuGone` when any answer says so."""
        values: dict[SlotKey, float] = {}
        failed: list[FieldRequest] = []
        for slot in slots:
            if slot.key in self.chosen and self.chosen[slot.key] is None:
                continue
            candidates = [self.chosen[slot.key]] if slot.key in self.chosen else list(slot.candidates)
            unsupported = 0
            for request in candidates:
                assert request is not None
                if request not in answers:
                    continue
                ret, value = answers[request]
                if ret == A.NVML_SUCCESS:
                    values[slot.key] = value
                    self.chosen[slot.key] = request
                    break
                if ret in A.GPU_GONE_CODES:
                    raise GpuGone(ret)
                if ret in A.UNSUPPORTED_CODES or ret == A.NVML_ERROR_INVALID_ARGUMENT:
                    unsupported += 1
                else:
                    failed.append(request)
            if slot.key not in values and unsupported == len(candidates):
                self.chosen[slot.key] = None
        return values, failed

    def unanswerable(self, keys: Sequence[SlotKey]) -> list[SlotKey]:
        """Those of ``keys`` no field can answer on this GPU (all candidates unsupported), in order."""
        return [key for key in keys if key in self.chosen and self.chosen[key] is None]
