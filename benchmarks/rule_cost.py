#!/usr/bin/env python3
"""Where rule evaluation time goes, per group and per rule, with retention full; checkouts side by side.

Guards the rule pack's share of the CPU target: rule evaluation per tick at 8 x 8, every window full.

    .venv/bin/python benchmarks/rule_cost.py [--size 8x8] [--retention 900] [--ticks 60] [--top 15]
                                             [--tree main=/path/to/old/checkout --tree this=.]

Each checkout (default: this tree) runs in its own child process, all at the same time (the same machine
load for each): one agent as ``simnode.simulated_agent`` builds it (fake NVML, the engines of the simulated
node serving the full vLLM V1 payload, the whole default rule pack, default settings, simulated 1 s ticks)
runs ``--retention`` ticks with the defaults so that every window is full, then ``--ticks`` measured ticks
in which the CPU time (``time.thread_time``) of every rule evaluation, and of storing its output (the
store's ingest of the rule's source), is summed per rule. A checkout's own virtual environment
(``TREE/.venv``) runs it when it has one. Printed: rule-engine and agent CPU per tick, each group's and the
costliest rules' CPU per tick, per checkout, and the ratio of the first checkout to the others; and each
checkout's warnings (fill and measured ticks), counted by message, group, rule and reason. Read the ratios:
the machines are shared.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def child(tree: Path, gpus: int, engines: int, retention: int, ticks: int) -> dict[str, Any]:
    """Fill, then measure per-rule CPU in ``tree``'s code (run inside the child process)."""
    sys.path.insert(0, str(tree))
    sys.path.insert(0, str(tree / "benchmarks"))
    from simnode import run_ticks, simulated_agent, start_engines  # type: ignore[import-not-found]

    from watchdog.rules import engine as rules_engine

    warnings: collections.Counter[str] = collections.Counter()

    class Tally(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            fields = [str(getattr(record, key)) for key in ("rule_group", "rule", "reason") if hasattr(record, key)]
            warnings[" ".join([record.getMessage(), *fields])] += 1

    logging.getLogger().addHandler(Tally(logging.WARNING))
    proc, ports = start_engines(engines)
    try:
        agent, now = simulated_agent(gpus, ports, retention, Path(tempfile.mkdtemp()))
        started = time.monotonic()
        run_ticks(agent, now, retention)
        fill_s = time.monotonic() - started
        spent: collections.Counter[str] = collections.Counter()
        original = rules_engine.RuleEngine._evaluate_rule

        def timed(self: Any, runtime: Any, index: int, rule: Any, t_ms: int) -> Any:
            begun = time.thread_time()
            try:
                return original(self, runtime, index, rule, t_ms)
            finally:
                spent[json.dumps([runtime.key, index, rule.name])] += time.thread_time() - begun

        rules_engine.RuleEngine._evaluate_rule = timed  # type: ignore[method-assign]
        # A rule's cost includes storing its output: the store's ingest of its source.
        engine = agent.rule_engine
        keys = {engine._source(rt, index): json.dumps([rt.key, index, rule.name])
                for rt in engine._groups for index, rule in enumerate(rt.group.rules)}
        store_class = type(agent.store)
        ingest = store_class.ingest

        def timed_ingest(self: Any, source: str, *args: Any, **kwargs: Any) -> Any:
            key = keys.get(source)
            if key is None:
                return ingest(self, source, *args, **kwargs)
            begun = time.thread_time()
            try:
                return ingest(self, source, *args, **kwargs)
            finally:
                spent[key] += time.thread_time() - begun

        store_class.ingest = timed_ingest  # type: ignore[method-assign]
        cpu, rules = run_ticks(agent, now, ticks)
        return {"fill_s": fill_s, "warnings": dict(warnings), "series": len(agent.store),
                "cpu_ms_per_tick": cpu / ticks * 1000, "rules_ms_per_tick": sum(rules) / ticks * 1000,
                "per_rule_ms_per_tick": {key: value / ticks * 1000 for key, value in spent.items()}}
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    """Run every checkout side by side and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="8x8", help="GPUsxengines")
    parser.add_argument("--retention", type=int, default=900, help="retention_seconds (ticks to fill)")
    parser.add_argument("--ticks", type=int, default=60, help="measured ticks (a multiple of 5)")
    parser.add_argument("--top", type=int, default=15, help="rules listed")
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a checkout (repeatable)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    gpus, engines = (int(x) for x in args.size.split("x"))
    if args.child:
        print(json.dumps(child(Path(args.child), gpus, engines, args.retention, args.ticks)))
        return 0
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree or ["this=."])]
    procs = []
    for _, tree in trees:
        python = tree / ".venv" / "bin" / "python"
        command = [str(python if python.exists() else sys.executable), str(HERE), "--child", str(tree),
                   "--size", args.size, "--retention", str(args.retention), "--ticks", str(args.ticks)]
        procs.append(subprocess.Popen(command, cwd=tree, stdout=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"a child failed ({proc.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    names = [name for name, _ in trees]
    first = results[0]

    def row(label: str, values: list[float]) -> str:
        ratios = "".join(f" {values[0] / v:6.2f}x" if v else "        " for v in values[1:])
        return f"{label:<62}" + "".join(f" {v:9.2f}" for v in values) + ratios

    print(f"{args.size}, retention {args.retention} s full, {args.ticks} measured ticks, ms of CPU per tick")
    print(f"{'':<62}" + "".join(f" {n:>9}" for n in names) + "".join(f" {names[0]}/{n}" for n in names[1:]))
    print(row("agent (all threads)", [r["cpu_ms_per_tick"] for r in results]))
    print(row("rule engine", [r["rules_ms_per_tick"] for r in results]))
    groups: list[collections.Counter[str]] = []
    for r in results:
        per_group: collections.Counter[str] = collections.Counter()
        for key, value in r["per_rule_ms_per_tick"].items():
            per_group[json.loads(key)[0]] += value
        groups.append(per_group)
    for group, _ in groups[0].most_common():
        print(row(f"  group {group}", [g.get(group, 0.0) for g in groups]))
    for name, r in zip(names, results, strict=True):
        for text, count in sorted(r.get("warnings", {}).items()):
            print(f"{name}: {count} x warning: {text}")
    ranked = sorted(first["per_rule_ms_per_tick"].items(), key=lambda item: -item[1])[:args.top]
    for key, _ in ranked:
        group, index, rule = json.loads(key)
        print(row(f"  {group}/{index} {rule}"[:62], [r["per_rule_ms_per_tick"].get(key, 0.0) for r in results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
