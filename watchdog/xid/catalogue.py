"""Load and validate the XID catalogue (``watchdog/xid/catalogue.yaml``): data, not code.

Contract: :func:`load_catalogue` returns a :class:`Catalogue` whose every entry has a severity from
:data:`SEVERITIES` and actions from :data:`ACTIONS`; a file that breaks this raises :class:`CatalogueError`
naming the code and field. The packaged file is loaded once and cached (:func:`default_catalogue`).
Unknown codes are not guessed: :meth:`Catalogue.xid` returns ``None`` and callers say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

SEVERITIES: tuple[str, ...] = ("info", "warning", "critical", "fatal")
ACTIONS: tuple[str, ...] = (
    "none",
    "restart_app",
    "check_app_and_gpu",
    "reset_gpu",
    "reboot_system",
    "hardware_inspection",
    "contact_support",
)

# What an Xid that is not in the catalogue gets: worth a look, not worth paging for.
UNKNOWN_SEVERITY = "warning"
UNKNOWN_ACTION = "contact_support"


class CatalogueError(ValueError):
    """The catalogue file is malformed: names the code and the field."""


@dataclass(frozen=True)
class XidEntry:
    """One Xid: NVIDIA's mnemonic, our meaning, severity and recommended actions."""

    code: int
    mnemonic: str
    meaning: str
    severity: str
    action: str
    investigate: str | None = None
    nvidia: str = ""
    unused: bool = False

    def as_dict(self) -> dict[str, Any]:
        """JSON shape of ``xid explain --json``."""
        return {
            "code": self.code,
            "mnemonic": self.mnemonic,
            "meaning": self.meaning,
            "severity": self.severity,
            "action": self.action,
            "investigate": self.investigate,
            "nvidia_resolution": self.nvidia,
            "unused": self.unused,
        }


@dataclass(frozen=True)
class SxidEntry:
    """One NVSwitch SXid we know: meaning and the default severity/action when the line does not say."""

    code: int
    meaning: str
    severity: str
    action: str


@dataclass(frozen=True)
class Catalogue:
    """All known Xids and SXids."""

    xids: Mapping[int, XidEntry]
    sxids: Mapping[int, SxidEntry]

    def xid(self, code: int) -> XidEntry | None:
        """The entry for an Xid code, or ``None`` if NVIDIA does not document it."""
        return self.xids.get(code)

    def sxid(self, code: int) -> SxidEntry | None:
        """The entry for an SXid code, or ``None`` when we know nothing about it."""
        return self.sxids.get(code)


def _field(raw: Mapping[str, Any], code: int, name: str, kind: str, *, required: bool = True) -> Any:
    value = raw.get(name)
    if value is None:
        if required:
            raise CatalogueError(f"{kind} {code}: missing field {name!r}")
        return None
    return value


def _check_choice(value: Any, allowed: tuple[str, ...], code: int, name: str, kind: str) -> str:
    if value not in allowed:
        raise CatalogueError(f"{kind} {code}: {name} {value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _code(key: Any, kind: str) -> int:
    if isinstance(key, bool) or not isinstance(key, int) or key < 0:
        raise CatalogueError(f"{kind} code {key!r} is not a non-negative integer")
    return key


def parse_catalogue(document: Any) -> Catalogue:
    """Validate a parsed YAML document and build the :class:`Catalogue`."""
    if not isinstance(document, Mapping) or not isinstance(document.get("xids"), Mapping):
        raise CatalogueError("the catalogue must be a mapping with an 'xids' mapping")
    xids: dict[int, XidEntry] = {}
    for key, raw in document["xids"].items():
        code = _code(key, "xid")
        if not isinstance(raw, Mapping):
            raise CatalogueError(f"xid {code}: entry must be a mapping")
        investigate = _field(raw, code, "investigate", "xid", required=False)
        xids[code] = XidEntry(
            code=code,
            mnemonic=str(_field(raw, code, "mnemonic", "xid")),
            meaning=str(_field(raw, code, "meaning", "xid")),
            severity=_check_choice(raw.get("severity"), SEVERITIES, code, "severity", "xid"),
            action=_check_choice(raw.get("action"), ACTIONS, code, "action", "xid"),
            investigate=None if investigate is None
            else _check_choice(investigate, ACTIONS, code, "investigate", "xid"),
            nvidia=str(raw.get("nvidia", "")),
            unused=bool(raw.get("unused", False)),
        )
    sxids: dict[int, SxidEntry] = {}
    for key, raw in (document.get("sxids") or {}).items():
        code = _code(key, "sxid")
        if not isinstance(raw, Mapping):
            raise CatalogueError(f"sxid {code}: entry must be a mapping")
        sxids[code] = SxidEntry(
            code=code,
            meaning=str(_field(raw, code, "meaning", "sxid")),
            severity=_check_choice(raw.get("severity"), SEVERITIES, code, "severity", "sxid"),
            action=_check_choice(raw.get("action"), ACTIONS, code, "action", "sxid"),
        )
    return Catalogue(xids=xids, sxids=sxids)


def load_catalogue(path: str | Path | None = None) -> Catalogue:
    """Load a catalogue file; ``None`` loads the one shipped with the package."""
    if path is None:
        text = (resources.files("watchdog.xid") / "catalogue.yaml").read_text(encoding="utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogueError(f"invalid YAML: {exc}") from exc
    return parse_catalogue(document)


@lru_cache(maxsize=1)
def default_catalogue() -> Catalogue:
    """The packaged catalogue, loaded once."""
    return load_catalogue()
