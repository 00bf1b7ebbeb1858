"""``inference-watchdog plan``: how many nodes a model needs for a load and its SLOs (docs/capacity.md).

Prints the four memory ledgers per GPU, KV bytes per token, B_max per node at the mean and P90 request
length, the dual bound (memory by Little's law vs compute by generation throughput), the node count
after headroom and redundancy, and a sensitivity table; ``--json`` prints the document described in
docs/cli.md. Exit 0 with a plan, 2 on bad input or when the model cannot serve at all (the message says
what does not fit).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from watchdog.capacity.plan import PlanInputs

EXAMPLES = """\
examples:
  # B_max 625 at 2,000 tokens on Qwen2.5-72B, TP=8, from rounded inputs (80 GB, 18 GB weights, 40 KB/token)
  inference-watchdog plan --model qwen2.5-72b --gpu h800 --tp 8 --gpu-memory 80GB --weights 18GB \\
      --kv-bytes-per-token 40KB --prompt-tokens 1500 --output-tokens 500
  # 40 req/s, 1,200/400 tokens, 1,600 tokens/s per replica -> 15 replicas
  inference-watchdog plan --model qwen2.5-72b --gpu h800 --tp 8 --prompt-tokens 1200 --output-tokens 400 \\
      --rate 40 --ttft 0.6 --tpot 0.03 --node-throughput 1600
  # this node's real traffic and measured knee
  inference-watchdog plan --model llama-3.1-70b --gpu h100 --tp 4 --from http://127.0.0.1:9847 --knee knee.json
"""


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _size(text: str) -> float:
    from watchdog.capacity.units import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _duration(text: str) -> int:
    from watchdog.rules.durations import DurationError, parse_duration

    try:
        ms = parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if ms < 1000:
        raise argparse.ArgumentTypeError(f"must be at least 1s, got {text}")
    return ms // 1000


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg,unused-ignore]
    """Add the ``plan`` command."""
    p = sub.add_parser("plan", help="capacity plan: memory ledgers, B_max, dual bound, node count",
                       description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_argument_group("model and hardware")
    m.add_argument("--model", required=True,
                   help="catalogue name (llama-3.1-8b/70b/405b, qwen2.5-72b, mixtral-8x7b/8x22b, mistral-7b-v0.1, "
                        "deepseek-v3) or a Hugging Face config.json (or its directory)")
    m.add_argument("--params", type=_positive, help="total parameters, e.g. 72.7e9 (overrides the catalogue/estimate)")
    m.add_argument("--gpu", default="h100", help="h100, h800, h200, a100-80gb, a100-40gb, l40s, b200 (default h100)")
    m.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    m.add_argument("--pp", type=int, default=1, help="pipeline-parallel size (default 1)")
    m.add_argument("--weight-dtype", choices=["bf16", "fp16", "fp8", "int8", "int4"],
                   help="weights as served (default: the checkpoint's)")
    m.add_argument("--kv-dtype", choices=["auto", "bf16", "fp16", "fp8"], default="auto",
                   help="KV cache dtype; auto = 16-bit as vLLM (default)")
    m.add_argument("--alpha", type=float, default=0.9, help="gpu_memory_utilization cap (default 0.9)")
    m.add_argument("--runtime", type=_size, default=4e9, help="runtime per GPU: context, CUDA graphs (default 4GB)")
    m.add_argument("--activation", type=_size, default=0.0, help="activation buffer per GPU (default 0)")
    m.add_argument("--gpu-memory", type=_size, help="usable memory per GPU, overriding the catalogue (e.g. 80GB)")
    m.add_argument("--weights", type=_size, help="weights per GPU, overriding params x dtype / GPUs (e.g. 18GB)")
    m.add_argument("--kv-bytes-per-token", type=_size, help="KV bytes per token per GPU, overriding the model's")
    t = p.add_argument_group("traffic and objectives")
    t.add_argument("--prompt-tokens", type=_positive, help="mean prompt tokens")
    t.add_argument("--output-tokens", type=_positive, help="mean output tokens")
    t.add_argument("--p90-prompt-tokens", type=_positive, help="P90 prompt tokens (default: the mean)")
    t.add_argument("--p90-output-tokens", type=_positive, help="P90 output tokens (default: the mean)")
    t.add_argument("--lengths", type=Path, help="JSONL of {prompt_tokens, output_tokens}: means and P90s from it")
    t.add_argument("--from", dest="from_url", metavar="URL",
                   help="a running agent (http://host:9847): its engines' request lengths, arrival rate and live KV "
                        "pool (explicit lengths, --rate/--concurrency and --modelled-pool take precedence)")
    t.add_argument("--modelled-pool", action="store_true",
                   help="with --from: size B_max from the ledgers, not the live KV pool")
    t.add_argument("--window", type=_duration, default=None, metavar="DURATION",
                   help="with --from: request lengths over this recent window (default 10m)")
    load = t.add_mutually_exclusive_group()
    load.add_argument("--rate", type=_positive, help="peak arrival rate, requests/s")
    load.add_argument("--concurrency", type=_positive, help="peak requests in flight (instead of --rate)")
    t.add_argument("--ttft", type=_positive, default=0.6, help="TTFT objective, seconds (default 0.6)")
    t.add_argument("--tpot", type=_positive, default=0.03, help="TPOT objective, seconds (default 0.03)")
    t.add_argument("--slo-percentile", type=float, default=95.0, help="percentile of the objectives (default 95)")
    c = p.add_argument_group("capacity and margins")
    tput = c.add_mutually_exclusive_group()
    tput.add_argument("--node-throughput", type=_positive,
                      help="safe generation tokens/s per node under the TPOT objective (measured)")
    tput.add_argument("--knee", type=Path, help="a `loadtest --json` result: its knee's goodput is the node throughput")
    c.add_argument("--headroom", type=_positive, default=1.25, help="burst headroom factor (default 1.25)")
    c.add_argument("--redundancy", type=_positive, default=1.15, help="redundancy (DR) factor (default 1.15)")
    p.add_argument("--json", action="store_true", help="print the JSON document (docs/cli.md)")
    p.set_defaults(func=_plan)


def _fail(message: str) -> int:
    print(f"plan: error: {message}", file=sys.stderr)
    return 2


def build_inputs(args: argparse.Namespace) -> PlanInputs:
    """PlanInputs from parsed arguments; ValueError with a message naming the bad input."""
    from watchdog.capacity.catalogue import default_catalogue, resolve_model
    from watchdog.capacity.ledger import Parallelism
    from watchdog.capacity.plan import Lengths, PlanInputs, Slo
    from watchdog.capacity.units import lengths_from_pairs, read_length_pairs

    catalogue = default_catalogue()
    model = resolve_model(args.model, catalogue, args.params)
    gpu = catalogue.gpu(args.gpu)
    if args.tp < 1 or args.pp < 1:
        raise ValueError("--tp and --pp must be at least 1")
    if not 0 < args.alpha <= 1:
        raise ValueError(f"--alpha must be in (0, 1], got {args.alpha}")
    live = None
    if args.from_url:
        from watchdog.capacity.live import DEFAULT_WINDOW_SECONDS, fetch_live

        live = fetch_live(args.from_url, args.window or DEFAULT_WINDOW_SECONDS)
    if args.lengths is not None:
        lengths = lengths_from_pairs(read_length_pairs(args.lengths), source=str(args.lengths))
    elif args.prompt_tokens is not None and args.output_tokens is not None:
        lengths = Lengths(args.prompt_tokens, args.output_tokens,
                          args.p90_prompt_tokens or args.prompt_tokens, args.p90_output_tokens or args.output_tokens)
    elif live is not None and live.lengths is not None:
        lengths = live.lengths
    elif live is not None:
        raise ValueError(f"{live.source} has no finished requests in the last {live.window_seconds:g} s "
                         "(engine:request_prompt_tokens_*); give --prompt-tokens and --output-tokens, "
                         "or a longer --window")
    else:
        raise ValueError("give --prompt-tokens and --output-tokens, or --lengths FILE, or --from URL")
    rate = args.rate
    if rate is None and args.concurrency is None and live is not None and live.rate:
        rate = live.rate
    pool_tokens, pool_source = None, "ledgers"
    if live is not None and live.kv_pool_tokens and not args.modelled_pool:
        pool_tokens, pool_source = live.kv_pool_tokens, f"live:{live.source}"
    tps, source = args.node_throughput, "given"
    if args.knee is not None:
        from watchdog.loadtest.results import knee_throughput

        tps, source = knee_throughput(args.knee), f"knee:{args.knee}"
    return PlanInputs(
        model=model, gpu=gpu, lengths=lengths,
        slo=Slo(args.ttft, args.tpot, args.slo_percentile), par=Parallelism(args.tp, args.pp),
        weight_dtype=args.weight_dtype or model.weight_dtype, kv_dtype=args.kv_dtype, alpha=args.alpha,
        runtime_bytes=args.runtime, activation_bytes=args.activation, usable_bytes_override=args.gpu_memory,
        weights_bytes_override=args.weights, kv_bytes_per_token_override=args.kv_bytes_per_token,
        kv_pool_tokens_override=pool_tokens, kv_pool_source=pool_source, rate=rate, concurrency=args.concurrency,
        node_generation_tps=tps, node_generation_source=source,
        headroom=args.headroom, redundancy=args.redundancy,
    )


def _plan(args: argparse.Namespace) -> int:
    from watchdog.capacity.plan import make_plan
    from watchdog.capacity.render import plan_json, plan_text

    try:
        plan = make_plan(build_inputs(args))
    except ValueError as exc:  # boundary: bad input and PlanError (a ValueError) become one message
        return _fail(str(exc))
    if args.json:
        json.dump(plan_json(plan), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(plan_text(plan))
    return 0
