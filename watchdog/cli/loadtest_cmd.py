"""``inference-watchdog loadtest URL``: SLO attainment, throughput and goodput per load, and the knee.

Sends streaming requests to an OpenAI-compatible endpoint (vLLM, SGLang, the demo's simulated engine)
at a rate or a sweep of rates (Poisson or constant arrivals), or at fixed concurrencies; measures TTFT,
TPOT, inter-token latency and end-to-end time per request; and reports per load the share of requests
that met every objective (attainment), throughput, goodput and the zone (safe, degrading, collapsed),
plus the knee: the highest load before attainment first falls below its objective. Bounded: each step
sends at most --requests and stops issuing after --step-seconds; no step starts after --max-seconds.
Refuses a non-loopback URL unless --allow-remote. Exit 0 when a knee was found, 1 when even the lowest
load missed the objective, 2 on bad input. See docs/capacity.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

EXAMPLES = """\
examples:
  inference-watchdog loadtest http://127.0.0.1:8000 --sweep 1:10:1 --prompt-tokens 512 --output-tokens 128 \\
      --ttft 1.0 --tpot 0.05 --out results/
  inference-watchdog loadtest http://127.0.0.1:8000 --concurrency 1,8,32,64 --lengths traffic.jsonl --json
"""


def _loads(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"loads must be positive, got {text!r}")
    return values


def _sweep(text: str) -> tuple[float, ...]:
    try:
        start, stop, step = (float(v) for v in text.split(":"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected START:STOP:STEP, got {text!r}") from exc
    if start <= 0 or step <= 0 or stop < start or (stop - start) / step > 100:
        raise argparse.ArgumentTypeError(f"need 0 < START <= STOP and at most 100 steps, got {text!r}")
    count = round((stop - start) / step) + 1
    return tuple(round(start + i * step, 9) for i in range(count))


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``loadtest`` command."""
    p = sub.add_parser("loadtest", help="SLO sweep of an OpenAI-compatible endpoint: goodput and the knee",
                       description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", metavar="URL", help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback URL")
    p.add_argument("--api", choices=["completions", "chat"], default="completions",
                   help="endpoint (default completions)")
    p.add_argument("--model", default="default", help="model name sent in requests")
    p.add_argument("--api-key-env", metavar="VAR", help="read a bearer token from this environment variable")
    p.add_argument("--no-ignore-eos", action="store_true",
                   help="do not send ignore_eos (a vLLM/SGLang extension that fixes the output length)")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--rate", type=_loads, help="requests/s, or several: 2,4,8 (open loop)")
    load.add_argument("--sweep", type=_sweep, help="rates START:STOP:STEP, e.g. 1:10:1 (open loop)")
    load.add_argument("--concurrency", type=_loads, help="fixed concurrency, or several: 1,8,32 (closed loop)")
    p.add_argument("--arrival", choices=["poisson", "constant"], default="poisson", help="arrivals (default poisson)")
    p.add_argument("--seed", type=int, default=0, help="random seed for arrivals and lengths")
    lengths = p.add_argument_group("request lengths")
    lengths.add_argument("--prompt-tokens", type=int, default=512, help="mean prompt tokens (default 512)")
    lengths.add_argument("--output-tokens", type=int, default=128, help="mean output tokens (default 128)")
    lengths.add_argument("--length-distribution", choices=["fixed", "uniform", "lognormal"], default="fixed")
    lengths.add_argument("--length-spread", type=float, default=0.5, help="uniform +/- share, or lognormal sigma")
    lengths.add_argument("--lengths", type=Path, help="replay JSONL of {prompt_tokens, output_tokens}, in order")
    lengths.add_argument("--dataset", type=Path,
                         help="real prompts, in order: JSONL of {prompt, output_tokens?} or ShareGPT JSON "
                              "conversations (the first human turn; output length from the reply, else "
                              "--output-tokens)")
    p.add_argument("--no-preflight", action="store_true",
                   help="skip the one request sent first to fail fast on a dead endpoint")
    slo = p.add_argument_group("objectives")
    slo.add_argument("--ttft", type=float, default=1.0, help="TTFT objective per request, seconds (default 1.0)")
    slo.add_argument("--tpot", type=float, default=0.05, help="TPOT objective per request, seconds (default 0.05)")
    slo.add_argument("--attainment", type=float, default=0.9, help="share of requests that must meet both (0.9)")
    bounds = p.add_argument_group("bounds")
    bounds.add_argument("--requests", type=int, default=100, help="requests per step (default 100)")
    bounds.add_argument("--step-seconds", type=float, default=60.0, help="stop issuing a step after this (60)")
    bounds.add_argument("--max-seconds", type=float, default=600.0, help="start no step after this (600)")
    bounds.add_argument("--timeout", type=float, default=120.0, help="per-request total timeout, seconds (120)")
    bounds.add_argument("--max-in-flight", type=int, default=256, help="client-side cap on open requests (256)")
    bounds.add_argument("--keep-going", action="store_true", help="continue the sweep after a collapsed step")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the JSON document (docs/cli.md) instead of a table")
    out.add_argument("--out", type=Path,
                     help="write result.json, result.csv (per load), requests.csv (per request), chart.png here")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_loadtest)


def _fail(message: str) -> int:
    print(f"loadtest: error: {message}", file=sys.stderr)
    return 2


def _loadtest(args: argparse.Namespace) -> int:
    from watchdog.capacity.units import read_length_pairs
    from watchdog.loadtest.analysis import Objectives
    from watchdog.loadtest.client import Api, CompletionRequest, OpenAIClient
    from watchdog.loadtest.report import (
        ChartUnavailable,
        ProgressBar,
        result_json,
        result_text,
        write_chart,
        write_csv,
        write_requests_csv,
    )
    from watchdog.loadtest.sweep import SweepConfig, run_sweep
    from watchdog.loadtest.target import check_target
    from watchdog.loadtest.workload import Arrival, Distribution, LengthSource, read_prompt_dataset

    try:
        check_target(args.url, args.allow_remote)
        if min(args.requests, args.prompt_tokens, args.output_tokens, args.max_in_flight) < 1:
            raise ValueError("--requests, --prompt-tokens, --output-tokens and --max-in-flight must be at least 1")
        if not 0 < args.attainment <= 1:
            raise ValueError("--attainment must be in (0, 1]")
        if args.lengths and args.dataset:
            raise ValueError("--lengths and --dataset both set the requests: give one")
        replay = tuple(read_length_pairs(args.lengths)) if args.lengths else ()
        prompts = read_prompt_dataset(args.dataset) if args.dataset else ()
        api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
        if args.api_key_env and not api_key:
            raise ValueError(f"--api-key-env: environment variable {args.api_key_env} is not set")
        client = OpenAIClient(args.url, read_timeout=min(args.timeout, 30.0), total_timeout=args.timeout,
                              api_key=api_key)
    except ValueError as exc:  # boundary: every bad input becomes one message
        return _fail(str(exc))
    if not args.no_preflight:
        probe = CompletionRequest(prompt=prompts[0].prompt if prompts else "hi", max_tokens=2, model=args.model,
                                  api=Api(args.api), ignore_eos=not args.no_ignore_eos)
        answer = client.send(probe)
        if answer.error is not None:
            return _fail(f"the preflight request to {args.url} failed: {answer.error} (nothing was swept; "
                         "--no-preflight skips this check)")
    rates = args.rate or args.sweep or ()
    config = SweepConfig(
        target=args.url, objectives=Objectives(args.ttft, args.tpot, args.attainment),
        rates=tuple(rates), concurrencies=tuple(int(c) for c in (args.concurrency or ())),
        arrival=Arrival(args.arrival),
        lengths=LengthSource(args.prompt_tokens, args.output_tokens, Distribution(args.length_distribution),
                             args.length_spread, replay, prompts),
        requests=args.requests, step_seconds=args.step_seconds, max_total_seconds=args.max_seconds,
        max_in_flight=args.max_in_flight, model=args.model, api=Api(args.api), seed=args.seed,
        keep_going=args.keep_going, ignore_eos=not args.no_ignore_eos,
    )
    progress = None if args.no_progress else ProgressBar(sys.stderr)
    result = run_sweep(config, client, progress.start_step if progress else None,
                       progress.on_result if progress else None)
    if progress:
        progress.finish()
    document = result_json(result)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "result.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        write_csv(result, args.out / "result.csv")
        write_requests_csv(result, args.out / "requests.csv")
        try:
            write_chart(result, args.out / "chart.png")
        except ChartUnavailable as exc:
            print(f"loadtest: no chart: {exc}", file=sys.stderr)
    if args.json:
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result_text(result))
    return 0 if result.knee_status != "none" else 1  # "not reached" is no failure: sweep higher
