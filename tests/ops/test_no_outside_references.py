"""Everything the project prints or ships stands on its own: no text cites course material, a section of
it, or a path outside the repository (``../shared``) that an operator does not have. A fact used in a
doc, a rule, a runbook, a scenario or a message states itself and its reason where it is used."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("README.md", "docs", "watchdog", "runbooks", "rules", "scenarios", "systemd", "dashboards",
           "scripts")
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".json", ".txt", ".service", ".rules", ".example", ""}
FORBIDDEN = re.compile(
    r"\blectures?\b|\.\./shared|\bshared/seed\b|FIELD-GUIDE|\bfield[- ]guide\b"
    r"|\bsections? \d+(\.\d+)?\b|\blabs? \d\b|\bappendix [A-Z]?\.?\d",
    re.IGNORECASE,
)


def _shipped_files() -> list[Path]:
    files: list[Path] = []
    for top in SHIPPED:
        path = REPO / top
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [p for p in candidates if p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    return files


def references(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line that cites something the operator does not have."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if FORBIDDEN.search(line)]


def test_the_pattern_catches_what_it_must() -> None:
    for text in ("as the lecture shows", "see ../shared/seed", "FIELD-GUIDE.md", "the field guide's probe",
                 "the lecture's section 0.2", "as lab 1 does", "Section 2.4: 12.6 s", "Appendix A.1"):
        assert references(text), text
    for text in ("seed: 1234", "--seed 7", "a fixed seed", "the sections below", "label 1"):
        assert not references(text), text


def test_no_shipped_text_cites_material_operators_do_not_have() -> None:
    found = [f"{path.relative_to(REPO)}:{n}: {line}" for path in _shipped_files()
             for n, line in references(path.read_text(encoding="utf-8", errors="replace"))]
    assert not found, "cite the fact and its reason instead:\n" + "\n".join(found)
