"""Fenced code blocks of the README and docs/ (what tests/docs/ checks)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<info>[^\n`]*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its file (relative to the repository), first line of code, info string
    (``python``, ``bash``, ...; ``""`` when bare), code (dedented) and the section it is in."""

    path: str
    line: int
    lang: str
    code: str
    section: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def pages() -> list[Path]:
    """README.md and every hand-written page of docs/ (not the generated API reference)."""
    return [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` in order (indented ones, as in list items, dedented)."""
    rel = path.relative_to(ROOT).as_posix()
    found: list[Block] = []
    section = ""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):  # (fenced lines are skipped below)
            section = line.lstrip("#").strip()
        m = _FENCE.match(line)
        if m is None:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        lang = m["info"].strip().split(" ")[0] if m["info"].strip() else ""
        found.append(Block(rel, i + 2, lang, "\n".join(body) + "\n", section))
        i = j + 1
    return found


def section_blocks(path: Path, heading: str) -> list[Block]:
    """The blocks under the heading ``heading`` (its text without the ``#``)."""
    return [b for b in blocks(path) if b.section == heading]
