"""The XID catalogue (data file + loader) and the escalation of recommended actions.

See :mod:`watchdog.xid.catalogue` for the data contract and :mod:`watchdog.xid.escalation` for how a
reboot that does not help becomes a hardware inspection.
"""

from watchdog.xid.catalogue import (
    ACTIONS,
    SEVERITIES,
    Catalogue,
    CatalogueError,
    SxidEntry,
    XidEntry,
    default_catalogue,
    load_catalogue,
)
from watchdog.xid.escalation import XidOccurrence, escalate_action, reboots_survived

__all__ = [
    "ACTIONS",
    "SEVERITIES",
    "Catalogue",
    "CatalogueError",
    "SxidEntry",
    "XidEntry",
    "XidOccurrence",
    "default_catalogue",
    "escalate_action",
    "load_catalogue",
    "reboots_survived",
]
