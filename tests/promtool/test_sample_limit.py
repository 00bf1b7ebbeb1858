"""promtool's sample limit (10 000 in ``promtool test rules``) on plain range selectors as well as subqueries,
at the boundary and in promtool's words, run side by side with /usr/bin/promtool when it is installed.

Measured with promtool 2.42 (one series of 10 801 one-second samples, evaluated at 3h): a range function
errs from 10 000 points in one series (9 999 with two series), a subquery of the plain selector from 5 000
steps (3 333 with two series, 2 500 with three); both say "... in query execution".
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from watchdog.promtool.runner import run_test_files

PROMTOOL = shutil.which("promtool")
TOO_MANY = "query processing would load too many samples into memory in query execution"
# (series, expr, errs): each side of each boundary
CASES = [
    (1, "count_over_time(x[9998s])", False),
    (1, "count_over_time(x[9999s])", True),
    (1, "count_over_time(x[3h])", True),
    (2, "count_over_time(x[9997s])", False),
    (2, "count_over_time(x[9998s])", True),
    (1, "count_over_time(x[4998s:1s])", False),
    (1, "count_over_time(x[4999s:1s])", True),
    (1, "count_over_time(x[3h:1s])", True),
    (2, "count_over_time(x[3331s:1s])", False),
    (2, "count_over_time(x[3332s:1s])", True),
    (3, "max_over_time(rate(x[1m])[2000s:1s])", False),
    (3, "max_over_time(rate(x[1m])[3000s:1s])", True),
]


def _test_file(tmp_path: Path, series: int) -> Path:
    path = tmp_path / f"limit_{series}.yaml"
    inputs = "".join(f"      - series: 'x{{i=\"{i}\"}}'\n        values: '0+1x10800'\n" for i in range(series))
    cases = "".join(f"      - expr: {expr}\n        eval_time: 3h\n        exp_samples: []\n"
                    for n, expr, _ in CASES if n == series)
    path.write_text("rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1s\n    input_series:\n"
                    f"{inputs}    promql_expr_test:\n{cases}")
    return path


def _verdicts(stderr: str) -> dict[str, str | None]:
    """expr -> its error (None: it ran, and failed only on the expected samples)."""
    out: dict[str, str | None] = {}
    for match in re.finditer(r'expr: "([^"]*)", time: 3h,(?: err: ([^\n]*))?', stderr):
        out[match.group(1)] = match.group(2)
    return out


@pytest.mark.parametrize("series", [1, 2, 3])
def test_range_selectors_and_subqueries_err_where_promtool_does(tmp_path: Path, series: int) -> None:
    path = _test_file(tmp_path, series)
    err = io.StringIO()
    run_test_files([str(path)], io.StringIO(), err)
    ours = _verdicts(err.getvalue())
    expected = {expr: (TOO_MANY if errs else None) for n, expr, errs in CASES if n == series}
    assert ours == expected
    if PROMTOOL is not None:
        done = subprocess.run([PROMTOOL, "test", "rules", path.name], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert _verdicts(done.stderr) == ours
