"""The capacity planner: the worked examples of docs/capacity.md as a table, ledgers, KV shapes, properties, the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from watchdog.capacity.catalogue import (
    CatalogueError,
    ModelSpec,
    default_catalogue,
    model_from_hf_config,
    parse_catalogue,
)
from watchdog.capacity.ledger import Parallelism, b_max, kv_bytes_per_request, kv_bytes_per_token
from watchdog.capacity.plan import Lengths, PlanError, PlanInputs, Slo, make_plan
from watchdog.capacity.units import parse_size
from watchdog.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
# The rounded inputs of a back-of-envelope sizing: 80 GB per GPU, 18 GB of weights, "40 KB" per token taken as 40,000 B.
SEED = ["--model", "qwen2.5-72b", "--gpu", "h800", "--tp", "8", "--gpu-memory", "80GB", "--weights", "18GB",
        "--runtime", "4GB", "--alpha", "0.9", "--kv-bytes-per-token", "40KB"]


def plan_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["plan", *argv, "--json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


@pytest.mark.parametrize(("prompt", "output", "b_max_expected", "mb_per_request"), [
    (1500, 500, 625, 80.0),     # 2.2 step 5: chat, 2,000 tokens -> 80 MB -> 625
    (16000, 1000, 73, 680.0),   # 2.2 step 5: documents, 17,000 tokens -> 680 MB -> 73
    (1200, 400, 781, 64.0),     # 2.4 step 3: 1,600 tokens -> 64 MB -> 781
])
def test_seed_b_max_examples(prompt: int, output: int, b_max_expected: int, mb_per_request: float,
                             capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json([*SEED, "--prompt-tokens", str(prompt), "--output-tokens", str(output)], capsys)
    assert doc["ledgers_per_gpu"]["kv_pool_bytes"] == pytest.approx(50e9)
    assert doc["ledgers_per_gpu"]["cap_bytes"] == pytest.approx(72e9)
    assert doc["kv_bytes_per_token_per_gpu"] == 40_000
    assert doc["lengths"]["mean"]["kv_bytes_per_gpu"] == pytest.approx(mb_per_request * 1e6)
    assert (doc["b_max"]["mean"], doc["b_max"]["p90"]) == (b_max_expected, b_max_expected)


@pytest.mark.parametrize(("prompt", "output", "exact"), [(1500, 500, 610), (16000, 1000, 71), (1200, 400, 762)])
def test_seed_examples_without_its_rounding(prompt: int, output: int, exact: int,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """With the model's true 40,960 B/token (the seed's "40 KB" is binary, its GB and MB decimal)."""
    argv = [a for a in SEED if a not in ("--kv-bytes-per-token", "40KB")]
    doc = plan_json([*argv, "--prompt-tokens", str(prompt), "--output-tokens", str(output)], capsys)
    assert doc["kv_bytes_per_token_per_gpu"] == 40_960
    assert doc["b_max"]["mean"] == exact


def test_seed_dual_bound_example_15_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    """2.4: 40 QPS, 1,200/400 tokens, TTFT 0.6 s, TPOT 30 ms, 1,600 tokens/s per node, x1.25 x1.15."""
    doc = plan_json([*SEED, "--prompt-tokens", "1200", "--output-tokens", "400", "--rate", "40",
                     "--ttft", "0.6", "--tpot", "0.03", "--node-throughput", "1600"], capsys)
    assert doc["demand"]["life_seconds"] == pytest.approx(12.6)
    assert doc["demand"]["concurrency"] == pytest.approx(504)
    assert doc["demand"]["generation_tokens_per_second"] == pytest.approx(16_000)
    bounds = doc["bounds"]
    assert bounds["compute_nodes"] == pytest.approx(10.0)
    assert bounds["memory_nodes"] == pytest.approx(504 / 781)
    assert (bounds["binding"], bounds["nodes"], bounds["gpus"]) == ("compute", 15, 120)


def test_seed_appendix_memory_16_vs_compute_208(capsys: pytest.CaptureFixture[str]) -> None:
    """Appendix A.1: 10,000 in flight, 2,000 tokens, TPOT 30 ms, 1,600 tokens/s per node, no margins."""
    doc = plan_json([*SEED, "--prompt-tokens", "1500", "--output-tokens", "500", "--concurrency", "10000",
                     "--tpot", "0.03", "--node-throughput", "1600", "--headroom", "1", "--redundancy", "1"], capsys)
    bounds = doc["bounds"]
    assert bounds["memory_nodes"] == pytest.approx(16.0)
    assert bounds["compute_nodes"] == pytest.approx(208.33, abs=0.01)
    assert doc["demand"]["generation_tokens_per_second"] == pytest.approx(333_333.3, abs=0.1)
    assert (bounds["binding"], bounds["nodes"]) == ("compute", 209)


def test_toy_transformer_of_section_2_2() -> None:
    """2 layers, 2 KV heads, head_dim 64, FP16: 1 KB per token; a 1 MiB pool holds two 512-token requests."""
    toy = ModelSpec(name="toy", source="toy", params=1.0, layers=2, kv_heads=2, head_dim=64)
    assert kv_bytes_per_token(toy, 2.0, Parallelism()) == 1024
    assert b_max(1_048_576, kv_bytes_per_request(toy, 2.0, Parallelism(), 512)) == 2
    assert b_max(1_048_576, kv_bytes_per_request(toy, 2.0, Parallelism(), 513)) == 1


def _inputs(model: str, gpu: str = "h100", tp: int = 8, total: float = 2000.0, weight_dtype_override: str = "",
            **kw: Any) -> PlanInputs:
    catalogue = default_catalogue()
    spec = catalogue.models[model]
    return PlanInputs(model=spec, gpu=catalogue.gpu(gpu), lengths=Lengths(total * 0.75, total * 0.25,
                      total * 0.75, total * 0.25), slo=Slo(0.6, 0.03), par=Parallelism(tp),
                      weight_dtype=weight_dtype_override or spec.weight_dtype, **kw)


def test_mla_cache_is_the_latent_on_every_tp_rank() -> None:
    v3 = default_catalogue().models["deepseek-v3"]
    assert kv_bytes_per_token(v3, 2.0, Parallelism(8)) == 61 * (512 + 64) * 2 == 70_272
    assert kv_bytes_per_token(v3, 2.0, Parallelism(16)) == 70_272
    assert kv_bytes_per_token(v3, 2.0, Parallelism(8, pp=2)) == 70_272 / 2


def test_gqa_heads_replicate_once_tp_exceeds_them() -> None:
    llama = default_catalogue().models["llama-3.1-8b"]
    assert kv_bytes_per_token(llama, 2.0, Parallelism(8)) == 2 * 32 * 1 * 128 * 2
    assert kv_bytes_per_token(llama, 2.0, Parallelism(16)) == 2 * 32 * 1 * 128 * 2


def test_sliding_window_caps_what_a_long_request_holds() -> None:
    mistral = default_catalogue().models["mistral-7b-v0.1"]
    per_token = kv_bytes_per_token(mistral, 2.0, Parallelism())
    assert kv_bytes_per_request(mistral, 2.0, Parallelism(), 1000) == 1000 * per_token
    assert kv_bytes_per_request(mistral, 2.0, Parallelism(), 16000) == 4096 * per_token


def test_fp8_kv_doubles_b_max_and_fp8_weights_grow_the_pool() -> None:
    base = make_plan(_inputs("llama-3.1-70b", tp=4))
    fp8_kv = make_plan(_inputs("llama-3.1-70b", tp=4, kv_dtype="fp8"))
    assert fp8_kv.kv_bytes_per_token == base.kv_bytes_per_token / 2
    assert fp8_kv.b_max_mean in (2 * base.b_max_mean, 2 * base.b_max_mean + 1)
    rows = {v.change: v for v in base.sensitivity}
    assert rows["FP8 KV cache"].b_max_p90 == fp8_kv.b_max_p90
    assert rows["FP8 weights"].b_max_p90 > base.b_max_p90


@pytest.mark.parametrize("model", sorted(default_catalogue().models))
def test_b_max_falls_as_length_rises(model: str) -> None:
    previous = None
    for total in (500, 1000, 2000, 4000, 8000, 16000, 32000):
        try:
            current = make_plan(_inputs(model, gpu="b200", tp=8, total=total)).b_max_p90
        except PlanError:
            current = 0
        if previous is not None:
            assert current <= previous, (model, total)
        previous = current


@pytest.mark.parametrize("model", sorted(default_catalogue().models))
@pytest.mark.parametrize("gpu", ["a100-40gb", "h100", "h200"])
def test_more_tp_never_lowers_b_max(model: str, gpu: str) -> None:
    previous = 0
    for tp in (1, 2, 4, 8, 16):
        try:
            current = make_plan(_inputs(model, gpu=gpu, tp=tp, total=4000)).b_max_p90
        except PlanError:
            current = 0
        assert current >= previous, (model, gpu, tp)
        previous = current


@pytest.mark.parametrize(("fixture", "params", "dtype", "window", "attention"), [
    ("llama-3.1-8b.json", 8.03e9, "bf16", None, "gqa"),
    ("qwen2.5-72b.json", 72.71e9, "bf16", None, "gqa"),     # use_sliding_window: false
    ("deepseek-v3.json", 671e9, "fp8", None, "mla"),
    ("mistral-7b-v0.1.json", 7.24e9, "bf16", 4096, "gqa"),
])
def test_hf_config_json(fixture: str, params: float, dtype: str, window: int | None, attention: str) -> None:
    spec = model_from_hf_config(FIXTURES / fixture)
    assert spec.params == pytest.approx(params, rel=0.01)
    assert (spec.weight_dtype, spec.sliding_window, spec.attention) == (dtype, window, attention)


def test_hf_config_matches_the_catalogue_entry(capsys: pytest.CaptureFixture[str]) -> None:
    by_file = plan_json(["--model", str(FIXTURES / "qwen2.5-72b.json"), "--gpu", "h100", "--tp", "8",
                         "--prompt-tokens", "1500", "--output-tokens", "500"], capsys)
    by_name = plan_json(["--model", "qwen2.5-72b", "--gpu", "h100", "--tp", "8",
                         "--prompt-tokens", "1500", "--output-tokens", "500"], capsys)
    assert by_file["kv_bytes_per_token_per_gpu"] == by_name["kv_bytes_per_token_per_gpu"]
    assert abs(by_file["b_max"]["mean"] - by_name["b_max"]["mean"]) <= 1


def test_lengths_file_gives_mean_and_p90(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = tmp_path / "lengths.jsonl"
    lengths.write_text("".join(json.dumps({"prompt_tokens": p, "output_tokens": 100}) + "\n"
                               for p in range(100, 1100, 100)))
    doc = plan_json([*SEED, "--lengths", str(lengths)], capsys)
    assert doc["lengths"]["mean"]["prompt"] == 550
    assert doc["lengths"]["p90"]["prompt"] == pytest.approx(910)
    assert doc["b_max"]["p90"] < doc["b_max"]["mean"]


def test_knee_result_sets_node_throughput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    knee = tmp_path / "knee.json"
    knee.write_text(json.dumps({"knee": {"rate": 3.0, "goodput_tokens_per_second": 1600.0}}))
    doc = plan_json([*SEED, "--prompt-tokens", "1200", "--output-tokens", "400", "--rate", "40",
                     "--knee", str(knee)], capsys)
    assert doc["generation_capacity"]["tokens_per_second_per_node"] == 1600
    assert doc["generation_capacity"]["source"] == f"knee:{knee}"
    assert doc["bounds"]["nodes"] == 15


def test_roofline_is_used_and_flagged_without_a_measurement(capsys: pytest.CaptureFixture[str]) -> None:
    doc = plan_json(["--model", "llama-3.1-8b", "--gpu", "l40s", "--prompt-tokens", "1000", "--output-tokens", "200",
                     "--rate", "5"], capsys)
    assert doc["generation_capacity"]["source"] == "roofline"
    assert doc["generation_capacity"]["tokens_per_second_per_node"] > 0
    assert any("roofline" in w for w in doc["warnings"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "llama-3.1-405b", "--gpu", "h100", "--prompt-tokens", "10", "--output-tokens", "10"],
     "no room for a KV pool"),
    (["--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--prompt-tokens", "900000", "--output-tokens", "10"],
     "does not fit in the KV pool"),
    (["--model", "gpt-9", "--prompt-tokens", "10", "--output-tokens", "10"], "unknown model 'gpt-9'"),
    (["--model", "llama-3.1-8b", "--gpu", "tpu", "--prompt-tokens", "10", "--output-tokens", "10"], "unknown GPU"),
    (["--model", "llama-3.1-8b"], "--prompt-tokens"),
])
def test_bad_input_is_one_clear_message(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *argv]) == 2
    assert message in capsys.readouterr().err


def test_text_output_reads_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *SEED, "--prompt-tokens", "1200", "--output-tokens", "400", "--rate", "40",
                 "--node-throughput", "1600"]) == 0
    out = capsys.readouterr().out
    assert "4 KV pool" in out and "50.00 GB" in out
    assert "replicas                   15 = ceil(10.00 x headroom 1.25 x redundancy 1.15), 120 GPUs" in out


def test_sizes_are_decimal_unless_binary() -> None:
    assert parse_size("40KB") == 40_000
    assert parse_size("40KiB") == 40_960
    assert parse_size("80GB") == 80e9
    assert parse_size("1.5GiB") == 1.5 * 2**30
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_catalogue_entries_are_validated() -> None:
    catalogue = default_catalogue()
    assert {"h100", "h200", "a100-40gb", "a100-80gb", "l40s", "b200"} <= set(catalogue.gpus)
    assert {"llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen2.5-72b", "deepseek-v3"} <= set(catalogue.models)
    with pytest.raises(CatalogueError, match=r"models\.bad: layers"):
        parse_catalogue({"models": {"bad": {"source": "x", "params": 1e9, "layers": "many", "kv_heads": 1,
                                            "head_dim": 64}}})


T_MS = 1_800_000_000_000
BUCKETS = (10.0, 100.0, 1000.0, 10000.0, float("inf"))


def _agent_store() -> Any:
    """An agent's store over 30 minutes: long requests (4,000 + 800 tokens) until 12 minutes ago, then short
    ones (100 + 20); one finished request every 15 s; a 500,000-token pool; completions at 0.58/s."""
    from watchdog.model import Sample, metric
    from watchdog.store import Store

    store = Store(retention_ms=3_600_000)
    counts = {"prompt": [0.0, 0.0], "generation": [0.0, 0.0]}  # count, sum
    buckets = {"prompt": dict.fromkeys(BUCKETS, 0.0), "generation": dict.fromkeys(BUCKETS, 0.0)}
    for t_ms in range(T_MS - 1_800_000, T_MS + 1, 15_000):
        recent = t_ms > T_MS - 720_000
        samples = [Sample(metric("engine:kv_cache_capacity_tokens:sum", engine="0"), 500_000.0),
                   Sample(metric("engine:request_completions:rate5m", engine="0"), 0.58)]
        for kind, tokens in (("prompt", 100.0 if recent else 4000.0), ("generation", 20.0 if recent else 800.0)):
            counts[kind][0] += 1
            counts[kind][1] += tokens
            name = f"engine:request_{kind}_tokens"
            for le in BUCKETS:
                buckets[kind][le] += 1.0 if tokens <= le else 0.0
                text = "+Inf" if le == float("inf") else f"{le:g}"
                samples.append(Sample(metric(name + "_bucket", engine="0", le=text), buckets[kind][le]))
            samples += [Sample(metric(name + "_count", engine="0"), counts[kind][0]),
                        Sample(metric(name + "_sum", engine="0"), counts[kind][1])]
        store.ingest("engines", samples, t_ms)
    return store


def _serving_agent() -> Any:
    """The agent's real query API over :func:`_agent_store`, on loopback."""
    from http.server import BaseHTTPRequestHandler

    from tests.loopback import serving
    from watchdog.exporter.api import QueryAPI

    api = QueryAPI(_agent_store(), clock=lambda: T_MS / 1000)

    class Agent(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            path, _, query = self.path.partition("?")
            answer = api.handle("POST", path, query, body, self.headers.get("Content-Type", ""))
            self.send_response(answer.code)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:
            return

    return serving(Agent)


def test_live_lengths_come_from_the_recent_window_not_the_engines_life() -> None:
    from watchdog.capacity.live import fetch_live

    with _serving_agent() as url:
        recent = fetch_live(url)
        whole = fetch_live(url, window_seconds=1800)
    assert recent.lengths is not None and whole.lengths is not None
    assert recent.lengths.prompt_mean == pytest.approx(100) and recent.lengths.output_mean == pytest.approx(20)
    assert recent.lengths.source == f"live:{url}, last 10m"
    assert whole.lengths.prompt_mean > 2000  # the long requests of 30 minutes ago
    assert recent.kv_pool_tokens == 500_000 and recent.rate == pytest.approx(0.58)


def test_plan_from_a_running_agent_uses_one_pool_and_says_which(capsys: pytest.CaptureFixture[str]) -> None:
    with _serving_agent() as url:
        doc = plan_json(["--model", "llama-3.1-8b", "--gpu", "h100", "--from", url,
                         "--node-throughput", "1000"], capsys)
        assert main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--from", url, "--window", "5m",
                     "--node-throughput", "1000"]) == 0
        text = capsys.readouterr().out
        explicit = plan_json(["--model", "llama-3.1-8b", "--gpu", "h100", "--from", url,
                              "--modelled-pool", "--rate", "10", "--prompt-tokens", "100", "--output-tokens", "10",
                              "--node-throughput", "1000"], capsys)
    assert doc["b_max"]["pool"] == "live" and doc["b_max"]["pool_source"] == f"live:{url}"
    assert doc["b_max"]["p90"] == int(500_000 // doc["lengths"]["p90"]["total"])
    assert doc["lengths"]["source"] == f"live:{url}, last 10m"
    assert doc["demand"]["rate_per_second"] == pytest.approx(0.58)
    # the live pool alone: no line of the GPU's modelled memory beside it
    assert "pool: live" in text and "4 KV pool" not in text and "MB per request" not in text
    assert f"live:{url}, last 5m" in text
    assert explicit["b_max"]["pool"] == "modelled" and explicit["b_max"]["pool_source"] == "ledgers"
    assert explicit["demand"]["rate_per_second"] == 10 and explicit["lengths"]["mean"]["prompt"] == 100


def test_from_an_unreachable_agent_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.ports import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert main(["plan", "--model", "llama-3.1-8b", "--from", url]) == 2
    assert f"--from {url}/api/v1/query: cannot read the agent's query API" in capsys.readouterr().err


def test_warnings_for_impossible_tp_and_fp8_without_fp8_cores() -> None:
    plan = make_plan(_inputs("llama-3.1-8b", gpu="a100-80gb", tp=3, weight_dtype_override="fp8"))
    assert any("TP=3" in w for w in plan.warnings)
    assert any("no FP8 tensor cores" in w for w in plan.warnings)


def test_layer_types_mark_the_windowed_layers(tmp_path: Path) -> None:
    """Newer configs (Gemma 3, gpt-oss) list each layer's attention: only those layers are windowed."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "hidden_size": 2560, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "sliding_window": 1024, "intermediate_size": 10240, "vocab_size": 262144,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}))
    spec = model_from_hf_config(config)
    assert (spec.sliding_window, spec.sliding_layers) == (1024, 5)
    per_layer = 2 * 4 * 256 * 2
    assert kv_bytes_per_request(spec, 2.0, Parallelism(), 4096) == per_layer * (4096 + 5 * 1024)


def test_pipeline_parallel_splits_layers_and_weights() -> None:
    one = make_plan(_inputs("llama-3.1-405b", gpu="h200", tp=8))
    two = make_plan(replace(_inputs("llama-3.1-405b", gpu="h200", tp=8), par=Parallelism(8, 2)))
    assert two.kv_bytes_per_token == one.kv_bytes_per_token / 2
    assert two.ledgers.weights_bytes == pytest.approx(one.ledgers.weights_bytes / 2)
    assert two.b_max_p90 > 2 * one.b_max_p90
