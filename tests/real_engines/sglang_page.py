"""An SGLang ``/metrics`` page rendered by SGLang's own metric code (a step of the real-engine lane).

Runs in the lane's separate SGLang environment (``.real-engines/sglang-venv``: sglang installed with
``--no-deps`` beside torch/torchvision and the few pure-Python packages its import chain needs), not in the
vLLM one: SGLang's import chain wants a torchvision that matches its torch, which vLLM's CPU torch lacks.

Nothing of SGLang is stubbed or patched: the real ``ServerArgs`` (pointed at the lane's local tiny model,
metrics enabled) is published into SGLang's runtime context the way its scheduler and tokenizer processes
do, the collectors are built by SGLang's own factories (``SchedulerMetricsCollector.init_new``,
``tokenizer_metric_labels``), and they are driven through their public methods with the values a loaded
single-GPU server reports: running and queued requests, token usage, retractions, finished and aborted
requests with cached prompt tokens, TTFT / inter-token / end-to-end latencies. The page is
prometheus_client's ``generate_latest`` of the default registry, which is what SGLang's ``/metrics``
serves in single-process mode. Only stdlib, sglang and prometheus_client are imported here.

    .real-engines/sglang-venv/bin/python -m tests.real_engines.sglang_page --model DIR [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
from importlib.metadata import version
from pathlib import Path

MODEL_NAME = "tiny"


def _publish(model: Path) -> object:
    """SGLang's ServerArgs for the local model, published as its scheduler process does; returns it."""
    from sglang.srt import runtime_context
    from sglang.srt.server_args import ServerArgs

    args = ServerArgs(model_path=str(model), served_model_name=MODEL_NAME, enable_metrics=True,
                      device="cpu", skip_server_warmup=True)
    runtime_context.publish(args, role="scheduler", ranks=runtime_context.SpawnRanks(world_rank=0))
    return args


def capture_sglang_page(model: Path, out: Path, *, seed: int = 7) -> str:
    """Drive SGLang's collectors with one loaded server's values, write the page to ``out``, return it."""
    import prometheus_client
    from sglang.srt.observability import metrics_collector as mc

    rng = random.Random(seed)
    args = _publish(model)
    sched_ctx = mc.SchedulerMetricsCollector.init_new(server_args=args, enable_priority_scheduling=False,
                                                       enable_lora=False, enable_hierarchical_cache=False)
    sched = sched_ctx.collector
    assert sched is not None, "SGLang built no scheduler collector although enable_metrics is set"
    tok = mc.TokenizerMetricsCollector(server_args=args, labels=mc.tokenizer_metric_labels())
    tok_labels = mc.tokenizer_metric_labels()

    pool = 263808
    sched.emit_constants(max_total_num_tokens=pool, max_total_num_tokens_swa=None, weight_memory_usage_gb=16.2,
                         kv_cache_memory_usage_gb=48.3, graph_memory_usage_gb={"decode": 0.6},
                         max_running_requests_under_SLO=None, page_size=1, num_pages=pool,
                         context_len=32768, startup_available_gpu_memory_gb=79.1)
    used = 187311
    stats = mc.SchedulerStats(
        num_running_reqs=mc.QueueCount(total=33), num_queue_reqs=mc.QueueCount(total=6),
        gen_throughput=2211.5, cache_hit_rate=0.35, token_usage=used / pool, full_token_usage=used / pool,
        num_used_tokens=used, kv_used_tokens=used, kv_available_tokens=pool - used - 20000,
        kv_evictable_tokens=20000, num_retracted_reqs=2, utilization=0.93, new_token_ratio=0.41,
    )
    sched.log_stats(stats)
    sched.increment_retracted_reqs(num_retracted_reqs=12, num_retracted_input_tokens=12 * 1800,
                                   num_retracted_output_tokens=12 * 310)
    for _ in range(300):
        sched.observe_queue_time(rng.lognormvariate(-2.5, 1.1))

    for i in range(400):
        prompt = max(1, round(rng.lognormvariate(6.8, 1.0)))
        cached = int(prompt * rng.choice((0.0, 0.2, 0.6, 0.9)))
        generated = max(1, round(rng.lognormvariate(5.5, 0.8)))
        stream = i % 4 != 0
        tok.observe_time_to_first_token(tok_labels, rng.lognormvariate(-1.0, 0.8), stream=stream)
        for _ in range(4):
            tok.observe_inter_token_latency(tok_labels, rng.lognormvariate(-4.0, 0.4) * 8, 8)
        tok.observe_one_finished_request(
            tok_labels, prompt_tokens=prompt, generation_tokens=generated, cached_tokens=cached,
            e2e_latency=rng.lognormvariate(1.8, 0.7), has_grammar=False,
            cached_tokens_details={"device": cached, "host": 0} if cached else None, is_streaming=stream,
        )
    for _ in range(41):
        tok.observe_one_aborted_request(tok_labels)

    page = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    head = (f"# Rendered by SGLang's own metric code: sglang {version('sglang')} "
            f"(prometheus_client {version('prometheus_client')}, torch {version('torch')})\n"
            "# Method: tests/real_engines/sglang_page.py publishes a real ServerArgs (--enable-metrics, local "
            "tiny model) and drives SchedulerMetricsCollector / TokenizerMetricsCollector of "
            "sglang.srt.observability.metrics_collector through their own methods; page = generate_latest\n"
            f"# Date: {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}\n")
    out.write_text(head + page, encoding="utf-8")
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a local model directory (config.json)")
    parser.add_argument("--out", type=Path, help="default: .real-engines/captured/sglang-<v>-metrics-code.txt "
                        "(the lane's --capture copies it into tests/fixtures/engines/real/)")
    ns = parser.parse_args(argv)
    out = ns.out or (Path(__file__).resolve().parents[2] / ".real-engines" / "captured"
                     / f"sglang-{version('sglang')}-metrics-code.txt")
    out.parent.mkdir(parents=True, exist_ok=True)
    capture_sglang_page(ns.model, out)
    print(f"SGLang page written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
