"""`config check`: every problem in one pass, in words; inline secrets and misspelt keys recognised."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from watchdog.config import load_config_text, schema
from watchdog.config.lint import config_problems

BAD = """\
tick_interval_seconds: -1
retension_seconds: 600
notifiers:
  slack:
    enabled: true
    token: xoxb-1234-5678-abcdefSECRET
    chanel: "#alerts"
    webhook_url_env: https://hooks.slack.com/services/T000/B000/XXXX
engines:
  - job: vllm
    url: 12
    kind: vlm
"""


def test_every_problem_in_one_pass_in_words() -> None:
    problems = [str(p) for p in config_problems(BAD, "node.yaml")]
    assert problems == [
        "node.yaml:1: tick_interval_seconds: must be more than 0, not -1",
        "node.yaml:2: retension_seconds: unknown key 'retension_seconds' (did you mean retention_seconds?); "
        "allowed here: " + ", ".join(sorted(schema()["properties"])),
        "node.yaml:6: notifiers.slack.token: a secret must not be written in the config: put it in an "
        "environment variable or a file and name that with token_env or token_file",
        problems[3],
        "node.yaml:8: notifiers.slack.webhook_url_env: name an environment variable here, not the secret itself",
        "node.yaml:11: engines[0].url: must be text, not 12",
        "node.yaml:12: engines[0].kind: 'vlm' is not one of: auto, vllm, sglang",
    ]
    assert problems[3].startswith("node.yaml:7: notifiers.slack.chanel: unknown key 'chanel' (did you mean channel?)")
    assert not any("SECRET" in p or "XXXX" in p for p in problems)


def test_a_good_config_has_no_problems() -> None:
    text = "notifiers:\n  slack: {enabled: true, token_env: SLACK_BOT_TOKEN, channel: '#alerts'}\n"
    assert config_problems(text) == []
    load_config_text(text)


def test_cli_exit_code_and_ok(tmp_path: Path) -> None:
    bad, good = tmp_path / "bad.yaml", tmp_path / "good.yaml"
    bad.write_text(BAD)
    good.write_text("tick_interval_seconds: 2\n")
    proc = subprocess.run([sys.executable, "-m", "watchdog", "config", "check", str(bad)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2 and proc.stderr.count("error: ") == 7 and "7 problem(s)" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "watchdog", "config", "check", str(good)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == f"{good}: ok"
