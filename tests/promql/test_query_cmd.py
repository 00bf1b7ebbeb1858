"""``inference-watchdog query``: metrics files, rules, time parsing, live mode, JSON output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from watchdog.cli import query_cmd

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines"
RULES = Path(__file__).resolve().parents[2] / "rules"

CAPTURE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 25.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 1234.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.7e9
# TYPE lat histogram
lat_bucket{le="0.5"} 3 1700000000000
lat_bucket{le="1.0"} 7
lat_bucket{le="+Inf"} 8 # {trace_id="abc"} 0.7
weird{path="a\\\\b\\"c\\nd"} NaN
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    query_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["query", *argv])
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def capture(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.txt"
    path.write_text(CAPTURE)
    return path


def test_json_output_is_the_prometheus_api_response(
    capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["--metrics-file", str(capture), "--at", "1700000000", "--json",
                        "vllm:num_requests_running"], capsys)
    assert code == 0
    assert json.loads(out) == {
        "status": "success",
        "data": {"resultType": "vector", "result": [{
            "metric": {"__name__": "vllm:num_requests_running", "engine": "0", "model_name": "m"},
            "value": [1700000000, "25"]}]},
    }


def test_file_samples_are_stored_at_the_query_time(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # lat_bucket{le="0.5"} carries a timestamp from 2023; it is stored at --at like every other sample.
    code, out, _ = run(["--metrics-file", str(capture), "--at", "2030-01-01T00:00:00Z", "--json",
                        "histogram_quantile(0.5, lat_bucket)"], capsys)
    assert code == 0
    result = json.loads(out)["data"]["result"]
    assert result == [{"metric": {}, "value": [1893456000, "0.625"]}]


def test_created_samples_escapes_and_nan_are_kept(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--metrics-file", str(capture), "--json", "vllm:request_success_created"], capsys)
    assert code == 0
    assert json.loads(out)["data"]["result"][0]["value"][1] == "1700000000"
    code, out, _ = run(["--metrics-file", str(capture), "--json", "weird"], capsys)
    sample = json.loads(out)["data"]["result"][0]
    assert sample["metric"]["path"] == 'a\\b"c\nd'
    assert sample["value"][1] == "NaN"


def test_text_output_one_line_per_sample(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--metrics-file", str(capture), "sort_desc(lat_bucket)"], capsys)
    assert code == 0
    assert out.splitlines() == [
        'lat_bucket{le="+Inf"} => 8', 'lat_bucket{le="1.0"} => 7', 'lat_bucket{le="0.5"} => 3']


def test_errors_in_json_and_text(capture: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--metrics-file", str(capture), "--json", "sum(up"], capsys)
    assert code == 1
    document = json.loads(out)
    assert document["status"] == "error" and document["errorType"] == "bad_data"
    code, out, _ = run(["--metrics-file", str(capture), "--json",
                        '{__name__=~"lat_bucket|weird"} * 1 + on() group_left lat_bucket'], capsys)
    assert code == 1
    assert json.loads(out)["errorType"] == "execution"
    code, _, err = run(["--metrics-file", str(capture), "--at", "yesterday", "up"], capsys)
    assert code == 1 and "invalid time" in err
    code, _, err = run(["--metrics-file", "/nonexistent/file", "up"], capsys)
    assert code == 1 and "cannot read" in err


def test_bad_exposition_names_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("ok 1\nnot a metric line\n")
    code, _, err = run(["--metrics-file", str(bad), "ok"], capsys)
    assert code == 1
    assert str(bad) in err and "2" in err


@pytest.mark.parametrize(
    "name", ["vllm-0.12.txt", "vllm-0.5-v0.txt", "sglang-0.3.txt", "sglang-current-dp2.txt"]
)
def test_real_captures_with_engine_rules(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / name
    if not path.exists() or not (RULES / "engines.yaml").exists():
        pytest.skip("fixture or engine rules not present")
    code, out, _ = run(["--metrics-file", str(path), "--rules", str(RULES / "engines.yaml"), "--json",
                        "engine:requests_running"], capsys)
    assert code == 0, out
    result = json.loads(out)["data"]["result"]
    assert result, f"no engine:requests_running from {name}"
    # The canonical series carries the engine's own value.
    raw = '{__name__=~"vllm:num_requests_running|sglang:num_running_reqs|sglang:num_requests_running"}'
    code, out, _ = run(["--metrics-file", str(path), "--json", f"sum({raw})"], capsys)
    total = float(json.loads(out)["data"]["result"][0]["value"][1])
    assert sum(float(s["value"][1]) for s in result) == total


def test_captures_get_the_shipped_rule_pack_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "vllm-0.12.txt"
    if not path.exists():
        pytest.skip("fixture not present")
    code, out, err = run(["--metrics-file", str(path), "--json", "engine:requests_running"], capsys)
    assert code == 0 and json.loads(out)["data"]["result"], err  # written by rules/engines.yaml
    code, out, err = run(["--metrics-file", str(path), "--no-rules", "--json", "engine:requests_running"], capsys)
    assert code == 0 and json.loads(out)["data"]["result"] == []
    assert "engine:* series are written by recording rules, and no rules were evaluated" in err
    code, out, err = run(["--metrics-file", str(path), "--no-rules", "vllm:num_requests_running"], capsys)
    assert code == 0 and out and "note:" not in err


def test_rules_flags_are_for_captures(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["--url", "http://127.0.0.1:9", "--no-rules", "up"], capsys)
    assert code == 1 and "apply to --metrics-file captures" in err


def test_live_mode_without_agent_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["--url", "http://127.0.0.1:9", "up"], capsys)
    assert code == 1 and "--metrics-file" in err


def test_parse_time() -> None:
    assert query_cmd.parse_time("1700000000.25", 0) == 1_700_000_000_250
    assert query_cmd.parse_time("2023-11-14T22:13:20Z", 0) == 1_700_000_000_000
    assert query_cmd.parse_time("2023-11-14T23:13:20+01:00", 0) == 1_700_000_000_000
    assert query_cmd.parse_time(None, 12.5) == 12_500
    with pytest.raises(query_cmd.QueryCommandError):
        query_cmd.parse_time("2023-11-14T22:13:20", 0)


def test_a_misspelt_series_name_gets_a_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "capture.txt"
    capture.write_text('vllm:num_requests_running{model_name="m"} 3\nvllm:kv_cache_usage_perc{model_name="m"} 0.5\n')
    code, out, err = run(["--metrics-file", str(capture), "vllm:num_request_running"], capsys)
    assert code == 0 and out == ""
    assert err.strip() == "no series named vllm:num_request_running; did you mean vllm:num_requests_running?"
    code, out, err = run(["--metrics-file", str(capture), "engine:kv_cache_usage_ration"], capsys)
    assert "did you mean engine:kv_cache_usage_ratio?" in err  # a name the shipped rules wrote
    assert "supported engine" not in err


def test_a_parse_error_shows_where_with_a_caret(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["--metrics-file", "/dev/null", "sum(rate(foo[5m]) by (job)"], capsys)
    assert code == 1
    lines = err.splitlines()
    assert lines[0].startswith("error: ")
    assert lines[1] == "  sum(rate(foo[5m]) by (job)"
    assert lines[2] == "  " + " " * len("sum(rate(foo[5m]) ") + "^"  # under `by`, where it goes wrong
    code, _, err = run(["--metrics-file", "/dev/null", "foo[5m] offest 1m"], capsys)
    assert err.splitlines()[2] == "  " + " " * len("foo[5m] ") + "^"
