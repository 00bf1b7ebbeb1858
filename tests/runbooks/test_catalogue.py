"""Runbook files: validation with file, line and key path; the catalogue index."""

from __future__ import annotations

from pathlib import Path

import pytest

from watchdog.infra.paths import asset_dirs
from watchdog.runbooks.catalogue import (
    RunbookError,
    build_catalogue,
    load_catalogue,
    parse_runbook,
    resolve_paths,
)
from watchdog.runbooks.steps import parse_duration

GOOD = """\
id: demo
title: Demo runbook
alerts: [DemoAlert, OtherAlert]
diagnose:
  - name: smi
    command: [nvidia-smi, -q, -i, "{{ labels.gpu }}"]
    timeout: 5s
  - name: metrics
    http: {url: "http://{{ labels.instance }}/metrics"}
remediate:
  - name: tell
    notify: "GPU {{ labels.gpu }} needs a look"
    auto: true
  - name: restart
    systemd: {unit: "{{ config.engines[job].unit }}", verb: restart}
    cooldown: 30m
    max_per_day: 3
    requires: 'engine:requests_running{job="{{ labels.job }}"} == 0'
    verify: {expr: 'up{job="{{ labels.job }}"} == 1', timeout: 5m}
"""


def test_a_good_runbook_parses_into_typed_steps() -> None:
    rb = parse_runbook(GOOD, "<test>")
    assert rb.id == "demo" and rb.alerts == ("DemoAlert", "OtherAlert")
    assert [s.name for s in rb.diagnose] == ["smi", "metrics"]
    assert rb.diagnose[0].timeout_s == 5
    restart = rb.step("restart")
    assert restart is not None and restart.kind == "systemd"
    assert restart.guards.cooldown_s == 1800 and restart.guards.max_per_day == 3
    assert restart.guards.verify is not None and restart.guards.verify.timeout_s == 300
    assert restart.timeout_s == 120  # systemd default
    assert rb.step("tell").guards.auto  # type: ignore[union-attr]


def error_for(text: str) -> RunbookError:
    with pytest.raises(RunbookError) as info:
        parse_runbook(text, "<test>")
    return info.value


def test_a_shell_string_command_is_rejected() -> None:
    err = error_for(GOOD.replace('[nvidia-smi, -q, -i, "{{ labels.gpu }}"]', '"nvidia-smi -q; reboot"'))
    assert err.key_path == "diagnose[0].command"
    assert "argv list" in err.problem and "never a shell string" in err.problem
    assert err.line == 6


@pytest.mark.parametrize(("edit", "key_path", "words"), [
    (("timeout: 5s", "timeout: 5s\n    cooldown: 1m"), "diagnose[0].cooldown", "no guards"),
    (('http: {url: "http://', 'http: {method: POST, url: "http://'), "diagnose[1].http.method", "only GET"),
    (("verb: restart", "verb: explode"), "remediate[1].systemd.verb", "must be one of"),
    (("max_per_day: 3", "max_per_day: 0"), "remediate[1].max_per_day", "positive"),
    (("cooldown: 30m", "cooldown: soon"), "remediate[1].cooldown", "duration"),
    (("name: restart", "name: Restart Now"), "remediate[1].name", "lowercase"),
    (("name: restart", "name: tell"), "remediate[1].name", "used twice"),
    (("title: Demo runbook", "title: ''"), "title", "required"),
    (("id: demo", "id: demo\nextra: 1"), "extra", "unknown key"),
    (('notify: "GPU', 'bogus: 1\n    notify: "GPU'), "remediate[0].bogus", "unknown key"),
    (("[nvidia-smi, -q", "[\"{{ labels.tool }}\", -q"), "diagnose[0].command[0]", "literal"),
    (('{{ labels.gpu }}"]', '{{ labels.gpu | x }}"]'), "diagnose[0].command[3]", "unknown reference"),
    (("alerts: [DemoAlert, OtherAlert]", "alerts: [DemoAlert, DemoAlert]"), "alerts", "twice"),
])
def test_invalid_runbooks_name_the_key(edit: tuple[str, str], key_path: str, words: str) -> None:
    err = error_for(GOOD.replace(*edit, 1))
    assert err.key_path == key_path, err
    assert words in err.problem, err


def test_a_step_needs_exactly_one_action() -> None:
    err = error_for(GOOD.replace("    auto: true", "    auto: true\n    command: [/bin/true]"))
    assert err.key_path == "remediate[0]" and "exactly one action" in err.problem


def test_id_must_match_the_file_name(tmp_path: Path) -> None:
    (tmp_path / "other.yaml").write_text(GOOD)
    with pytest.raises(RunbookError) as info:
        load_catalogue([tmp_path])
    assert info.value.key_path == "id" and "other" in info.value.problem


def test_catalogue_indexes_alerts_and_finds_markdown(tmp_path: Path) -> None:
    (tmp_path / "demo.yaml").write_text(GOOD)
    (tmp_path / "demo.md").write_text("# Demo\n")
    cat = load_catalogue([tmp_path])
    rb = cat.for_alert("OtherAlert")
    assert rb is not None and rb.id == "demo" and rb.markdown() == "# Demo\n"
    assert cat.for_alert("Unknown") is None
    assert cat.for_alert("Unknown", runbook_annotation="demo") is rb


def test_two_runbooks_cannot_serve_one_alert(tmp_path: Path) -> None:
    a = parse_runbook(GOOD, "<a>")
    b = parse_runbook(GOOD.replace("id: demo", "id: demo-two"), "<b>")
    with pytest.raises(RunbookError) as info:
        build_catalogue([a, b])
    assert "already served" in info.value.problem


def test_earlier_paths_shadow_later_ones(tmp_path: Path) -> None:
    high, low = tmp_path / "etc", tmp_path / "share"
    high.mkdir()
    low.mkdir()
    (high / "demo.yaml").write_text(GOOD.replace("Demo runbook", "Local override"))
    (low / "demo.yaml").write_text(GOOD)
    assert load_catalogue([high, low]).runbooks["demo"].title == "Local override"


def test_relative_paths_resolve_against_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "config.yaml"
    paths = resolve_paths(["runbooks", "/abs/runbooks"], config)
    assert paths == [tmp_path.resolve() / "conf" / "runbooks", Path("/abs/runbooks")]
    defaults = resolve_paths([], config)
    assert defaults[0] == tmp_path.resolve() / "conf" / "runbooks"
    assert Path("/etc/inference-watchdog/runbooks") in defaults
    assert asset_dirs("runbooks") and all(d in defaults for d in asset_dirs("runbooks"))


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("1d", 86400),
                                               (12, 12), (0.5, 0.5), ("250ms", 0.25)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text, "x") == seconds
