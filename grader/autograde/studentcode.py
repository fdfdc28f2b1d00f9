"""The code a student wrote for each exercise: the cells that define the names it grades, and the release's code.

Similarity is about what students wrote, not what they were given: the release's notebook (notebooks/, what
students were handed) is the boilerplate every comparison ignores, and an exercise's code is the text of the
cells that define its names (helpers in the same cell come along, wherever they sit in it).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from grader.registry import Exercise

RELEASE = Path(__file__).resolve().parents[2] / "notebooks"


def code_cells(path: Path) -> list[str]:
    """The sources of a notebook's code cells; [] for a file that is not a readable notebook."""
    try:
        nb = json.loads(path.read_bytes().decode("utf-8-sig"))
        cells = nb.get("cells", []) if isinstance(nb, dict) else []
    except (OSError, ValueError):
        return []
    sources = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append("".join(map(str, source)) if isinstance(source, list) else str(source))
    return sources


def _defines(name: str) -> re.Pattern[str]:
    """A top-level definition of `name`, as Python would bind it when the cell runs."""
    n = re.escape(name)
    return re.compile(rf"^(?:(?:async\s+)?def\s+{n}\b|class\s+{n}\b|{n}\s*(?::[^=\n]*)?=(?!=))", re.M)


@dataclass(frozen=True)
class ExerciseCode:
    """What one student wrote for one exercise (the empty string when no cell defines its names)."""
    student: str
    exercise: str
    code: str


def exercise_code(cells: list[str], exercise: Exercise) -> str:
    """The cells, in notebook order, that define any of the exercise's names, joined (each cell once)."""
    patterns = [_defines(name) for name in exercise.needs]
    return "\n\n".join(cell for cell in cells if any(p.search(cell) for p in patterns))


def release_code(chapter: str, release: Path = RELEASE) -> str:
    """Every code cell of the chapter's release notebook: what no student wrote themselves."""
    return "\n\n".join(code_cells(release / f"{chapter}.ipynb"))
