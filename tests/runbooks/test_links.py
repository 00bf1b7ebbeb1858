"""The runbook_url annotation: a configured base, else the installed Markdown's file URL."""

from __future__ import annotations

from pathlib import Path

from tests.notify.alerts import make_alert
from watchdog.runbooks.catalogue import load_catalogue
from watchdog.runbooks.links import with_runbook_urls

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


def test_base_url_file_url_and_rule_set_urls() -> None:
    catalogue = load_catalogue([RUNBOOKS])
    xid = make_alert("GpuXidFatal", gpu="0", runbook="gpu-xid")
    unknown = make_alert("Custom", runbook="no-such-runbook")
    [with_base, _] = with_runbook_urls([xid, unknown], catalogue, "https://runbooks.example/rb/")
    assert with_base.annotations["runbook_url"] == "https://runbooks.example/rb/gpu-xid.md"
    [as_file, unchanged] = with_runbook_urls([xid, unknown], catalogue, "")
    assert as_file.annotations["runbook_url"] == (RUNBOOKS / "gpu-xid.md").as_uri()
    assert "runbook_url" not in unchanged.annotations
    own = make_alert("GpuXidFatal", gpu="0")
    own = own.__class__(**{**own.__dict__, "annotations": {**own.annotations, "runbook_url": "https://x/y"}})
    assert with_runbook_urls([own], catalogue, "https://runbooks.example")[0].annotations["runbook_url"] == (
        "https://x/y")
