"""PCI bus ids as the kernel log and NVML spell them, normalised to one form.

Contract: :func:`normalize_pci_bus_id` turns every spelling seen in NVIDIA kernel messages and NVML into
lowercase ``dddd:bb:dd`` (domain 4 hex digits, bus 2, device 2, function dropped), or ``None`` when the
text is missing, redacted (``PCI:0000:xx:00``, ``PCI:...``, ``<redacted>``) or not a PCI address at all.
Spellings handled: ``PCI:0000:3b:00`` (Xid), ``0000:3b:00.0`` (SXid, fallen-off-bus), ``3b:00.0`` (no
domain), ``00000000:3B:00.0`` (NVML's 8-digit domain), ``0001:00`` (very old drivers: bus, device).

:func:`nvml_gpus` reads index, UUID and bus id of every GPU from a pynvml-compatible module, one GPU at a
time, so that one broken GPU does not hide the others.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_HEX = "0-9a-fA-F"
_THREE_PART = re.compile(rf"^([{_HEX}]{{1,8}}):([{_HEX}]{{1,2}}):([{_HEX}]{{1,2}})(?:\.[0-7])?$")
_TWO_PART = re.compile(rf"^([{_HEX}]{{1,4}}):([{_HEX}]{{1,2}})(?:\.[0-7])?$")

# A PCI address inside free text: with domain (``0000:3b:00.0``, function optional) or without a domain
# but then with a function (``3b:00.0``), so that ``10de:2330`` (a PCI *device id*) is not mistaken for one.
PCI_IN_TEXT = re.compile(
    rf"(?<![{_HEX}:])(?:[{_HEX}]{{4,8}}:[{_HEX}]{{2}}:[{_HEX}]{{2}}(?:\.[0-7])?|[{_HEX}]{{2}}:[{_HEX}]{{2}}\.[0-7])"
    rf"(?![{_HEX}])(?!:[{_HEX}])"
)


def normalize_pci_bus_id(text: str | bytes | None) -> str | None:
    """Lowercase ``dddd:bb:dd`` for any known spelling of a PCI bus id; ``None`` if absent or redacted."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    value = text.strip().rstrip("\x00").strip()
    if value.upper().startswith("PCI:"):
        value = value[4:]
    value = value.strip()
    match = _THREE_PART.match(value)
    if match:
        domain, bus, device = (int(part, 16) for part in match.groups())
        if domain > 0xFFFF:
            return None
        return f"{domain:04x}:{bus:02x}:{device:02x}"
    match = _TWO_PART.match(value)
    if match:
        bus, device = (int(part, 16) for part in match.groups())
        if bus > 0xFF:
            return None
        return f"0000:{bus:02x}:{device:02x}"
    return None


def find_pci_bus_id(text: str) -> str | None:
    """The first PCI address in free text, normalised; ``None`` if there is none."""
    match = PCI_IN_TEXT.search(text)
    return normalize_pci_bus_id(match.group(0)) if match else None


def sysfs_pci_address(bus_id: str) -> str:
    """The sysfs directory name (``0000:3b:00.0``) for a bus id in any spelling (function 0 if absent)."""
    normalized = normalize_pci_bus_id(bus_id)
    if normalized is None:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    function = "0"
    stripped = bus_id.strip()
    if "." in stripped:
        function = stripped.rsplit(".", 1)[1][:1] or "0"
    return f"{normalized}.{function}"


@dataclass(frozen=True)
class GpuRef:
    """One GPU as NVML sees it: index, UUID, normalised and raw bus id, and the NVML handle."""

    index: int
    uuid: str
    pci_bus_id: str | None
    bus_id_raw: str
    handle: Any


def _text(value: Any) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


def nvml_gpus(nvml: Any) -> list[GpuRef]:
    """Every GPU NVML can still describe; a GPU whose calls fail is skipped, the others are returned.

    Raises whatever ``nvmlDeviceGetCount`` raises (no driver): the caller decides what that means.
    """
    nvml_error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    count = int(nvml.nvmlDeviceGetCount())
    gpus: list[GpuRef] = []
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            info = nvml.nvmlDeviceGetPciInfo(handle)
            raw = _text(getattr(info, "busId", "") or getattr(info, "busIdLegacy", ""))
        except nvml_error:  # one GPU lost or needing a reset: skip it, describe the others
            continue
        gpus.append(GpuRef(index, uuid, normalize_pci_bus_id(raw), raw, handle))
    return gpus


class InitialisedNvml:
    """A pynvml-compatible module initialised on first use: :meth:`gpus` calls ``nvmlInit`` until it succeeds
    once, then :func:`nvml_gpus`; both raise :attr:`error` (the module's ``NVMLError``) when NVML is not there."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        self._ready = False

    def gpus(self) -> list[GpuRef]:
        """Every GPU NVML can describe (see :func:`nvml_gpus`), after ``nvmlInit`` if not done yet."""
        if not self._ready:
            self.nvml.nvmlInit()
            self._ready = True
        return nvml_gpus(self.nvml)
