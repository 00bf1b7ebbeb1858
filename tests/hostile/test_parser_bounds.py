"""Item 4: parsers and rules cannot crash or wedge the daemon. Deep or long PromQL is refused before
the Rust parser (which dies with SIGSEGV on it), also on SIGHUP with the last good rules kept; config,
rule and runbook files that are binary, not UTF-8, nested thousands deep or alias bombs get a one-line
error naming the file, quickly, and never print an expanded value."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hostile.conftest import hostile_agent
from watchdog.config import ConfigError, load_config
from watchdog.promql import PromQLError, parse_query
from watchdog.rules.loader import RuleLoadError, load_rule_files
from watchdog.runbooks.catalogue import RunbookError, load_runbook_file

HOSTILE_QUERIES = {
    "deep brackets": "(" * 50_000 + "up" + ")" * 50_000,
    "long chain": "+".join(["up"] * 8000),
    "long text": "up + " * 5000 + "up",
}
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
) + "node: *i\n"
HOSTILE_FILES = {
    "binary": b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8,
    "not utf-8": b"node: caf\xe9\n",
    "deep": ("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 3000))).encode()
    + b"[" * 5000 + b"]" * 5000,
    "alias bomb": LAUGHS.encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_QUERIES))
def test_hostile_promql_is_refused_before_the_parser(name: str) -> None:
    code = ("import sys; from tests.hostile.test_parser_bounds import HOSTILE_QUERIES\n"
            "from watchdog.promql import PromQLError, parse_query\n"
            f"try:\n    parse_query(HOSTILE_QUERIES[{name!r}])\nexcept PromQLError as exc:\n"
            "    print('refused:', exc); sys.exit(0)\nsys.exit(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])  # -11 was SIGSEGV
    assert "limit" in done.stdout


def test_deep_promql_on_sighup_keeps_the_last_good_rules(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("groups:\n  - name: g\n    rules:\n      - record: a:b\n        expr: up\n")
    agent = hostile_agent(tmp_path, [1_800_000_000.0], {"rules": {"paths": [str(rules)]}})
    try:
        before = agent.rule_engine
        rules.write_text("groups:\n  - name: g\n    rules:\n      - record: a:b\n        expr: '"
                         + "(" * 2000 + "up" + ")" * 2000 + "'\n")
        assert agent.reload() is False
        assert agent.rule_engine is before and agent.stats.reload_success is False
        with pytest.raises(RuleLoadError, match="nests brackets"):
            load_rule_files([str(rules)])
    finally:
        agent.close()


def test_a_sane_query_still_parses() -> None:
    parse_query('sum by (job) (rate(http_requests_total{code=~"5.."}[5m])) > 0 and on () vector(1)')
    with pytest.raises(PromQLError, match="operators"):
        parse_query(" + ".join(["up"] * 300))


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_hostile_config_files_get_one_line_errors_naming_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(HOSTILE_FILES[name])
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert time.monotonic() - started < 2
    assert str(path) in message and "\n" not in message and len(message) < 300
    assert "x, x" not in message and "['x'" not in message  # never an expanded value


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_hostile_rule_and_runbook_files_are_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_bytes(HOSTILE_FILES[name])
    with pytest.raises(RuleLoadError):
        load_rule_files([str(path)])
    with pytest.raises(RunbookError) as caught:
        load_runbook_file(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("command", [["config", "check"], ["run", "--config"]])
def test_config_check_and_run_exit_2_without_a_traceback(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(HOSTILE_FILES["alias bomb"])
    done = subprocess.run([sys.executable, "-m", "watchdog", *command, str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and str(path) in done.stderr
