"""The README's figures and command list follow the code: the number of alerts the shipped rule pack
raises, and every subcommand the command line registers."""

from __future__ import annotations

import re
from pathlib import Path

from watchdog.cli import COMMAND_MODULES
from watchdog.rules.loader import load_rule_files, shipped_rule_files

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_the_alert_count_is_the_rule_packs() -> None:
    names = {rule.name for _, rule in load_rule_files(shipped_rule_files()).alerting_rules()}
    stated = re.search(r"raises (\d+) alerts", README)
    assert stated is not None, "the README no longer says how many alerts the pack raises"
    assert int(stated.group(1)) == len(names), f"README says {stated.group(1)}, rules/ define {len(names)}"


def test_every_command_is_in_the_command_list() -> None:
    block = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^    inference-watchdog ([a-z]+)", block, flags=re.MULTILINE))
    missing = sorted(set(COMMAND_MODULES) - listed)
    assert not missing, f"the README's command list lacks {missing}"
