"""Every pointer into the design document names it by its path in the repository and a section
it has: ``docs/DESIGN.md, "Span record"``."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "DESIGN.md"
#: A mention of the document in prose (not a path being built in code: ``"docs" / "DESIGN.md"``)
#: and, after it, the quoted section names.
POINTER = re.compile(
    r"""(?<![\w"'/.-])([\w./-]*DESIGN\.md)(?:,? ("[^"\s][^"\n]*"(?: and "[^"\s][^"\n]*")*))?"""
)


def _sources() -> list[Path]:
    return [
        *sorted((REPO / "mlms").rglob("*.py")),
        *sorted((REPO / "tests").rglob("*.py")),
        *sorted((REPO / "benchmarks").rglob("*.py")),
        REPO / "README.md",
    ]


def sections() -> set[str]:
    return {line[3:].strip() for line in DESIGN.read_text().splitlines() if line.startswith("## ")}


def pointers(text: str) -> list[tuple[str, list[str]]]:
    """(the path as written, the sections named) of each mention of DESIGN.md."""
    found = []
    for match in POINTER.finditer(text):
        named = re.findall(r'"([^"]+)"', match.group(2) or "")
        path = match.group(1)
        found.append((path, named))
    return found


def test_every_pointer_names_the_document_and_a_section_it_has() -> None:
    known = sections()
    bad = []
    for source in _sources():
        if source == Path(__file__):
            continue
        for path, named in pointers(source.read_text()):
            if path != "docs/DESIGN.md" or not named or set(named) - known:
                bad.append(f"{source.relative_to(REPO)}: {path} {named}")
    assert not bad, f"pointers that miss docs/DESIGN.md or its sections ({sorted(known)}): {bad}"


def test_the_check_reads_pointers() -> None:
    assert pointers('(docs/DESIGN.md, "Leveled measurement" and "Measurement rules")') == [
        ("docs/DESIGN.md", ["Leveled measurement", "Measurement rules"])
    ]
    assert pointers("see ../shared/DESIGN.md") == [("../shared/DESIGN.md", [])]
