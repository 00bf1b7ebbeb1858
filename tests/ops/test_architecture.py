"""The import layering of docs/architecture.md, enforced: each package imports only the packages below it.

Read from the source with ``ast`` (no import side effects): every ``import watchdog.X`` and
``from watchdog.X import ...`` anywhere in a module, function-level imports included.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "watchdog"

# Unit -> the units it may import (besides itself). A unit is a sub-package or a top-level module.
# Kept in the same order and with the same contents as the table in docs/architecture.md.
ALLOWED: dict[str, set[str]] = {
    "golang": set(),
    "model": set(),
    "xid": set(),
    "fakes": set(),
    "infra": set(),
    "loadtest": set(),
    "exposition": {"model"},
    "store": {"golang", "model"},
    "config": {"infra"},
    "kmsg": {"xid"},
    "pods": {"model"},
    "promql": {"golang", "model", "store"},
    "engines": {"config", "model"},
    "capacity": {"exposition", "loadtest", "model", "promql"},
    "rules": {"config", "engines", "golang", "infra", "model", "promql", "store"},
    "collectors": {"config", "engines", "exposition", "infra", "kmsg", "model", "pods", "store", "xid"},
    "serving": {"config", "infra", "model", "promql"},
    "exporter": {"config", "golang", "infra", "model", "pods", "promql", "rules", "serving", "store"},
    "runbooks": {"config", "infra", "model", "promql", "rules", "serving"},
    "kube": {"config", "infra", "model", "runbooks"},
    "promtool": {"golang", "infra", "model", "promql", "rules", "store"},
    "notify": {"config", "infra", "model", "runbooks"},
    "agent": {"collectors", "config", "infra", "kube", "model", "notify", "pods", "rules", "runbooks", "serving",
              "store"},
    "check": {"collectors", "config", "model", "rules", "store"},
    "daemon": {"agent", "config", "exporter", "infra", "rules", "serving"},
    "demo": {"agent", "collectors", "config", "daemon", "engines", "fakes", "infra", "model", "promtool",
             "rules", "store"},
    "cli": {"agent", "capacity", "check", "collectors", "config", "daemon", "demo", "engines", "exposition", "golang",
            "infra", "kmsg", "loadtest", "model", "notify", "promql", "promtool", "rules", "runbooks", "serving",
            "store", "xid"},
    "__main__": {"cli"},
}


# Inside ``notify``: the same rule, one level down. Decisions are pure, delivery is the generic notifier
# contract and its durability, channels are the notifiers; the dispatcher and the registry compose them.
NOTIFY_ALLOWED: dict[str, set[str]] = {
    "decisions": set(),
    "delivery": {"decisions"},
    "channels": {"decisions", "delivery"},
    "registry": {"channels", "delivery"},
    "dispatcher": {"channels", "decisions", "delivery", "registry"},
}


def _unit(module: str, depth: int = 1) -> str:
    """``watchdog.rules.loader`` -> ``rules``; ``watchdog.agent`` -> ``agent``; ``watchdog`` -> ``""``; at
    ``depth`` 2, ``watchdog.notify.channels.log`` -> ``notify.channels``."""
    return ".".join(module.split(".")[1:1 + depth])


def imports_by_unit(package: Path = PACKAGE, depth: int = 1, under: str = "") -> dict[str, set[str]]:
    """Every unit of ``package`` (its first ``depth`` name parts; modules in the folder ``under`` only) and
    the other units its modules import."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in sorted((package / under).rglob("*.py")):
        relative = path.relative_to(package.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        source = _unit(".".join(parts), depth)
        if not source:
            continue
        edges.setdefault(source, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] if node.module != "watchdog" else [f"watchdog.{a.name}" for a in node.names]
            for target in targets:
                if target.split(".")[0] == "watchdog" and _unit(target, depth) not in ("", "__version__", source):
                    edges[source].add(_unit(target, depth))
    return edges


@cache
def package_imports() -> dict[str, frozenset[str]]:
    """:func:`imports_by_unit` of the watchdog package, parsed once per test process (seconds of CPU each)."""
    return {unit: frozenset(targets) for unit, targets in imports_by_unit().items()}


def test_every_unit_has_a_place_in_the_layering() -> None:
    assert set(package_imports()) <= set(ALLOWED), set(package_imports()) - set(ALLOWED)


def test_no_package_imports_above_its_layer() -> None:
    violations = [f"{source} imports {target}" for source, targets in sorted(package_imports().items())
                  for target in sorted(targets - ALLOWED.get(source, set()))]
    assert violations == []


def test_the_layering_has_no_cycles() -> None:
    seen: dict[str, int] = {}

    def visit(unit: str, path: tuple[str, ...]) -> None:
        assert unit not in path, " -> ".join((*path, unit))
        if seen.get(unit):
            return
        for target in sorted(ALLOWED[unit]):
            visit(target, (*path, unit))
        seen[unit] = 1

    for unit in ALLOWED:
        visit(unit, ())


def notify_imports() -> dict[str, set[str]]:
    """Every unit of ``watchdog/notify/`` (a sub-package or a module) and the other units it imports."""
    edges = imports_by_unit(PACKAGE, depth=2, under="notify")
    return {unit[len("notify."):]: {t[len("notify."):] for t in targets if t.startswith("notify.")}
            for unit, targets in edges.items() if unit.startswith("notify.")}


def test_notify_reads_as_decisions_delivery_channels() -> None:
    edges = notify_imports()
    assert set(edges) == set(NOTIFY_ALLOWED)
    violations = [f"notify.{source} imports notify.{target}" for source, targets in sorted(edges.items())
                  for target in sorted(targets - NOTIFY_ALLOWED[source])]
    assert violations == []


def test_fakes_reach_production_only_through_the_demo() -> None:
    importers = {source for source, targets in package_imports().items() if "fakes" in targets}
    assert importers <= {"demo"}, importers


def test_the_check_itself_sees_violations(tmp_path: Path) -> None:
    """The AST reading catches function-level imports too (what a lazy import would hide)."""
    rules = tmp_path / "watchdog" / "rules"
    rules.mkdir(parents=True)
    (rules / "__init__.py").write_text("")
    (rules / "sneaky.py").write_text(
        "from watchdog.promql import parse_query\n"
        "def f():\n    from watchdog.agent import Agent\n    import watchdog.fakes.pynvml\n")
    edges = imports_by_unit(tmp_path / "watchdog")
    assert edges == {"rules": {"promql", "agent", "fakes"}}
    assert edges["rules"] - ALLOWED["rules"] == {"agent", "fakes"}
