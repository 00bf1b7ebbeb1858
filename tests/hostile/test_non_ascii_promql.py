"""A non-ASCII letter or digit in PromQL (an accented metric name, ``x²``, a Cyrillic look-alike pasted
into a rule) is a parse error at once, as promtool 2.42 answers, in the parser, the rule loader and the
``query``/``rules check`` commands. It once made the lexer loop forever while its token list grew without
bound, so each case runs in a child process with a hard time limit: a hang fails the test, not the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

NON_ASCII = {
    "accented name": ("température_celsius > 30", "é"),
    "accented grouping label": ("sum by (é) (x)", "é"),
    "superscript digit": ("x²", "²"),
    "arabic-indic digit": ("x > ٣", "٣"),
    "cyrillic look-alike": ("аbc > 1", "а"),  # the first letter is U+0430
    "colon then accent": ("x + :é", "é"),
}
LIMIT_S = 20


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=LIMIT_S)


@pytest.mark.parametrize("name", sorted(NON_ASCII))
def test_the_parser_refuses_non_ascii_letters_and_digits(name: str) -> None:
    query, bad = NON_ASCII[name]
    code = ("import sys; from watchdog.promql import PromQLError, parse_query\n"
            f"try:\n    parse_query({query!r})\nexcept PromQLError as exc:\n    print(exc); sys.exit(0)\n"
            "sys.exit(3)\n")
    done = _run([sys.executable, "-c", code])
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    assert f"unexpected character: '{bad}'" in done.stdout, done.stdout


def test_label_values_may_hold_any_letter() -> None:
    from watchdog.promql import parse_query

    parse_query('temperature{lieu="sûr"} > 30 and x{a=~"é.*"}')


def test_rules_check_names_the_file_and_rule(tmp_path: Path) -> None:
    path = tmp_path / "temps.yaml"
    path.write_text("groups:\n- name: g\n  rules:\n  - alert: Hot\n    expr: température_celsius > 30\n"
                    "    labels: {severity: warning}\n", encoding="utf-8")
    done = _run([sys.executable, "-m", "watchdog", "rules", "check", str(path)])
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "temps.yaml" in out and "unexpected character: 'é'" in out, out


def test_query_command_answers_with_a_parse_error(tmp_path: Path) -> None:
    page = tmp_path / "page.txt"
    page.write_text("x 1\n", encoding="utf-8")
    done = _run([sys.executable, "-m", "watchdog", "query", "--metrics-file", str(page), "x²"])
    assert done.returncode != 0
    assert "unexpected character: '²'" in done.stdout + done.stderr
